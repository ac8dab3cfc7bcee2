"""Compile time and launch overhead of numba_ws, beside Numba's, Triton's and torch's.

    python benchmarks/overhead.py

Prints, in one run: ``import numba_ws`` in a new process; per-launch host time of a
trivial numba_ws kernel (``kernel[grid](...)`` and a bound launcher, CuPy and torch
arrays) and of a small GEMM, beside Triton's JIT launch of a trivial kernel, a trivial
``@numba.cuda.jit`` kernel and ``torch.matmul``; CUDA-graph replay time per captured
kernel; cold compile, a second specialization and a warm-cache first launch.

- cold compile: numba-cuda + the numba_ws stage + NVVM for one GEMM specialization
  (NUMBA_WS_ALWAYS_COMPILE=1), then the driver's PTX JIT (module load); the first in a
  process also pays numba-cuda's one-time set-up (typing registries, imports), so a
  second specialization in the same process is timed too (what each autotuning config
  costs);
- warm-cache load: a fresh process that finds the specialization on disk;
- host launch overhead: wall time per launch of a tiny GEMM (no synchronisation inside the
  loop), against a trivial ``@numba.cuda.jit`` kernel launched the same way. Batches of
  400 launches stay below the driver's launch queue (about 1000 entries), so the host
  never waits for the GPU and the time is the host's; the median of 10 batches.
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = """
import time, sys, cupy as cp
a = cp.zeros((512, 512), cp.float16); c = cp.zeros((512, 512), cp.float16)
cp.cuda.runtime.deviceSynchronize()      # the CUDA context exists before any timing
t0 = time.perf_counter()
import numba_ws as ws
sys.path.insert(0, {bench!r})
from gemm import matmul
t1 = time.perf_counter()
matmul[(8,)](a, a, c, BM=128, BN=256, BK=64)
cp.cuda.runtime.deviceSynchronize()
t2 = time.perf_counter()
matmul[(8,)](a, a, c, BM=128, BN=256, BK=128, num_buffers_warp_spec=2)
cp.cuda.runtime.deviceSynchronize()
print("numba-cuda imported by the launches:", "numba.cuda" in sys.modules,
      "| ml_dtypes:", "ml_dtypes" in sys.modules)
print(round(t1 - t0, 3), round(t2 - t1, 3), round(time.perf_counter() - t2, 3))
"""


def _child(home, always):
    env = {**os.environ, "NUMBA_WS_HOME": home, "PYTHONPATH": ROOT + os.pathsep
           + os.environ.get("PYTHONPATH", "")}
    if always:
        env["NUMBA_WS_ALWAYS_COMPILE"] = "1"
        env["CUDA_CACHE_DISABLE"] = "1"       # the driver's own JIT cache: really cold
        env["NUMBA_WS_TIMING"] = "1"          # the compile phases of both specializations
    lines = subprocess.run([sys.executable, "-c", CHILD.format(bench=HERE)], env=env,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    for line in lines[:-1]:
        if "pass ws_" not in line:
            print(" ", line)
    return tuple(map(float, lines[-1].split()))


def _per_launch_us(launch, sync, batch=400, batches=10):
    times = []
    for _ in range(batches):
        sync()
        t = time.perf_counter()
        for _ in range(batch):
            launch()
        times.append((time.perf_counter() - t) / batch * 1e6)
    sync()
    return float(np.median(times))


@__import__("functools").lru_cache(maxsize=None)
def _trivial():
    import numba_ws as ws

    @ws.jit
    def bump(x, B: ws.constexpr):
        ws.store(x, (0,), ws.load(x, (0,), (B,)) + 1.0)
    return bump


def launch_overhead(rounds=5):
    """Host microseconds per launch, {name: [us per round]}: every launcher is timed once
    per round, the rounds alternate them (A B C ... A B C ...) so a drift of the host's
    speed during the run reaches all of them alike."""
    import cupy as cp
    import torch
    from numba import cuda
    sys.path.insert(0, HERE)
    from gemm import matmul
    sync = cp.cuda.runtime.deviceSynchronize
    tsync = torch.cuda.synchronize
    bump = _trivial()
    x = cp.zeros(64, cp.float32)
    bump[(1,)](x, B=64)
    bound = bump[(1,)]
    tx = torch.zeros(64, device="cuda")
    bound(tx, B=64)
    a = cp.zeros((128, 128), cp.float16)
    c = cp.zeros((128, 128), cp.float16)
    gemm = matmul[(1,)]
    meta = dict(BM=128, BN=128, BK=64, num_consumer_groups=1)
    gemm(a, a, c, **meta)
    launchers = {
        "numba_ws trivial, kernel[grid](...), CuPy": (lambda: bump[(1,)](x, B=64), sync),
        "numba_ws trivial, bound launcher, CuPy": (lambda: bound(x, B=64), sync),
        "numba_ws trivial, bound launcher, torch": (lambda: bound(tx, B=64), tsync),
        "numba_ws 128^3 GEMM (3 TMA arrays), bound launcher":
            (lambda: gemm(a, a, c, **meta), sync),
    }
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def tbump(X):
            tl.store(X, tl.load(X) + 1)
        tbump[(1,)](tx)
        launchers[f"Triton {triton.__version__} JIT launch, trivial kernel"] = (
            lambda: tbump[(1,)](tx), tsync)
    except ImportError:
        pass

    @cuda.jit
    def tiny(v):
        v[0] = v[0] + 1

    nx = cuda.to_device(np.zeros(1, np.float32))
    tiny[1, 1](nx)
    launchers["numba @cuda.jit trivial kernel"] = (lambda: tiny[1, 1](nx), cuda.synchronize)
    ta = torch.zeros((128, 128), device="cuda", dtype=torch.float16)
    launchers["torch.matmul 128^3 fp16"] = (lambda: torch.matmul(ta, ta), tsync)
    out = {name: [] for name in launchers}
    for _ in range(rounds):
        for name, (launch, wait) in launchers.items():
            out[name].append(_per_launch_us(launch, wait))
    _profile(lambda: bound(x, B=64))
    print("host time per step of one launch of the trivial kernel:")
    _breakdown(bump, (x,), dict(B=64))
    print("host time per step of one launch of the 128^3 GEMM:")
    _breakdown(matmul, (a, a, c), meta)
    sync()
    return out


def graph_replay_us(n=200):
    """Microseconds per kernel of a CUDA graph of ``n`` trivial numba_ws launches (torch
    capture), beside the same launches issued eagerly (host-bound) and graph-replayed
    Triton launches."""
    import torch
    bump = _trivial()
    x = torch.zeros(64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        bump[(1,)](x, B=64)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            bump[(1,)](x, B=64)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / n * 1e6)
    return float(np.median(times))


def import_seconds():
    """``import numba_ws`` in a new process (median of 3)."""
    code = "import time; t = time.perf_counter(); import numba_ws; print(time.perf_counter() - t)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True, env={**os.environ, "PYTHONPATH": ROOT}).stdout)
            for _ in range(3)]
    return float(np.median(runs))


def _breakdown(kernel, args, meta):
    """Host microseconds of each step of a fast-path launch, timed one step at a time."""
    import ctypes
    from numba_ws import knobs
    from numba_ws.runtime import fastpath, interop, launcher
    from numba_ws.runtime.launcher import buffer_extra
    plan = kernel._plans[fastpath.signature((1,), args, meta)]
    loaded = next(iter(plan.loaded.values()))
    values = plan.template.copy()
    for i, j, name in plan.arrays:
        values[j] = interop.describe(args[i], name)
    arrays = [values[j] for _, j, _ in plan.arrays]
    values.append(loaded.tmap_pointer(values))
    params = loaded.packer.pack(values)
    fn, art = loaded.function, loaded.art
    stream = plan.stream(values)
    call, handle, pointer = fn.raw_launch()
    native = not isinstance(handle, ctypes.c_void_p)
    c_call, c_handle = launcher._raw_cu_launch(), ctypes.c_void_p(int(fn._handle))
    c_stream, c_params = launcher._pointer_arg(stream), launcher._pointer_arg(params)
    buf, _ = loaded.packer.storage()
    layout = loaded.packer.layout()
    extra = buffer_extra(buf, loaded.packer.nbytes)
    same = fn.param_layout() == layout
    which = "native" if native else "ctypes"
    n_stream, n_extra = pointer(stream), pointer(extra) if same else None
    one_buffer = (f"cuLaunchKernel ({which}, one buffer: the fast path)" if same else
                  f"cuLaunchKernel ({which}, one buffer: layout differs!)")
    steps = {
        "signature + plan lookup": lambda: kernel._plans.get(
            fastpath.signature((1,), args, meta)),
        "knob fingerprint": knobs.launch_fingerprint,
        "describe the arrays": lambda: [interop.describe(args[i], n) for i, _, n in plan.arrays],
        "placement key": lambda: tuple([fastpath.placement_key(a) for a in arrays]),
        "stream lookup": lambda: plan.stream(values),
        "tensor-map pointer": lambda: loaded.tmap_pointer(values),
        "pack the parameters": lambda: loaded.packer.pack(values),
        "generated launcher (whole launch)": lambda: plan.fast(args),
        "cuLaunchKernel (ctypes with argument types, checked)": lambda: fn.launch(
            (1, 1, 1), (art.num_threads, 1, 1), art.smem_bytes, stream, params),
        "cuLaunchKernel (ctypes, a pointer per parameter)": lambda: c_call(
            c_handle, 1, 1, 1, art.num_threads, 1, 1, art.smem_bytes, c_stream, c_params,
            None),
        "cuLaunchKernel (ctypes, one buffer)": lambda: c_call(
            c_handle, 1, 1, 1, art.num_threads, 1, 1, art.smem_bytes, c_stream, None,
            extra if same else None),
        one_buffer: lambda: call(handle, 1, 1, 1, art.num_threads, 1, 1, art.smem_bytes,
                                 n_stream, None, n_extra),
        "whole launch": lambda: kernel[(1,)](*args, **meta),
    }
    import cupy as cp
    from numba_ws.runtime import fastcode
    entry = next(iter(plan._entries.values()))
    print(f"  {len(layout)} parameters, {loaded.packer.nbytes} bytes; the fast "
          f"entry passes one buffer: {entry[fastcode.EXTRA] is not None}")
    for name, step in steps.items():
        us = _per_launch_us(step, cp.cuda.runtime.deviceSynchronize, batch=200, batches=5)
        print(f"  {name:52s} {us:6.2f} us")


def _profile(launch, n=400):
    """Where the host time of a numba_ws launch goes (cProfile, top functions)."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        launch()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(8)


def main():
    imported = import_seconds()
    with tempfile.TemporaryDirectory() as home:
        imp_cold, cold, second = _child(home, always=True)
        warm_runs = [_child(home, always=False)[1] for _ in range(3)]
    launches = launch_overhead()
    graph = graph_replay_us()
    print(f"import numba_ws (new process, median of 3): {imported:.3f} s")
    print(f"import numba_ws + torch + the GEMM module: {imp_cold:.2f} s")
    print(f"first launch, cold (compile + PTX JIT + launch): {cold:.2f} s")
    print(f"a second specialization in the same process, cold: {second:.2f} s")
    print(f"first launch in a new process, warm disk cache (median of 3): "
          f"{float(np.median(warm_runs)):.3f} s ({', '.join(f'{w:.3f}' for w in warm_runs)})")
    print("host time per launch (each round: the median of 10 batches of 400 launches; "
          "rounds alternate the launchers; the ratio: the median of the rounds' ratios):")
    triton = next((v for k, v in launches.items() if k.startswith("Triton")), None)
    for name, rounds in launches.items():
        us = float(np.median(rounds))
        # the ratio of each round (the host's speed drifts between rounds), their median
        per_round = [mine / theirs for mine, theirs in zip(rounds, triton)] if triton else []
        ratio = (f"  {float(np.median(per_round)):.2f}x Triton (per round: "
                 f"{', '.join(f'{r:.2f}' for r in per_round)})" if triton else "")
        print(f"  {name:52s} {us:6.2f} us (rounds: "
              f"{', '.join(f'{r:.2f}' for r in rounds)}){ratio}")
    print(f"CUDA graph replay, per captured trivial numba_ws kernel: {graph:.2f} us")


if __name__ == "__main__":
    main()
