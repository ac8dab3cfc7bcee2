"""Faults the runtime survives (issue 19 item 4), on the GPU.

- A launch that fails -- a failed device allocation, a grid the device cannot launch, a
  kernel the debug timeout stopped -- raises a numba_ws error and leaves the process
  usable: later launches of the same and other kernels are correct, and the on-disk cache
  still serves the kernel (a fresh process loads it without compiling).
- A kernel that traps is different: CUDA makes the context unusable for the rest of the
  process (the error is sticky: every later launch and synchronization fails). What the
  runtime guarantees then, and what this file checks in a subprocess: the trap surfaces as
  a numba_ws ``CudaDriverError`` (not a crash or a hang), later numba_ws launches in that
  process raise ``CudaDriverError`` too, and the on-disk cache is intact: a new process
  loads the kernel from it and computes correctly.
- Two processes compiling the same kernel at the same time into one fresh NUMBA_WS_HOME
  (NUMBA_WS_ALWAYS_COMPILE=0) both get correct kernels, and a third loads it from disk.
"""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.errors import WSError, WSUsageError
from numba_ws.runtime import cache, launcher
from numba_ws.runtime.launcher import CudaDriverError, WSBarrierTimeout
from gemm_checks import check_gemm, gemm_inputs
from kernels import matmul

cp = pytest.importorskip("cupy")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
META = dict(BM=128, BN=128, BK=64)


def _grid(c):
    M, N = c.shape
    return (ws.cdiv(M, 128) * ws.cdiv(N, 128),)


def _gemm_ok(kernel, M=256, N=384, K=192):
    a, b, c, ref = gemm_inputs(M, N, K, "float16")
    kernel[_grid(c)](a, b, c, **META)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)


# -- a fresh process: compile or load, launch, check ---------------------------------------

WORKER = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {tests!r}); sys.path.insert(0, {gpu!r})
    import cupy as cp, numpy as np
    import numba_ws as ws, kernels
    from numba_ws.runtime import cache
    from gemm_checks import gemm_inputs
    while time.time() < {start}:
        time.sleep(0.001)
    a, b, c, ref = gemm_inputs(256, 384, 192, "float16")
    ws.jit(kernels.matmul)[(6,)](a, b, c, BM=128, BN=128, BK=64)
    cp.cuda.runtime.deviceSynchronize()
    out = cp.asnumpy(c).astype(np.float64)
    err = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
    print(json.dumps(dict(hits=cache.stats["hits"], stores=cache.stats["stores"],
                          nan=int(np.isnan(out).sum()), err=err)))
""")


def _worker_cmd(start=0.0):
    code = WORKER.format(tests=os.path.join(ROOT, "tests"),
                         gpu=os.path.join(ROOT, "tests", "gpu"), start=start)
    return [sys.executable, "-c", code]


def _env(home):
    env = {**os.environ, "NUMBA_WS_HOME": str(home), "NUMBA_WS_ALWAYS_COMPILE": "0",
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    for k in knobs.DEBUG_KNOBS + ("NUMBA_WS_CC", "NUMBA_WS_INTERPRET", "NUMBA_WS_DISABLE"):
        env.pop(k, None)
    return env


def _result(proc_out):
    out, err, rc = proc_out
    assert rc == 0, err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["nan"] == 0 and res["err"] <= 1e-2, res
    return res


def _run_worker(home):
    p = subprocess.run(_worker_cmd(), capture_output=True, text=True, env=_env(home),
                       timeout=600)
    return _result((p.stdout, p.stderr, p.returncode))


def _fresh_process_loads_from_cache(home):
    res = _run_worker(home)
    assert res["hits"] >= 1 and res["stores"] == 0, f"compiled again: {res}"


@pytest.fixture
def home(tmp_path):
    """A fresh NUMBA_WS_HOME for this process, filled by one normal GEMM compile."""
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path), NUMBA_WS_ALWAYS_COMPILE=False):
        yield tmp_path


# -- failed launches --------------------------------------------------------------------

def test_failed_device_allocation_leaves_everything_usable(home, monkeypatch):
    """A huge allocation fails (CuPy and the driver say out of memory); then the launcher's
    own allocation (the tensor-map buffer) is made to fail the same way: the launch raises
    CudaDriverError naming the call, caches nothing broken, and the next launch works."""
    kernel = ws.jit(matmul)
    _gemm_ok(kernel)
    with pytest.raises(cp.cuda.memory.OutOfMemoryError):
        cp.empty(1 << 50, cp.uint8)
    with pytest.raises(CudaDriverError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        launcher._check(launcher._driver().cuMemAlloc(1 << 50), "cuMemAlloc(1 PiB)")
    _gemm_ok(kernel)

    real = launcher._driver()

    class NoMemory:
        def __getattr__(self, name):
            return getattr(real, name)

        def cuMemAlloc(self, nbytes):
            return (real.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None)

    monkeypatch.setattr(launcher, "_driver", lambda: NoMemory())
    a, b, c, ref = gemm_inputs(384, 256, 128, "float16")     # new arrays: new tensor maps
    with pytest.raises(CudaDriverError, match=r"cuMemAlloc\(tensor maps\) failed: "
                                              r"CUDA_ERROR_OUT_OF_MEMORY"):
        kernel[_grid(c)](a, b, c, **META)
    monkeypatch.undo()
    kernel[_grid(c)](a, b, c, **META)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)
    _fresh_process_loads_from_cache(home)


def test_grid_the_device_cannot_launch(home):
    """Too large a grid is a WSUsageError naming the axis before any driver call; a launch
    the driver refuses (grid x = 2**31 given to the launcher directly) is a
    CudaDriverError naming cuLaunchKernel; the same kernel then runs correctly."""
    kernel = ws.jit(matmul)
    a, b, c, ref = gemm_inputs(256, 384, 192, "float16")
    for grid, axis in (((2 ** 31,), 0), ((6, 70000), 1), ((6, 1, 0), 2)):
        with pytest.raises(WSUsageError, match=f"axis {axis} is"):
            kernel[grid](a, b, c, **META)
    kernel[_grid(c)](a, b, c, **META)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)
    loaded = next(iter(kernel._loaded.values()))
    params = loaded.packer._tls.state[2]     # this thread's last packed arguments (valid)
    with pytest.raises(CudaDriverError, match=r"cuLaunchKernel of kernel .* failed: "
                                              r"CUDA_ERROR_INVALID_VALUE"):
        loaded.function.launch((2 ** 31, 1, 1), (loaded.art.num_threads, 1, 1),
                               loaded.art.smem_bytes, 0, params)
    c.fill(cp.nan)
    kernel[_grid(c)](a, b, c, **META)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)
    _fresh_process_loads_from_cache(home)


def test_kernel_stopped_by_the_debug_timeout(home):
    """A deadlocked debug kernel ends with WSBarrierTimeout; the process goes on (a GEMM
    and an attention are correct), the debug kernel has its own cache entry, and a fresh
    process still loads the normal kernel from the cache."""
    kernel = ws.jit(matmul)
    _gemm_ok(kernel)
    a, b, c, _ = gemm_inputs(256, 384, 512, "float16")
    with knobs.scope(NUMBA_WS_DEBUG_BARRIERS=True, NUMBA_WS_DEBUG_TIMEOUT_CYCLES=200_000_000,
                     NUMBA_WS_DEBUG_DROP_RELEASE="0"):
        start = time.perf_counter()
        with pytest.raises(WSBarrierTimeout) as info:     # 8 k-steps through 2 slots
            kernel[_grid(c)](a, b, c, num_buffers_warp_spec=2, **META)
        assert time.perf_counter() - start < 60     # compile + about 0.1 s of timeout
    assert isinstance(info.value, WSError) and info.value.channel == 0
    _gemm_ok(kernel)
    from test_attention import run
    run(1, 512, 64, 0.125)
    entries = [f for _, _, fs in os.walk(home / "cache") for f in fs if f.endswith(".bin")]
    assert len(entries) >= 2, entries        # normal and debug builds: separate entries
    _fresh_process_loads_from_cache(home)


TRAP = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r}); sys.path.insert(0, {gpu!r})
    import cupy as cp, numpy as np
    import numba_ws as ws, kernels
    from gemm_checks import gemm_inputs
    from numba_ws.runtime.launcher import CudaDriverError, CudaModule, ParamPacker, _check, _driver
    report = {{}}
    k = ws.jit(kernels.matmul)
    a, b, c, ref = gemm_inputs(256, 384, 192, "float16")
    k[(6,)](a, b, c, BM=128, BN=128, BK=64)
    cp.cuda.runtime.deviceSynchronize()
    report["before"] = float(np.max(np.abs(cp.asnumpy(c).astype(np.float64) - ref)) /
                             np.max(np.abs(ref)))
    ptx = ".version 8.0\\n.target sm_80\\n.address_size 64\\n.visible .entry ws_trap()\\n{{\\n trap;\\n}}\\n"
    fn = CudaModule(ptx, "trap").get_function("ws_trap")
    fn.launch((1, 1, 1), (32, 1, 1), 0, 0, ParamPacker([]).pack([]))
    try:
        _check(_driver().cuCtxSynchronize(), "cuCtxSynchronize after the trap")
        report["trap"] = "no error"
    except CudaDriverError as e:
        report["trap"] = e.result
    try:
        k[(6,)](a, b, c, BM=128, BN=128, BK=64)
        _check(_driver().cuCtxSynchronize(), "cuCtxSynchronize after the next launch")
        report["after"] = "ran"
    except CudaDriverError as e:
        report["after"] = "CudaDriverError " + str(e.result)
    except Exception as e:
        report["after"] = type(e).__name__ + " " + str(e)[:200]
    print(json.dumps(report))
""")


def test_trapped_kernel_loses_the_context_but_not_the_cache(tmp_path):
    code = TRAP.format(tests=os.path.join(ROOT, "tests"), gpu=os.path.join(ROOT, "tests", "gpu"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=_env(tmp_path), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["before"] <= 1e-2, report
    assert report["trap"].startswith("CUDA_ERROR_"), report        # surfaced as ours
    assert report["after"].startswith("CudaDriverError CUDA_ERROR_"), report   # sticky
    _fresh_process_loads_from_cache(tmp_path)


# -- two processes compiling one kernel at the same time ---------------------------------

def test_two_processes_compile_the_same_kernel_concurrently(tmp_path):
    start = time.time() + 10          # both import first, then compile at the same moment
    procs = [subprocess.Popen(_worker_cmd(start), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
             for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        results.append(_result((out, err, p.returncode)))
    assert sum(r["stores"] for r in results) >= 1, results
    entries = [f for _, _, fs in os.walk(tmp_path / "cache") for f in fs]
    # the specialization and its launch index record (runtime/warm.py); no temp file left
    assert len(entries) == 2 and all(e.endswith(".bin") for e in entries), entries
    for entry in entries:
        key = entry[:-4]
        with open(os.path.join(tmp_path, "cache", key[:2], key + ".bin"), "rb") as f:
            assert cache._decode(f.read(), key) is not None, "an entry left is not whole"
    _fresh_process_loads_from_cache(tmp_path)


def test_attention_still_correct_after_all_this():
    """The faults above ran in this process (pytest runs this file's tests in order)."""
    from test_attention import run
    run(2, 1024, 64, 0.125)
