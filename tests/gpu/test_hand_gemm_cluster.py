"""What TMA multicast is worth: a hand-written 2-CTA-cluster Hopper GEMM from
numba_ws.codegen intrinsics, with and without multicast, timed beside cuBLAS.

C(M, N) fp16 = A(M, K) @ B(K, N), fp16 row-major, fp32 accumulation. A cluster of two CTAs
computes a 256x256 tile: CTA rank r rows 128r..128r+127 (BM=128, BN=256, BK=64, 4 stages of
48 KB, 384 threads: producer warp group + 2 consumer warp groups of 64 rows, wgmma
m64n256k16, ``wgmma.wait_group 0`` per stage). Both CTAs need the same B tile:

- ``multicast=True``: CTA r loads B boxes 2r and 2r+1 (of 4 64-column boxes) with
  ``.multicast::cluster`` to both CTAs; each CTA's full barrier still expects 48 KB (its A,
  both B halves); the empty barrier of each CTA counts the 8 consumer warps of *both*
  CTAs (16 arrivals), because the peer's producer writes into this CTA's slot too;
- ``multicast=False``: each CTA loads all of B itself (same cluster launch, 8 arrivals);
- ``cluster_release``: the consumers' arrives on the empty barriers use ``.release.cluster``
  (True, what the first run measured) or the default ``.release.cta`` (False; measured
  2026-12-02 20:03: 4096^3 531.8 multicast / 504.8 not, vs cuBLAS 676.6; 8192^3 539.0 /
  549.2 vs 619.7 -- most of the cluster cost, still below the non-cluster kernel).

The PTX entry gets ``.reqnctapercluster 2, 1, 1`` and is loaded and launched through
numba_ws's driver launcher. Outputs are checked against float64 on NaN-poisoned C.
Script: ``python tests/gpu/test_hand_gemm_cluster.py`` (the pytest tests run the checks).

Measured on the H200, 2026-12-02 17:44 UTC (first run): correct with and without multicast
(384x512x64, 1000^3: max rel. error 3e-4, no NaN). Slow: 4096^3 multicast 336.5 TFLOP/s,
no multicast 394.0, cuBLAS 709.8; 8192^3 382.5 / 424.9 / 677.1 -- well below the
non-cluster hand kernel of the same structure (test_hand_gemm.py: 634 / 722). Not yet
profiled; suspects: the cluster-scope release arrive (mapa + arrive.release.cluster) at
every stage (a cluster-scope release orders all prior memory operations of the warp
before the arrive; CUTLASS's cluster pipelines arrive with the default .release.cta
semantics, which the wgmma.wait_group before it already makes safe -- the first thing to
try), clusters that cannot use every SM (co-scheduling within a GPC), the end-of-
kernel cluster barrier holding an SM until the peer finishes. The first attempt hung: the
cluster barrier was ``.aligned`` and the producer warp reached it diverged.
"""
import math
import os
import re
import sys

import numpy as np
import pytest
from numba import cuda

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from numba_ws.codegen import (  # noqa: E402
    elect_one, fence_mbarrier_init, frag_store, lane_id, mbarrier_arrive_expect_tx,
    mbarrier_init, mbarrier_wait, setmaxnreg_dec, setmaxnreg_inc, smem_base, tma_load_2d,
    warp_group_id, warp_id, wgmma_commit_group, wgmma_desc, wgmma_fence,
    wgmma_fence_operand, wgmma_mma, wgmma_wait_group, wgmma_zero_acc,
)
from numba_ws.codegen.cluster import (  # noqa: E402
    cluster_ctarank, cluster_sync, mbarrier_arrive_cluster, mbarrier_arrive_remote,
    tma_load_2d_multicast,
)
from numba_ws.runtime.tensormap import encode_tiled_2d  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_hand_gemm import (  # noqa: E402  (the non-cluster kernel's layout)
    A_BYTES, A_SBO, B_BOX_BYTES, B_LBO, B_SBO, BK, BM, BN, STAGE_BYTES, _ptr,
)

STAGES = 4
BAR_OFF = STAGES * STAGE_BYTES
SMEM_BYTES = BAR_OFF + 16 * STAGES
SIG = "void(int64, int64, int64, int64, int64)"


def make_kernel(multicast, cluster_release=True):
    """The kernel; ``cluster_release``: consumers arrive with ``.release.cluster`` (what
    the 17:44 run measured) or with the default ``.release.cta`` (the 20:03 run)."""
    arrivals = 16 if multicast else 8        # consumer warps releasing each stage
    arrive = mbarrier_arrive_cluster if cluster_release else mbarrier_arrive_remote

    def gemm_cluster(maps, c_ptr, M, N, K):
        base = smem_base()
        bars = base + BAR_OFF
        wg = warp_group_id()
        rank = cluster_ctarank()
        num_pid_n = (N + BN - 1) // BN
        cid = cuda.blockIdx.x // 2
        m0 = (cid // num_pid_n) * (2 * BM) + rank * BM
        n0 = (cid % num_pid_n) * BN
        nk = (K + BK - 1) // BK
        a_map = maps
        b_map = maps + 128
        if cuda.threadIdx.x == 0:
            for s in range(STAGES):
                mbarrier_init(bars + 8 * s, 1)
                mbarrier_init(bars + 8 * (STAGES + s), arrivals)
            fence_mbarrier_init()
        cluster_sync()
        if wg == 0:
            setmaxnreg_dec(40)
            if warp_id() == 0:
                if elect_one():
                    slot = 0
                    phase = 0
                    for k in range(nk):
                        mbarrier_wait(bars + 8 * (STAGES + slot), phase ^ 1)
                        full = bars + 8 * slot
                        mbarrier_arrive_expect_tx(full, STAGE_BYTES)
                        sa = base + slot * STAGE_BYTES
                        tma_load_2d(sa, a_map, full, k * BK, m0)
                        if multicast:
                            for h in range(2):
                                j = 2 * rank + h
                                tma_load_2d_multicast(sa + A_BYTES + j * B_BOX_BYTES, b_map,
                                                      full, n0 + 64 * j, k * BK, 3)
                        else:
                            for j in range(BN // 64):
                                tma_load_2d(sa + A_BYTES + j * B_BOX_BYTES, b_map, full,
                                            n0 + 64 * j, k * BK)
                        slot += 1
                        if slot == STAGES:
                            slot = 0
                            phase ^= 1
        else:
            setmaxnreg_inc(232)
            g = wg - 1
            acc = wgmma_zero_acc(256)
            slot = 0
            phase = 0
            for k in range(nk):
                mbarrier_wait(bars + 8 * slot, phase)
                sa = base + slot * STAGE_BYTES + g * (64 * 128)
                sb = base + slot * STAGE_BYTES + A_BYTES
                wgmma_fence()
                for s16 in range(4):
                    acc = wgmma_mma(acc, wgmma_desc(sa + 32 * s16, 16, A_SBO, 1),
                                    wgmma_desc(sb + 2048 * s16, B_LBO, B_SBO, 1), 1, "f16",
                                    0, 1)
                wgmma_commit_group()
                wgmma_wait_group(0)
                if lane_id() == 0:
                    empty = bars + 8 * (STAGES + slot)
                    if multicast:
                        arrive(empty, 0)
                        arrive(empty, 1)
                    else:
                        arrive(empty, rank)
                slot += 1
                if slot == STAGES:
                    slot = 0
                    phase ^= 1
            acc = wgmma_fence_operand(acc)
            frag_store(acc, c_ptr, N, m0 + 64 * g, n0, M, N, "f16")
        cluster_sync()      # no CTA exits while its peer may still write or arrive here

    return gemm_cluster


def cluster_ptx(multicast, cluster_release=True):
    """The kernel's PTX for sm_90a with ``.reqnctapercluster 2, 1, 1`` (no GPU needed)."""
    ptx, _ = cuda.compile_ptx(make_kernel(multicast, cluster_release), SIG, cc=(9, 0, "a"),
                              launch_bounds=(384, 1))
    ptx, n = re.subn(r"(\.maxntid[^\n]*\n)", r"\1.reqnctapercluster 2, 1, 1\n", ptx, count=1)
    assert n == 1, "no .maxntid line to put the cluster shape after"
    return ptx


_LOADED = {}


def load(multicast, cluster_release=True):
    """(CudaFunction, ParamPacker) of the kernel launched as 2-CTA clusters."""
    key = (multicast, cluster_release)
    if key in _LOADED:
        return _LOADED[key]
    from numba.cuda import types
    from numba_ws.runtime.launcher import CudaModule, ParamPacker
    ptx = cluster_ptx(multicast, cluster_release)
    name = re.search(r"\.entry\s+([\w$]+)\s*\(", ptx).group(1)
    fn = CudaModule(ptx, f"hand_gemm_cluster_{multicast}").get_function(name)
    fn.set_max_dynamic_smem(SMEM_BYTES)
    out = _LOADED[key] = (fn, ParamPacker([types.int64] * 5))
    return out


def make_maps(a, b):
    """Tensor maps of contiguous fp16 a (M, K) and b (K, N) (Numba arrays or torch)."""
    M, K = (int(n) for n in a.shape)
    N = int(b.shape[1])
    amap = encode_tiled_2d(_ptr(a), 2, (M, K), 2 * K, (BM, BK), 128,
                           dtype="float16", name="A")
    bmap = encode_tiled_2d(_ptr(b), 2, (K, N), 2 * N, (BK, 64), 128,
                           dtype="float16", name="B")
    return cuda.to_device(np.frombuffer(amap + bmap, dtype=np.uint8).copy())


def launcher(a, b, c, multicast, stream=0, cluster_release=True):
    fn, packer = load(multicast, cluster_release)
    M, K = (int(n) for n in a.shape)
    N = int(b.shape[1])
    maps = make_maps(a, b)
    grid = (2 * math.ceil(M / (2 * BM)) * math.ceil(N / BN), 1, 1)
    values = [_ptr(maps), _ptr(c), M, N, K]

    def go():
        fn.launch(grid, (384, 1, 1), SMEM_BYTES, stream, packer.pack(values))
    go.maps = maps      # keep the tensor maps alive as long as the launcher
    return go


def check(M, N, K, multicast, seed=0, cluster_release=True):
    rng = np.random.default_rng(seed)
    a_h = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b_h = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    a, b = cuda.to_device(a_h), cuda.to_device(b_h)
    c = cuda.to_device(np.full((M, N), np.nan, dtype=np.float16))
    launcher(a, b, c, multicast, cluster_release=cluster_release)()
    cuda.synchronize()
    got = c.copy_to_host().astype(np.float64)
    ref = a_h.astype(np.float64) @ b_h.astype(np.float64)
    err = float(np.nanmax(np.abs(got - ref)) / np.abs(ref).max()) if not np.isnan(got).all() \
        else float("inf")
    ok = not np.isnan(got).any() and err <= 1e-2
    return ok, f"M={M} N={N} K={K} multicast={multicast} cluster_release=" \
               f"{cluster_release}: max rel. error {err:.2e}, " \
               f"NaN {int(np.isnan(got).sum())}"


SHAPES = [(1024, 1024, 1024), (1000, 1000, 1000), (384, 512, 64)]


def _needs_sm90():
    if not cuda.is_available():
        pytest.skip("needs a CUDA GPU (sm_90)")
    cc = cuda.get_current_device().compute_capability
    if cc != (9, 0):
        pytest.skip(f"needs sm_90 (clusters, wgmma), device is sm_{cc[0]}{cc[1]}")


@pytest.mark.parametrize("cluster_release", [True, False])
@pytest.mark.parametrize("multicast", [True, False])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_hand_gemm_cluster(M, N, K, multicast, cluster_release):
    _needs_sm90()
    ok, msg = check(M, N, K, multicast, cluster_release=cluster_release)
    assert ok, msg


def _bench_ms(fn):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def main():
    if not cuda.is_available():
        print("no CUDA GPU: nothing to run")
        return 1
    bad = 0
    variants = [(mc, cr) for mc in (True, False) for cr in (True, False)]
    for shape in SHAPES:
        for mc, cr in variants:
            ok, msg = check(*shape, mc, cluster_release=cr)
            bad += not ok
            print(("ok   " if ok else "FAIL ") + msg, flush=True)
    if bad:
        return 1
    import torch
    for M, N, K in [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024)]:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        c = torch.empty(M, N, device="cuda", dtype=torch.float16)
        flops = 2.0 * M * N * K
        line = f"{M}x{N}x{K}:"
        for mc, cr in variants:
            ms = _bench_ms(launcher(a, b, c, mc, cluster_release=cr))
            line += f" [multicast={mc} release.{'cluster' if cr else 'cta'}] " \
                    f"{flops / ms / 1e9:.1f}"
        ms = _bench_ms(lambda: torch.matmul(a, b, out=c))
        line += f"; cuBLAS {flops / ms / 1e9:.1f} TFLOP/s"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
