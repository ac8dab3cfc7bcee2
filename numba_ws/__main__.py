"""``python -m numba_ws``: a self-check that runs the GEMM of the design notes.

:func:`run_interpreted` runs it in the NumPy interpreter (no GPU needed) and returns the
error against a float64 reference; :func:`main` reports it and exits 1 on failure.
"""
import argparse
import sys

import numpy as np

import numba_ws as ws
from numba_ws.examples import matmul
from numba_ws.interpreter.run import InterpretedKernel

#: Largest accepted ``max|c - ref| / max|ref|`` (fp16 output rounding is about 5e-4).
TOLERANCE = 1e-2
SHAPE = dict(M=200, N=136, K=72)
TILES = dict(BM=64, BN=64, BK=32)


def gemm_inputs(seed=None, M=SHAPE["M"], N=SHAPE["N"], K=SHAPE["K"]):
    """Random fp16 ``a`` (M, K), ``b`` (K, N) and a NaN-filled fp16 output ``c``."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float16)
    return a, b, c


def relative_error(out, ref):
    """``max|out - ref| / max|ref|`` in float64 (NaN in ``out`` gives NaN)."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))


def run_interpreted(seed=None):
    """Run the GEMM in the interpreter; return its relative error against float64."""
    a, b, c = gemm_inputs(seed)
    M, N = c.shape

    def grid(meta):
        return (ws.cdiv(M, meta["BM"]) * ws.cdiv(N, meta["BN"]),)

    InterpretedKernel(matmul)[grid](a, b, c, **TILES)
    return relative_error(c, a.astype(np.float64) @ b.astype(np.float64))


GPU_SIZE = 4096
GPU_META = dict(BM=128, BN=256, BK=64, num_consumer_groups=2, num_buffers_warp_spec=3)


def gpu_available():
    try:
        from numba import cuda
        import cupy  # noqa: F401
        return cuda.is_available()
    except Exception:
        return False


def run_on_gpu(seed=None, n=GPU_SIZE):
    """Compile and run the warp-specialized GEMM at n^3 fp16 on the GPU; time it beside
    cuBLAS (CuPy's matmul) with CUDA events. Returns (error, numba_ws TFLOP/s, cuBLAS)."""
    import cupy as cp
    a, b, _ = gemm_inputs(seed, n, n, n)
    da, db = cp.asarray(a), cp.asarray(b)
    dc = cp.full((n, n), cp.nan, dtype=cp.float16)
    kernel = ws.jit(matmul)
    grid = (ws.cdiv(n, GPU_META["BM"]) * ws.cdiv(n, GPU_META["BN"]),)
    kernel[grid](da, db, dc, **GPU_META)
    err = relative_error(cp.asnumpy(dc), a.astype(np.float64) @ b.astype(np.float64))

    def timed(fn, reps=50):
        """Median over 5 batches of ``reps`` back-to-back launches, between CUDA events."""
        for _ in range(5):
            fn()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(5):
            start.record()
            for _ in range(reps):
                fn()
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / reps)
        return float(np.median(times))

    flops = 2.0 * n ** 3
    ws_ms = timed(lambda: kernel[grid](da, db, dc, **GPU_META))
    cublas_ms = timed(lambda: cp.matmul(da, db, out=dc))
    return err, flops / ws_ms / 1e9, flops / cublas_ms / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m numba_ws", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="random seed of the inputs")
    parser.add_argument("--cpu", action="store_true", help="interpreter only, even with a GPU")
    opts = parser.parse_args(argv)
    if gpu_available() and not opts.cpu:
        err, tf_ws, tf_cublas = run_on_gpu(opts.seed)
        ok = err <= TOLERANCE
        print(f"GPU GEMM fp16 {GPU_SIZE}^3, {GPU_META}: max relative error {err:.3e}")
        print(f"numba_ws {tf_ws:.1f} TFLOP/s, cuBLAS {tf_cublas:.1f} TFLOP/s "
              f"(ratio {tf_ws / tf_cublas:.3f})")
        print("OK" if ok else "FAILED")
        return 0 if ok else 1
    shape = "x".join(str(v) for v in SHAPE.values())
    err = run_interpreted(opts.seed)
    ok = err <= TOLERANCE
    print(f"interpreter GEMM fp16 M x N x K = {shape}, tiles {TILES}: "
          f"max relative error {err:.3e} (limit {TOLERANCE:g})")
    print(explain_partition())
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


def explain_partition():
    """The warp-specialization plan of the GEMM at the GPU tile sizes (no GPU needed)."""
    a, b, c = gemm_inputs(0, 256, 512, 128)
    return ws.jit(matmul).explain(a, b, c, **GPU_META)


if __name__ == "__main__":
    sys.exit(main())
