"""numba_ws.torch on the CPU (issue 20 item 1): a launch wrapper registered as a torch
custom op runs eagerly (CPU tensors: the interpreter), has a fake implementation that
gives the outputs' shapes and dtypes without launching, and compiles with
``torch.compile(fullgraph=True)`` as one graph holding the op, with eager's results.
Streams: every launch (slow and fast path) goes to torch's current stream of the
tensors' device. tests/gpu/test_torch_compile_gpu.py runs the same on the H200."""
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch tests need torch (pip install -e '.[test]')")

import numba_ws as ws
from numba_ws.errors import WSUsageError
from numba_ws.runtime import jit as jit_mod
from numba_ws.torch import custom_op
import kernels_tiles as kt

BM, BN, BK = 64, 64, 32
gemm_bias_relu = ws.jit(kt.gemm_bias_relu)
LAUNCHES = []          # one entry per kernel launch made by the wrappers below


@custom_op("numba_ws_tests::gemm_bias_relu", mutates_args=(),
           fake=lambda a, b, bias: a.new_empty((a.shape[0], b.shape[1])))
def gemm_bias_relu_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """relu(a @ b + bias) in fp16: a new (M, N) tensor."""
    M, N = a.shape[0], b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (ws.cdiv(M, BM) * ws.cdiv(N, BN),)
    gemm_bias_relu[grid](a, b, bias, c, BM=BM, BN=BN, BK=BK, num_consumer_groups=1)
    LAUNCHES.append((M, N))
    return c


def _gemm_bias_relu_into(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor,
                         c: torch.Tensor) -> None:
    grid = (ws.cdiv(c.shape[0], BM) * ws.cdiv(c.shape[1], BN),)
    gemm_bias_relu[grid](a, b, bias, c, BM=BM, BN=BN, BK=BK, num_consumer_groups=1)
    LAUNCHES.append(tuple(c.shape))


#: The same kernel writing into its argument ``c``: no fake needed.
gemm_bias_relu_into = custom_op("numba_ws_tests::gemm_bias_relu_into", _gemm_bias_relu_into,
                                mutates_args=("c",))


def inputs(M=96, N=112, K=80, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).half()
    b = torch.randn(K, N, generator=g).half()
    bias = torch.randn(N, generator=g).half()
    return a, b, bias


def reference(a, b, bias):
    """float64 relu(a @ b + bias), rounded to fp16 once (the kernel's store)."""
    out = np.maximum(a.double().numpy() @ b.double().numpy() + bias.double().numpy(), 0)
    return torch.from_numpy(out).half()


def close_to_reference(out, a, b, bias):
    """fp32 accumulation differs from float64 by far less than one fp16 step."""
    ref = reference(a, b, bias).double()
    err = (out.double() - ref).abs().max().item()
    return err <= 2e-3 * max(1.0, ref.abs().max().item())


class Block(torch.nn.Module):
    """torch ops around the numba_ws op: a graph break anywhere would show."""

    def __init__(self, K=80, N=112):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.w = torch.nn.Parameter(torch.randn(K, N, generator=g).half(), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.randn(N, generator=g).half(),
                                       requires_grad=False)

    def forward(self, x):
        return gemm_bias_relu_op(x * 2, self.w, self.bias) + 1


class GraphRecorder:
    """A torch.compile backend that keeps every FX graph Dynamo hands it, then runs it."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def op_calls(self, op):
        return [n for gm in self.graphs for n in gm.graph.nodes
                if n.op == "call_function" and n.target in (op, op.default)]


# -- registration and eager ---------------------------------------------------------------

def test_the_op_is_registered_with_the_wrappers_schema():
    op = torch.ops.numba_ws_tests.gemm_bias_relu
    assert str(op.default._schema) == \
        "numba_ws_tests::gemm_bias_relu(Tensor a, Tensor b, Tensor bias) -> Tensor"
    into = torch.ops.numba_ws_tests.gemm_bias_relu_into.default._schema
    assert str(into) == ("numba_ws_tests::gemm_bias_relu_into(Tensor a, Tensor b, "
                         "Tensor bias, Tensor(a3!) c) -> ()")


def test_eager_call_runs_the_kernel_on_cpu_tensors():
    a, b, bias = inputs()
    before = len(LAUNCHES)
    out = gemm_bias_relu_op(a, b, bias)
    assert LAUNCHES[before:] == [(96, 112)]
    assert out.shape == (96, 112) and out.dtype == torch.float16
    assert close_to_reference(out, a, b, bias)
    same = torch.ops.numba_ws_tests.gemm_bias_relu(a, b, bias)     # through the dispatcher
    assert torch.equal(same, out)


def test_fake_gives_shapes_and_dtypes_without_launching():
    from torch._subclasses.fake_tensor import FakeTensorMode
    before = len(LAUNCHES)
    with FakeTensorMode():
        a, b, bias = torch.empty(200, 48).half(), torch.empty(48, 72).half(), \
            torch.empty(72).half()
        out = gemm_bias_relu_op(a, b, bias)
        c = torch.empty(200, 72).half()
        assert gemm_bias_relu_into(a, b, bias, c) is None
    assert (tuple(out.shape), out.dtype) == ((200, 72), torch.float16)
    meta = gemm_bias_relu_op(*(t.to("meta") for t in inputs(M=40)))
    assert meta.device.type == "meta" and tuple(meta.shape) == (40, 112)
    assert len(LAUNCHES) == before                     # the kernel never ran


def test_torch_opcheck_accepts_both_ops():
    """torch's own checks: schema vs implementation (a new tensor; c mutated), fake vs
    real (shapes, dtypes, strides), AOT dispatch with dynamic shapes."""
    a, b, bias = inputs()
    for result in torch.library.opcheck(gemm_bias_relu_op, (a, b, bias)).values():
        assert result == "SUCCESS"
    c = torch.zeros(96, 112).half()
    for result in torch.library.opcheck(gemm_bias_relu_into, (a, b, bias, c)).values():
        assert result == "SUCCESS"


# -- torch.compile ------------------------------------------------------------------------

def test_compile_fullgraph_keeps_the_op_in_one_graph():
    torch._dynamo.reset()
    block, recorder = Block(), GraphRecorder()
    x = inputs()[0]
    eager = block(x)
    compiled = torch.compile(block, fullgraph=True, backend=recorder)
    out = compiled(x)
    assert len(recorder.graphs) == 1
    assert len(recorder.op_calls(torch.ops.numba_ws_tests.gemm_bias_relu)) == 1
    assert torch.equal(out, eager)
    assert close_to_reference(out - 1, x * 2, block.w, block.bias)


def test_compile_with_dynamic_shapes_does_not_recompile():
    torch._dynamo.reset()
    block, recorder = Block(), GraphRecorder()
    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend=recorder)
    for M in (96, 160):
        x = inputs(M=M, seed=M)[0]
        assert torch.equal(compiled(x), block(x))
    assert len(recorder.graphs) == 1


def test_inductor_fullgraph_gives_eager_results():
    """The default backend: Inductor generates C++ for the torch ops around the op and
    calls the op's real implementation (the interpreter) at run time."""
    torch._dynamo.reset()
    block = Block()
    x = inputs(seed=3)[0]
    out = torch.compile(block, fullgraph=True)(x)
    assert torch.equal(out, block(x))


def test_compiled_mutating_op_writes_its_argument():
    torch._dynamo.reset()
    a, b, bias = inputs(seed=4)

    def f(a, b, bias):
        c = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=a.dtype)
        gemm_bias_relu_into(a, b, bias, c)
        return c * 1

    recorder = GraphRecorder()
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(a, b, bias)
    assert close_to_reference(out, a, b, bias) and not out.isnan().any()
    torch.compile(f, fullgraph=True, backend=recorder)(a, b, bias)
    assert len(recorder.op_calls(torch.ops.numba_ws_tests.gemm_bias_relu_into)) == 1


# -- registration errors ------------------------------------------------------------------

def test_a_wrapper_returning_tensors_needs_a_fake():
    def make(a: torch.Tensor) -> torch.Tensor:
        return a.clone()
    with pytest.raises(WSUsageError, match=r"'numba_ws_tests::nofake'.*pass fake="):
        custom_op("numba_ws_tests::nofake", make, mutates_args=())


def test_annotations_are_required_and_named():
    def untyped(a, n: int) -> None:
        pass
    with pytest.raises(WSUsageError, match=r"parameter 'a' has no type annotation"):
        custom_op("numba_ws_tests::untyped", untyped, mutates_args=())

    def no_return(a: torch.Tensor):
        pass
    with pytest.raises(WSUsageError, match=r"no return annotation.*-> None"):
        custom_op("numba_ws_tests::no_return", no_return, mutates_args=())

    def variadic(*a: torch.Tensor) -> None:
        pass
    with pytest.raises(WSUsageError, match=r"parameter 'a' is variadic"):
        custom_op("numba_ws_tests::variadic", variadic, mutates_args=())


def test_bad_names_and_mutates_args():
    def f(a: torch.Tensor, c: torch.Tensor) -> None:
        pass
    for bad in ("gemm", "a::b::c", "my-lib::gemm", "lib::class", 3):
        with pytest.raises(WSUsageError, match=r"'namespace::op'"):
            custom_op(bad, f, mutates_args=("c",))
    with pytest.raises(WSUsageError, match=r"mutates_args names \['out'\].*\['a', 'c'\]"):
        custom_op("numba_ws_tests::bad_mut", f, mutates_args=("out",))
    with pytest.raises(WSUsageError, match=r"mutates_args='c' must be a tuple.*\('c',\)"):
        custom_op("numba_ws_tests::str_mut", f, mutates_args="c")
    with pytest.raises(WSUsageError, match=r"fake must be a function"):
        custom_op("numba_ws_tests::bad_fake", f, mutates_args=("c",), fake=3)


# -- streams ------------------------------------------------------------------------------

def _rows(x, y, n, BM: ws.constexpr):
    pass


class FakeLoaded:
    def __init__(self, log):
        self.log = log

    def launch(self, dims, stream, values):
        self.log.append(stream)


class FakeCudaTensor:
    """What numba_ws reads of a torch CUDA tensor (no GPU here): dtype, device, shape,
    strides, data pointer."""

    def __init__(self, shape, ptr):
        self.shape, self.dtype, self._ptr = shape, torch.float16, ptr
        self.device, self.is_cuda = torch.device("cuda", 0), True

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return (self.shape[1], 1)

    def numel(self):
        return self.shape[0] * self.shape[1]

    def is_contiguous(self):
        return True

    def __dlpack__(self, stream=None):   # makes it an array; numba_ws must not call it
        raise AssertionError("torch tensors are described through their own attributes")


FakeCudaTensor.__module__ = "torch"


class CurrentStreams:
    """Stands in for torch.cuda.current_stream: the handle of ``current``; records the
    device it was asked about."""

    def __init__(self):
        self.current, self.devices = 0x11, []

    def __call__(self, device=None):
        self.devices.append(str(device))
        return types.SimpleNamespace(cuda_stream=self.current)


def test_launches_follow_torchs_current_stream(monkeypatch):
    """CUDA tensors (faked: no GPU here) launch on torch.cuda.current_stream(device),
    asked again at every launch: the first (slow path) and the next ones (fast path)."""
    streams, log = CurrentStreams(), []
    monkeypatch.setattr(torch.cuda, "current_stream", streams)
    k = ws.jit(_rows)
    k.slow_paths = 0

    def specialize(bound, described, cc):
        k.slow_paths += 1
        return FakeLoaded(log)
    monkeypatch.setattr(k, "specialize", specialize)
    monkeypatch.setattr(jit_mod, "_device_cc", lambda: (9, 0, "a"))
    x, y = FakeCudaTensor((64, 8), 0x10000), FakeCudaTensor((64, 8), 0x20000)
    k[(1,)](x, y, 3, BM=64)
    streams.current = 0x22
    k[(1,)](x, y, 3, BM=64)
    k[(1,)](x, y, 4, BM=64)
    streams.current = 0x33
    k[(1,)](x, y, 5, BM=64)
    assert log == [0x11, 0x22, 0x22, 0x33] and k.slow_paths == 1
    assert set(streams.devices) == {"cuda:0"}
    k[(1,)](x, y, 5, BM=64, stream=0x44)          # an explicit stream wins
    assert log[-1] == 0x44
