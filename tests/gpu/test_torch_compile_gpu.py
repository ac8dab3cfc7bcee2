"""numba_ws GEMM + bias + ReLU as a torch custom op on the GPU (issue 20 item 1):
``torch.compile(fullgraph=True)`` (Inductor) == eager == float64 reference, launches on
torch's current stream (ordering on a non-default stream, CUDA graph capture).

Shapes are not multiples of the tiles; outputs start as NaN where the kernel writes
into a given tensor. The CPU side (registration, fake, opcheck, graphs) is
tests/test_torch_integration.py."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch with CUDA")
if not torch.cuda.is_available():
    pytest.skip("torch has no CUDA device (a CPU-only torch build?)", allow_module_level=True)

import numba_ws as ws
from numba_ws.runtime import interop
from numba_ws.torch import custom_op
import kernels_tiles as kt

META = dict(BM=128, BN=128, BK=64, num_consumer_groups=2)
M, N, K = 1000, 776, 520          # none a multiple of its tile; rows 16-byte aligned
gemm_bias_relu = ws.jit(kt.gemm_bias_relu)


def _grid(M, N):
    return (ws.cdiv(M, META["BM"]) * ws.cdiv(N, META["BN"]),)


@custom_op("numba_ws_gpu_tests::gemm_bias_relu", mutates_args=(),
           fake=lambda a, b, bias: a.new_empty((a.shape[0], b.shape[1])))
def gemm_bias_relu_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    c = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=a.dtype, device=a.device)
    gemm_bias_relu[_grid(a.shape[0], b.shape[1])](a, b, bias, c, **META)
    return c


@custom_op("numba_ws_gpu_tests::gemm_bias_relu_into", mutates_args=("c",))
def gemm_bias_relu_into(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor,
                        c: torch.Tensor) -> None:
    gemm_bias_relu[_grid(c.shape[0], c.shape[1])](a, b, bias, c, **META)


class Block(torch.nn.Module):
    """A linear layer with ReLU whose matmul is the numba_ws op, torch ops around it."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.w = torch.nn.Parameter((torch.randn(K, N, generator=g) / K ** 0.5).half().cuda(),
                                    requires_grad=False)
        self.bias = torch.nn.Parameter(torch.randn(N, generator=g).half().cuda(),
                                       requires_grad=False)

    def forward(self, x):
        return gemm_bias_relu_op(x * 0.5, self.w, self.bias) * 2 + 1


def _x(seed=0, rows=M):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, K, generator=g).half().cuda()


def _reference(x, w, bias):
    """float64 relu(x @ w + bias) on the host."""
    x, w, bias = (t.double().cpu().numpy() for t in (x, w, bias))
    return np.maximum(x @ w + bias, 0.0)


def _rel_err(out, ref):
    out = out.double().cpu().numpy()
    assert not np.isnan(out).any(), "NaN left in the output: a tile was not stored"
    return float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))


def test_compile_fullgraph_equals_eager_equals_float64():
    torch._dynamo.reset()
    block = Block()
    x = _x()
    eager = block(x)
    compiled = torch.compile(block, fullgraph=True)        # Inductor
    out = compiled(x)
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    ref = _reference(x * 0.5, block.w, block.bias) * 2 + 1
    assert _rel_err(out, ref) <= 2e-3
    x2 = _x(seed=5, rows=640)                              # another M: same results
    assert torch.equal(compiled(x2), block(x2))


def test_graph_recorded_once_with_the_op():
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    block = Block()
    out = torch.compile(block, fullgraph=True, backend=backend)(_x(seed=2))
    calls = [n for gm in graphs for n in gm.graph.nodes if n.op == "call_function"
             and n.target in (torch.ops.numba_ws_gpu_tests.gemm_bias_relu,
                              torch.ops.numba_ws_gpu_tests.gemm_bias_relu.default)]
    assert len(graphs) == 1 and len(calls) == 1
    assert out.shape == (M, N) and out.device.type == "cuda"


def test_launch_follows_the_current_stream():
    """On a side stream, the op's input is produced behind a long sleep: a launch on any
    other stream would read it before it is written."""
    block = Block()
    x = _x(seed=3)
    ref = _reference(x, block.w, block.bias)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert interop.resolve_stream(None, [x]) == s.cuda_stream
        torch.cuda._sleep(200_000_000)                      # ~0.1 s of GPU time on s
        staged = x.clone()
        out = gemm_bias_relu_op(staged, block.w, block.bias)
        done = torch.cuda.Event()
        done.record(s)
    done.synchronize()
    assert _rel_err(out, ref) <= 2e-3


def test_cuda_graph_capture_replays_the_launch():
    """torch.cuda.graph captures on its own stream; a launch on another stream during the
    capture is an error, so a correct replay shows the launch took the current one."""
    block = Block()
    x = _x(seed=4)
    c = torch.empty((M, N), dtype=torch.float16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                           # warm-up: compile, tensor maps
        gemm_bias_relu_into(x, block.w, block.bias, c)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemm_bias_relu_into(x, block.w, block.bias, c)
    x.copy_(_x(seed=6))
    c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _rel_err(c, _reference(x, block.w, block.bias)) <= 2e-3
