"""Issue 17 on the GPU: the generated launcher (runtime/fastcode.py) on CuPy arrays and
torch tensors (new pointers, new scalars, a side stream, bf16), CUDA graphs (torch's
``torch.cuda.graph`` and CuPy's stream capture), and a first launch in a new process
from the launch index with numba-cuda unimportable. Fresh random inputs, outputs
poisoned with NaN, float64 references."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import numba_ws as ws
from numba_ws.runtime import fastcode

cp = pytest.importorskip("cupy")
torch = pytest.importorskip("torch")

ROWS, COLS = 300, 64                       # 300: not a multiple of the 64-row tile
GRID = (ws.cdiv(ROWS, 64),)


@ws.jit
def scale_add(x, y, alpha, beta, BM: ws.constexpr, BN: ws.constexpr):
    r = ws.program_id(0) * BM
    t = ws.load(x, (r, 0), (BM, BN)).astype(ws.float32)
    ws.store(y, (r, 0), (t * alpha + beta).astype(y.dtype))


def _ref(x, alpha, beta):
    return np.asarray(x, np.float64) * alpha + beta


def _plan(kernel):
    plans = list(kernel._plans.values())
    assert len(plans) == 1
    return plans[0]


def _check(y, ref, tol):
    got = np.asarray(y, np.float64)
    assert not np.isnan(got).any()
    assert np.max(np.abs(got - ref)) <= tol * np.max(np.abs(ref))


def test_cupy_launches_take_the_generated_path_with_new_pointers_and_scalars():
    rng = np.random.default_rng()
    x = cp.asarray(rng.standard_normal((ROWS, COLS)).astype(np.float32))
    y = cp.full_like(x, cp.nan)
    scale_add[GRID](x, y, 2.0, 1.0, BM=64, BN=COLS)
    cp.cuda.runtime.deviceSynchronize()
    plan = _plan(scale_add)
    assert plan.fast is not None
    for _ in range(4):
        x = cp.asarray(rng.standard_normal((ROWS, COLS)).astype(np.float32))
        y = cp.full_like(x, cp.nan)
        alpha, beta = float(rng.uniform(-3, 3)), float(rng.uniform(-1, 1))
        scale_add[GRID](x, y, alpha, beta, BM=64, BN=COLS)      # new pointers: a map
        _check(cp.asnumpy(y), _ref(cp.asnumpy(x), alpha, beta), 1e-6)
        y.fill(cp.nan)
        assert plan.fast((x, y, alpha, beta))                   # now the generated code
        _check(cp.asnumpy(y), _ref(cp.asnumpy(x), alpha, beta), 1e-6)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2),
                                        (torch.float16, 2e-3)])
def test_torch_tensors_on_a_side_stream(dtype, tol):
    """The input is written behind a long sleep on the side stream: a launch on any other
    stream would read it before it is written."""
    kernel = ws.jit(scale_add.fn)
    gen = torch.Generator(device="cuda").manual_seed(int(np.random.default_rng().integers(1 << 30)))
    side = torch.cuda.Stream()
    for step in range(3):
        with torch.cuda.stream(side):
            x = torch.empty((ROWS, COLS), device="cuda", dtype=dtype)
            y = torch.full_like(x, float("nan"))
            torch.cuda._sleep(50_000_000)
            x.copy_(torch.randn((ROWS, COLS), device="cuda", generator=gen).to(dtype))
            kernel[GRID](x, y, 0.5 + step, -1.0, BM=64, BN=COLS)
        side.synchronize()
        _check(y.float().cpu().numpy(), _ref(x.float().cpu().numpy(), 0.5 + step, -1.0), tol)
    plan = _plan(kernel)
    assert plan.fast is not None and "data_ptr()" in plan.fast.source


def test_torch_cuda_graph_capture_replays():
    kernel = ws.jit(scale_add.fn)
    x = torch.randn((ROWS, COLS), device="cuda")
    y = torch.full_like(x, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                               # warm-up: compile, maps
        kernel[GRID](x, y, 3.0, 0.25, BM=64, BN=COLS)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel[GRID](x, y, 3.0, 0.25, BM=64, BN=COLS)
    for _ in range(3):
        x.copy_(torch.randn((ROWS, COLS), device="cuda"))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(y.cpu().numpy(), _ref(x.cpu().numpy(), 3.0, 0.25), 1e-6)


def test_cupy_stream_capture_replays():
    kernel = ws.jit(scale_add.fn)
    x = cp.asarray(np.random.default_rng().standard_normal((ROWS, COLS)).astype(np.float32))
    y = cp.full_like(x, cp.nan)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        kernel[GRID](x, y, -2.0, 0.5, BM=64, BN=COLS)           # warm-up
        stream.synchronize()
        stream.begin_capture()
        kernel[GRID](x, y, -2.0, 0.5, BM=64, BN=COLS)
        graph = stream.end_capture()
    for _ in range(3):
        x[...] = cp.asarray(np.random.default_rng().standard_normal((ROWS, COLS))
                            .astype(np.float32))
        y.fill(cp.nan)
        cp.cuda.runtime.deviceSynchronize()
        graph.launch(stream)
        stream.synchronize()
        _check(cp.asnumpy(y), _ref(cp.asnumpy(x), -2.0, 0.5), 1e-6)


def test_global_capture_with_unseen_arrays_is_a_clear_error():
    """torch.cuda.graph captures in global mode, which forbids the synchronous copy of new
    tensor maps: the launch says so (WSUsageError) and the process stays usable."""
    kernel = ws.jit(scale_add.fn)
    x = torch.ones((ROWS, COLS), device="cuda")
    kernel[GRID](x, torch.empty_like(x), 1.0, 0.0, BM=64, BN=COLS)   # compiled
    torch.cuda.synchronize()
    x2, y2 = torch.ones_like(x), torch.full_like(x, float("nan"))
    raised = []
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            try:
                kernel[GRID](x2, y2, 1.0, 0.0, BM=64, BN=COLS)
            except ws.WSUsageError as e:
                raised.append(str(e))
    except Exception:
        pass                                                    # the capture is invalid
    assert raised and "before capturing" in raised[0], raised
    torch.cuda.synchronize()
    kernel[GRID](x2, y2, 1.0, 0.0, BM=64, BN=COLS)              # outside capture: fine
    torch.cuda.synchronize()
    assert bool(torch.all(y2 == 1.0))


def test_relaxed_capture_with_unseen_arrays_replays():
    """CuPy captures in relaxed mode: new tensor maps may be made during the capture
    (they are copied before the launch is recorded) and the graph replays correctly."""
    kernel = ws.jit(scale_add.fn)
    x = cp.ones((ROWS, COLS), cp.float32)
    kernel[GRID](x, cp.empty_like(x), 1.0, 0.0, BM=64, BN=COLS)       # compiled
    cp.cuda.runtime.deviceSynchronize()
    x2 = cp.asarray(np.random.default_rng().standard_normal((ROWS, COLS)).astype(np.float32))
    y2 = cp.full_like(x2, cp.nan)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        kernel[GRID](x2, y2, 4.0, 1.0, BM=64, BN=COLS)
        graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    _check(cp.asnumpy(y2), _ref(cp.asnumpy(x2), 4.0, 1.0), 1e-6)


CHILD = textwrap.dedent("""
    import sys, time
    if {block}:
        sys.modules["numba"] = None
    import numpy as np, cupy as cp
    x = cp.asarray(np.arange(300 * 64, dtype=np.float32).reshape(300, 64))
    y = cp.full_like(x, cp.nan)
    cp.cuda.runtime.deviceSynchronize()
    bindings_before = "cuda.bindings.driver" in sys.modules
    t0 = time.perf_counter()
    import numba_ws as ws
    sys.path.insert(0, {here!r})
    from test_fast_launch_gpu import scale_add
    t1 = time.perf_counter()
    scale_add[(5,)](x, y, 2.0, 1.0, BM=64, BN=64)
    cp.cuda.runtime.deviceSynchronize()
    t2 = time.perf_counter()
    ok = bool(cp.all(y == x * 2.0 + 1.0))
    bindings = bindings_before or "cuda.bindings.driver" not in sys.modules
    print(ok, "numba.cuda" in sys.modules, bindings, round(t1 - t0, 4), round(t2 - t1, 4))
""")


def test_a_new_process_launches_from_the_index_without_numba(tmp_path):
    env = {**os.environ, "NUMBA_WS_HOME": str(tmp_path)}
    here = os.path.dirname(os.path.abspath(__file__))
    outs = []
    for block in (False, True, True):
        res = subprocess.run([sys.executable, "-c", CHILD.format(block=block, here=here)],
                             capture_output=True, text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        outs.append(res.stdout.split())
    print("import s, first launch s per process:", [o[3:] for o in outs])
    # warm processes: numba-cuda never imported, nor cuda.bindings (runtime/cudriver.py)
    # unless CuPy had imported it already
    assert [o[:3] for o in outs[1:]] == [["True", "False", "True"]] * 2
    assert outs[0][:2] == ["True", "True"]


def _entries(kernel):
    entries = list(_plan(kernel)._entries.values())
    assert entries
    return entries


def test_buffer_launches_back_to_back_each_keep_their_own_parameters():
    """The generated launcher passes its one packed buffer (``extra``) when the driver's
    parameter layout matches, and rewrites that buffer for the next launch at once:
    eight launches queued behind a sleep, each with its own pointers and scalars, show
    that the driver copied every buffer at its launch."""
    kernel = ws.jit(scale_add.fn)
    rng = np.random.default_rng()
    xs = [cp.asarray(rng.standard_normal((ROWS, COLS)).astype(np.float32)) for _ in range(8)]
    ys = [cp.full_like(x, cp.nan) for x in xs]
    for x, y in zip(xs, ys):                       # the slow path once per pointer pair
        kernel[GRID](x, y, 1.0, 0.0, BM=64, BN=COLS)
    cp.cuda.runtime.deviceSynchronize()
    assert all(e[fastcode.EXTRA] is not None and e[fastcode.PARAMS] is None
               for e in _entries(kernel))
    scalars = [(float(rng.uniform(-3, 3)), float(rng.uniform(-1, 1))) for _ in xs]
    for y in ys:
        y.fill(cp.nan)
    bool(cp.isnan(ys[-1]).all())                   # CuPy compiles its kernels now
    cp.cuda.runtime.deviceSynchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    with torch.cuda.stream(torch.cuda.ExternalStream(stream.ptr)):
        torch.cuda._sleep(200_000_000)             # ~0.1 s: all eight queue behind it
    with stream:
        for x, y, (alpha, beta) in zip(xs, ys, scalars):
            assert _plan(kernel).fast((x, y, alpha, beta))
    assert bool(cp.isnan(ys[-1]).all())            # not run yet (read on another stream)
    stream.synchronize()
    for x, y, (alpha, beta) in zip(xs, ys, scalars):
        _check(cp.asnumpy(y), _ref(cp.asnumpy(x), alpha, beta), 1e-6)


def test_a_gemm_takes_the_buffer_launch_and_matches_float64():
    from gemm_checks import check_gemm, gemm_inputs
    from kernels import matmul
    kernel = ws.jit(matmul)
    M, N, K = 300, 520, 136                        # ragged in every dimension
    grid = (ws.cdiv(M, 128) * ws.cdiv(N, 256),)
    meta = dict(BM=128, BN=256, BK=64, num_consumer_groups=2, num_buffers_warp_spec=3)
    a, b, c, ref = gemm_inputs(M, N, K, "float16")
    kernel[grid](a, b, c, **meta)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)
    assert all(e[fastcode.EXTRA] is not None for e in _entries(kernel))
    for _ in range(2):
        c.fill(cp.nan)
        assert _plan(kernel).fast((a, b, c))       # the generated path: one buffer
        cp.cuda.runtime.deviceSynchronize()
        check_gemm(c, ref)
