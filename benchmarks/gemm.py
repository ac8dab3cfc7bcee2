"""GEMM throughput: numba_ws beside cuBLAS (torch) and Triton, in one process.

    python benchmarks/gemm.py [--quick | --few | --tf32] [--json out.json] [--no-triton]
                              [--match REGEX]

``--tf32``: float32 in and out (``ws.dot`` runs tf32), b row-major (copied K-major into
the operand buffer before each dot) and column-major (read from its slot), beside cuBLAS
with ``allow_tf32`` and Triton's tf32 ``tl.dot`` (row-major b only).

Each numba_ws result is checked against float64 before it is timed. Times are medians of
CUDA-event timings (triton.testing.do_bench, after warm-up) over inputs rotated across
enough copies to exceed the 60 MB L2. TFLOP/s = 2*M*N*K / time.
"""
import argparse
import json
import math
import re
import time

import torch

import numba_ws as ws
from numba_ws import configs, examples

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024),
          (16384, 4096, 4096), (16384, 14336, 4096), (16384, 4096, 14336)]
# few output tiles (issue 16): 128x256 tiles give 32 / 64 / 128 CTAs for 132 SMs
FEW = [(128, 8192, 8192), (256, 8192, 8192), (512, 8192, 8192)]
QUICK = [(4096, 4096, 4096), (8192, 8192, 8192)]
# numba_ws.configs' candidates first (examples.matmul for many tiles, then
# examples.matmul_persistent): the benchmark times every one of them. The staged
# epilogue (tma_store=1; 56 / 224 registers: with 40 the producer spills): +2-3 % at
# K = 1024, equal at 4096^3 / 8192^3 (2026-12-06 ~20:40 and 21:22 A/B, H100, BENCHMARKS.md)
CONFIGS = ([configs.as_meta(c) for c in configs.matmul(8192, 8192, 8192)]
           + [dict(configs.as_meta(c), persistent=True)
              for c in configs.matmul_persistent(8192, 8192, 8192)])
# GROUP_M=16 (16 row tiles per group of the persistent order): >= GROUP_M=8 on all six
# rows of the 2026-12-02 20:50 --explore run (about +1 %), so the persistent configs use it.
# Measured and dropped (BENCHMARKS.md): BK=128, 2 slots, dot_in_flight=1 (~510 TFLOP/s at
# 4096^3 / 8192^3: with one slot's wgmmas in flight the producer has no slot to refill);
# ping-pong 128x128 BK=64 (6 slots, ~465), 64x256 BK=64 (5 slots, ~425), and with one
# ring per group instead of turns (~460 and ~280); 256x128 tiles (cuBLAS's shape; each
# consumer 128x128), persistent, 4 slots: 0.9-0.99x the 128x256 kernel (17:19 run);
# BK=32 (64-byte swizzle for A), 8 slots of 24 KB, dot_in_flight=1, persistent:
# 0.80-0.88x the BK=128 kernel on all 12 shapes (2026-12-03 05:24 run).
# Split-K (examples.matmul_splitk + splitk_reduce, an fp32 workspace) and narrower tiles:
# timed only where the 128x256 tiles leave SMs idle (fewer than FEW_TILES tiles).
FEW_TILES = 132
_GEMM = dict(BK=64, num_buffers_warp_spec=4, dot_in_flight=0)
# R* keys: the split-K reduce's tile and consumer groups. 2026-12-03 19:55 (--few, reduce
# 64x256 with 2 groups): split-K 3 never won; BM=128 tiles best for M=128 with split-K 2
# at BN=128, for M=256 plain BN=128; M=512 keeps the persistent 128x256 kernel.
# ATOMIC: examples.matmul_splitk_atomic (c zeroed, then every slice adds its tile with
# ws.atomic_add; tma_store=1 makes that bulk tensor reduce-adds): at M = 128 63.5 us
# against 66.8 us for the two-pass split-K (2026-12-06 21:22, H100, BENCHMARKS.md).
# 256x128 tiles split over K in two (2 x 64 CTAs; numba_ws.configs.matmul_splitk_atomic):
# at M = 256 one row of tiles, so each tile of B is read into one SM, not two as with
# 128x128 tiles; M = 256 503.6 against 448.9 TFLOP/s for the 128x128 BK=128 kernel (fp16;
# bf16 504.8 / 445.7), M = 512 below the persistent 128x256 kernel. With plain atomics
# instead of TMA reduce-adds 105, the two-pass split-K 463 (H100, 2026-12-07 07:34,
# BENCHMARKS.md). Then configs.matmul's few-tile candidates (128x128 tiles).
FEW_CONFIGS = ([dict(configs.as_meta(c), ATOMIC=1)
                for c in configs.matmul_splitk_atomic(256, 8192, 8192)]
               + [configs.as_meta(c) for c in configs.matmul(256, 8192, 8192)] + [
               dict(BM=128, BN=128, num_consumer_groups=2, SPLIT_K=2, ATOMIC=1, tma_store=1,
                    **dict(_GEMM, num_buffers_warp_spec=4)),
               dict(BM=128, BN=256, num_consumer_groups=2, SPLIT_K=4, ATOMIC=1, tma_store=1,
                    **dict(_GEMM, num_buffers_warp_spec=3)),
               dict(BM=128, BN=256, num_consumer_groups=2, SPLIT_K=2, RBM=32, RBN=256, RNCG=1,
                    **_GEMM),
               dict(BM=128, BN=128, num_consumer_groups=2, SPLIT_K=2, RBM=64, RBN=256, RNCG=2,
                    **_GEMM),
               dict(BM=128, BN=128, num_consumer_groups=2, SPLIT_K=2, RBM=32, RBN=256, RNCG=1,
                    **_GEMM),
               dict(BM=64, BN=256, num_consumer_groups=1, **_GEMM),
               dict(BM=64, BN=256, num_consumer_groups=1, SPLIT_K=2, RBM=32, RBN=256, RNCG=1,
                    **_GEMM)])
# deeper rings, in-flight wgmma, persistence for the 128x128 tiles (--few --explore): none
# beat the FEW_CONFIGS in the 2026-12-03 20:24 run (BENCHMARKS.md)
FEW_EXPLORE = [dict(BM=128, BN=128, BK=64, num_consumer_groups=2, num_buffers_warp_spec=6,
                    dot_in_flight=0),
               dict(BM=128, BN=128, BK=64, num_consumer_groups=2, num_buffers_warp_spec=6,
                    dot_in_flight=1),
               dict(BM=128, BN=128, BK=64, GROUP_M=16, num_consumer_groups=2,
                    num_buffers_warp_spec=6, dot_in_flight=0, persistent=True),
               dict(BM=128, BN=128, BK=64, num_consumer_groups=2, num_buffers_warp_spec=6,
                    dot_in_flight=0, SPLIT_K=2, RBM=32, RBN=256, RNCG=1),
               dict(BM=128, BN=128, BK=128, num_consumer_groups=2, num_buffers_warp_spec=3,
                    dot_in_flight=0, SPLIT_K=2, RBM=32, RBN=256, RNCG=1)]
L2_BYTES = 60 * 2**20
# --explore: candidates not (yet) in CONFIGS, timed on EXPLORE_SHAPES beside CONFIGS.
EXPLORE = [dict(BM=128, BN=256, BK=128, GROUP_M=g, num_consumer_groups=2,
                num_buffers_warp_spec=2, dot_in_flight=0, persistent=True) for g in (4, 8)]
EXPLORE += [dict(BM=128, BN=256, BK=64, num_consumer_groups=2, num_buffers_warp_spec=4,
                 dot_in_flight=1),
            dict(BM=128, BN=256, BK=64, GROUP_M=16, num_consumer_groups=2,
                 num_buffers_warp_spec=3, dot_in_flight=1, persistent=True)]
# Ping-pong consumers (each group whole 128x128 tiles of every other tile-loop iteration,
# the groups taking turns at one ring of 3 x 64 KB): the best ping-pong configuration of
# the 2026-12-02 18:30 run; it never won (BENCHMARKS.md).
EXPLORE += [dict(BM=128, BN=128, BK=128, GROUP_M=8, num_consumer_groups=2,
                 num_buffers_warp_spec=3, dot_in_flight=1, ping_pong=1, persistent=True)]
EXPLORE_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024)]
# --tf32 (float32, 2026-12-08, BENCHMARKS.md): BK = 32 is 128-byte rows of float32. A
# row-major b adds the operand buffer (32 KB at BN = 256, one per group by default: then
# 4 slots do not fit; one for both groups with shared_operand_buffer=1).
TF32_SHAPES = EXPLORE_SHAPES
TF32_CONFIGS = ([configs.as_meta(c) for c in configs.matmul(8192, 8192, 8192, "float32")]
                + [dict(configs.as_meta(c), persistent=True)
                   for c in configs.matmul_persistent(8192, 8192, 8192, "float32")])
TF32_CONFIGS += [dict(BM=128, BN=128, BK=32, num_consumer_groups=2, num_buffers_warp_spec=6,
                      dot_in_flight=0)]
# one buffer that both groups write (shared_operand_buffer=1) against a buffer per group
# (the default; the 00:17 / 00:31 runs on 2026-12-08), on the row-major rows
TF32_CONFIGS += [dict(c, shared_operand_buffer=1) for c in TF32_CONFIGS[:4]]


matmul = ws.jit(examples.matmul)
matmul_persistent = ws.jit(examples.matmul_persistent)


matmul_splitk = ws.jit(examples.matmul_splitk)
splitk_reduce = ws.jit(examples.splitk_reduce)
matmul_splitk_atomic = ws.jit(examples.matmul_splitk_atomic)


def _variant(cfg, M, N):
    """``run(a, b, c)`` of one benchmark configuration (a split-K one owns its fp32
    workspace: SPLIT_K slices of cdiv(M, BM) * BM rows)."""
    meta = {k: v for k, v in cfg.items()
            if k not in ("persistent", "SPLIT_K", "RBM", "RBN", "RNCG", "ATOMIC")}
    if cfg.get("persistent"):
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        launch = matmul_persistent[(sms,)]
        return lambda a, b, c: launch(a, b, c, **meta)
    tiles = ws.cdiv(M, cfg["BM"]) * ws.cdiv(N, cfg["BN"])
    split = cfg.get("SPLIT_K")
    if not split:
        launch = matmul[(tiles,)]
        return lambda a, b, c: launch(a, b, c, **meta)
    if cfg.get("ATOMIC"):            # one pass: zero c, every slice atomically adds to it
        launch = matmul_splitk_atomic[(tiles * split,)]

        def run_atomic(a, b, c):
            c.zero_()
            launch(a, b, c, SPLIT_K=split, **meta)
        return run_atomic
    rows = examples.splitk_slice_rows(M, cfg["BM"])
    partial = torch.empty((split * rows, N), device="cuda", dtype=torch.float32)
    first = matmul_splitk[(tiles * split,)]
    rbm, rbn, rncg = cfg["RBM"], cfg["RBN"], cfg["RNCG"]
    second = splitk_reduce[(ws.cdiv(M, rbm) * ws.cdiv(N, rbn),)]

    def run(a, b, c):
        first(a, b, partial, rows, SPLIT_K=split, **meta)
        second(partial, c, rows, BM=rbm, BN=rbn, SPLIT_K=split, num_consumer_groups=rncg)
    return run


def _triton_kernel(bk=64):
    """Triton 3.6's autotuned TMA matmul (``bk`` = 32 for float32 / tf32)."""
    import triton
    import triton.language as tl

    @triton.autotune(configs=[
        triton.Config({"BM": 128, "BN": 256, "BK": bk}, num_stages=3, num_warps=8),
        triton.Config({"BM": 128, "BN": 128, "BK": bk}, num_stages=4, num_warps=8),
        triton.Config({"BM": 256, "BN": 128, "BK": bk}, num_stages=3, num_warps=8),
    ], key=["M", "N", "K"])
    @triton.jit
    def tma_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr, PRECISION: tl.constexpr):
        pid = tl.program_id(0)
        num_n = tl.cdiv(N, BN)
        pm, pn = pid // num_n, pid % num_n
        a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
        b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [N, 1], [BK, BN])
        c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BM, BN])
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            acc = tl.dot(a_desc.load([pm * BM, k * BK]), b_desc.load([k * BK, pn * BN]), acc,
                         input_precision=PRECISION)
        c_desc.store([pm * BM, pn * BN], acc.to(c_desc.dtype))

    def run(a, b, c):
        M, K = a.shape
        N = b.shape[1]
        tma_matmul[lambda m: (triton.cdiv(M, m["BM"]) * triton.cdiv(N, m["BN"]),)](
            a, b, c, M, N, K, PRECISION="tf32" if a.dtype == torch.float32 else None)

    def alloc(size, alignment, stream):
        return torch.empty(size, dtype=torch.int8, device="cuda")

    triton.set_allocator(alloc)
    return run


def _label(cfg):
    return (("persistent " if cfg.get("persistent") else "") +
            (f"atomic split-K {cfg['SPLIT_K']} " if cfg.get("ATOMIC") else
             f"split-K {cfg['SPLIT_K']} (reduce {cfg['RBM']}x{cfg['RBN']} "
             f"g{cfg['RNCG']}) " if cfg.get("SPLIT_K") else "") +
            ("tma_store " if cfg.get("tma_store") else "") +
            (f"g{cfg['num_consumer_groups']} " if cfg["num_consumer_groups"] != 2 else "") +
            (f"G{cfg['GROUP_M']} " if cfg.get("GROUP_M", 8) != 8 else "") +
            ("ping-pong " if cfg.get("ping_pong") else "") +
            ("shared-buffer " if cfg.get("shared_operand_buffer") else "") +
            f"{cfg['BM']}x{cfg['BN']} BK={cfg['BK']} NB={cfg['num_buffers_warp_spec']} "
            f"in_flight={cfg['dot_in_flight']}")


def _bench(fn, sets):
    import triton.testing
    i = [0]

    def step():
        fn(*sets[i[0] % len(sets)])
        i[0] += 1
    return triton.testing.do_bench(step, warmup=50, rep=300, return_mode="median")


def _inputs(M, N, K, dtype, copies, b_form="row"):
    sets = []
    for _ in range(copies):
        a = torch.randn(M, K, device="cuda", dtype=dtype)
        b = torch.randn(K, N, device="cuda", dtype=dtype) if b_form == "row" else \
            torch.randn(N, K, device="cuda", dtype=dtype).t()      # column-major (K, N)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)   # output dtype = input
        sets.append((a, b, c))
    return sets


def _check(a, b, c):
    ref = (a.double() @ b.double())
    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
    if not err <= 1e-2:
        raise AssertionError(f"numba_ws result wrong: relative error {err:.3e}")
    return err


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    p.add_argument("--no-triton", action="store_true")
    p.add_argument("--match", help="only the numba_ws configs whose label matches (regex)")
    p.add_argument("--few", action="store_true", help="only the few-tile shapes (FEW)")
    p.add_argument("--tf32", action="store_true",
                   help="float32 GEMMs (tf32 dots), b row- and column-major, TF32_SHAPES")
    p.add_argument("--b", choices=("row", "col"), help="with --tf32: only this b layout")
    p.add_argument("--explore", action="store_true",
                   help="also time the EXPLORE candidates, on EXPLORE_SHAPES only (with --few: "
                        "the FEW_EXPLORE candidates on the few-tile shapes)")
    opts = p.parse_args()
    configs = CONFIGS + (EXPLORE if opts.explore else [])
    shapes = EXPLORE_SHAPES if opts.explore else QUICK if opts.quick else SHAPES + FEW
    if opts.few:
        shapes = FEW
        configs = CONFIGS
    forms = [(torch.float16, "row"), (torch.bfloat16, "row")]
    if opts.tf32:
        shapes, configs = TF32_SHAPES, TF32_CONFIGS
        forms = [(torch.float32, b) for b in ("row", "col") if opts.b in (None, b)]
        torch.backends.cuda.matmul.allow_tf32 = True     # cuBLAS: tf32 tensor cores
    triton_run = None if opts.no_triton else _triton_kernel(32 if opts.tf32 else 64)
    rows = []
    for dtype, b_form in forms:
        for (M, N, K) in shapes:
            per_set = dtype.itemsize * (M * K + K * N + M * N)
            sets = _inputs(M, N, K, dtype, max(2, math.ceil(3 * L2_BYTES / per_set)), b_form)
            flops = 2.0 * M * N * K
            best = None
            few = ws.cdiv(M, 128) * ws.cdiv(N, 256) < FEW_TILES
            extra = FEW_CONFIGS + (FEW_EXPLORE if opts.explore else []) if few else []
            for cfg in configs + extra:
                if opts.match and not re.search(opts.match, _label(cfg)):
                    continue
                run = _variant(cfg, M, N)
                a, b, c = sets[0]
                c.fill_(float("nan"))             # poison: every element must be written
                try:
                    t0 = time.perf_counter()
                    run(a, b, c)
                    torch.cuda.synchronize()
                    first = time.perf_counter() - t0
                    err = _check(a, b, c)
                except Exception as e:            # reported, never timed
                    print(f"    config {cfg} FAILED: {type(e).__name__}: {e}", flush=True)
                    continue
                ms = _bench(run, sets)
                print(f"    {_label(cfg)}: {flops / ms / 1e9:7.1f}", flush=True)
                if best is None or ms < best[0]:
                    best = (ms, cfg, err, first)
            if best is None:
                raise AssertionError(f"every numba_ws config failed at {M}x{N}x{K}")
            # cuBLAS writes the input dtype, as numba_ws and Triton do: no conversion
            # kernel is timed with it
            outs = [torch.empty((M, N), device="cuda", dtype=dtype) for _ in sets]
            cublas_sets = [(a, b, o) for (a, b, _), o in zip(sets, outs)]
            cublas = _bench(lambda a, b, o: torch.matmul(a, b, out=o), cublas_sets)
            del outs, cublas_sets
            tri = _bench(triton_run, sets) if triton_run and b_form == "row" else float("nan")
            row = dict(dtype=str(dtype).split(".")[1], M=M, N=N, K=K, b=b_form,
                       numba_ws=flops / best[0] / 1e9, cublas=flops / cublas / 1e9,
                       triton=flops / tri / 1e9, config=best[1], err=best[2],
                       first_call_s=best[3])
            rows.append(row)
            print(f"{row['dtype']:9s} {b_form} {M:6d} {N:6d} {K:6d}  "
                  f"numba_ws {row['numba_ws']:7.1f}  "
                  f"cuBLAS {row['cublas']:7.1f}  Triton {row['triton']:7.1f}  "
                  f"ratio {row['numba_ws'] / row['cublas']:.3f}  err {best[2]:.1e}", flush=True)
            del sets
    geo = math.exp(sum(math.log(r["numba_ws"] / r["cublas"]) for r in rows) / len(rows))
    with_triton = [r for r in rows if not math.isnan(r["triton"])]
    geo_t = math.exp(sum(math.log(r["numba_ws"] / r["triton"]) for r in with_triton)
                     / len(with_triton)) if with_triton else float("nan")
    print(f"geomean numba_ws / cuBLAS = {geo:.3f}; numba_ws / Triton = {geo_t:.3f}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"rows": rows, "geomean_vs_cublas": geo, "geomean_vs_triton": geo_t,
                       "device": torch.cuda.get_device_name()}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
