"""Compile time and launch overhead of numba_ws, beside Numba's own dispatch.

    python benchmarks/overhead.py

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
t0 = time.perf_counter()
import numba_ws as ws
sys.path.insert(0, {bench!r})
from gemm import matmul
t1 = time.perf_counter()
a = cp.zeros((512, 512), cp.float16); c = cp.zeros((512, 512), cp.float16)
matmul[(8,)](a, a, c, BM=128, BN=256, BK=64)
cp.cuda.runtime.deviceSynchronize()
t2 = time.perf_counter()
matmul[(8,)](a, a, c, BM=128, BN=256, BK=128, num_buffers_warp_spec=2)
cp.cuda.runtime.deviceSynchronize()
print(round(t1 - t0, 3), round(t2 - t1, 3), round(time.perf_counter() - t2, 3))
"""


def _child(home, always):
    env = {**os.environ, "NUMBA_WS_HOME": home, "PYTHONPATH": ROOT + os.pathsep
           + os.environ.get("PYTHONPATH", "")}
    if always:
        env["NUMBA_WS_ALWAYS_COMPILE"] = "1"
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


def launch_overhead():
    import cupy as cp
    from numba import cuda
    sys.path.insert(0, HERE)
    from gemm import matmul
    a = cp.zeros((128, 128), cp.float16)
    c = cp.zeros((128, 128), cp.float16)
    launch = matmul[(1,)]
    ws_us = _per_launch_us(lambda: launch(a, a, c, BM=128, BN=128, BK=64,
                                          num_consumer_groups=1),
                           cp.cuda.runtime.deviceSynchronize)

    @cuda.jit
    def tiny(x):
        x[0] = x[0] + 1

    x = cuda.to_device(np.zeros(1, np.float32))
    nb_us = _per_launch_us(lambda: tiny[1, 1](x), cuda.synchronize)
    _profile(lambda: launch(a, a, c, BM=128, BN=128, BK=64, num_consumer_groups=1))
    print("host time per step of one fast-path launch:")
    _breakdown(matmul, (a, a, c), dict(BM=128, BN=128, BK=64, num_consumer_groups=1))
    cp.cuda.runtime.deviceSynchronize()
    return ws_us, nb_us


def _breakdown(kernel, args, meta):
    """Host microseconds of each step of a fast-path launch, timed one step at a time."""
    from numba_ws import knobs
    from numba_ws.runtime import fastpath, interop
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
    steps = {
        "signature + plan lookup": lambda: kernel._plans.get(
            fastpath.signature((1,), args, meta)),
        "knob fingerprint": knobs.launch_fingerprint,
        "describe the arrays": lambda: [interop.describe(args[i], n) for i, _, n in plan.arrays],
        "placement key": lambda: tuple([fastpath.placement_key(a) for a in arrays]),
        "stream lookup": lambda: plan.stream(values),
        "tensor-map pointer": lambda: loaded.tmap_pointer(values),
        "pack the parameters": lambda: loaded.packer.pack(values),
        "cuLaunchKernel": lambda: fn.launch(
            (1, 1, 1), (art.num_threads, 1, 1), art.smem_bytes, stream, params),
        "whole launch": lambda: kernel[(1,)](*args, **meta),
    }
    import cupy as cp
    for name, step in steps.items():
        us = _per_launch_us(step, cp.cuda.runtime.deviceSynchronize, batch=200, batches=5)
        print(f"  {name:34s} {us:6.2f} us")


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
    with tempfile.TemporaryDirectory() as home:
        imp_cold, cold, second = _child(home, always=True)
        imp_warm, warm, _ = _child(home, always=False)
    ws_us, nb_us = launch_overhead()
    print(f"import numba_ws + kernel module: {imp_cold:.2f} s")
    print(f"first launch, cold (compile + PTX JIT + launch): {cold:.2f} s")
    print(f"a second specialization in the same process, cold: {second:.2f} s")
    print(f"first launch in a new process, warm disk cache: {warm:.2f} s")
    print(f"host launch overhead: numba_ws {ws_us:.1f} us/launch, "
          f"numba @cuda.jit {nb_us:.1f} us/launch")


if __name__ == "__main__":
    main()
