"""The sm_80 path (cp.async + ldmatrix/mma.sync, mbarrier.test_wait, no setmaxnreg) on the
GPU: every launch here is compiled for compute capability 8.0 (``NUMBA_WS_CC=8.0``), which
an H200 runs as well as an A100, against float64.

Every case draws fresh random inputs and NaN-poisons the output first; the check is
``max|c - ref| / max|ref| <= 1e-2`` with ``ref`` computed in float64.
"""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from gemm_checks import check_gemm, column_major, gemm_inputs
from kernels import matmul, matmul_nt, matmul_persistent

cp = pytest.importorskip("cupy")
gemm = ws.jit(matmul)
gemm_nt = ws.jit(matmul_nt)


@pytest.fixture(autouse=True)
def _sm80():
    with knobs.scope(NUMBA_WS_CC="8.0"):
        yield


def _grid(M, N):
    return lambda m: (ws.cdiv(M, m["BM"]) * ws.cdiv(N, m["BN"]),)


def _launch(kernel, a, b, c, **meta):
    M, N = c.shape
    kernel[_grid(M, N)](a, b, c, **meta)
    cp.cuda.runtime.deviceSynchronize()


def _compiled_for_sm80(kernel):
    ptx = [loaded.art.ptx for loaded in kernel._loaded.values()]
    return bool(ptx) and all(".target sm_80" in p and "mma.sync.aligned.m16n8k16" in p
                             and "wgmma" not in p and "setmaxnreg" not in p for p in ptx)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(1024, 1024, 1024), (1000, 1000, 1000), (256, 512, 64)])
def test_gemm_sm80(dtype, M, N, K):
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    _launch(gemm, a, b, c, BM=128, BN=256, BK=64)
    check_gemm(c, ref)
    assert _compiled_for_sm80(gemm)


def test_sm80_unaligned_rows():
    """N = 300 fp16: b's rows are 600 bytes, 8-byte cp.async pieces."""
    a, b, c, ref = gemm_inputs(130, 300, 200, "float16")
    _launch(gemm, a, b, c, BM=128, BN=256, BK=64)
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K,BN,groups", [(1024, 1024, 512, 256, 2), (300, 200, 260, 72, 1)])
def test_sm80_transposed_b(dtype, M, N, K, BN, groups):
    """c = a @ bt.T: ldmatrix without .trans from the (BN, BK) tile; BN = 72 ends with an
    x2 load, K = 260 gives 520-byte rows (8-byte pieces)."""
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    bt = b.T.copy() if dtype == "float16" else b.T.contiguous()
    _launch(gemm_nt, a, bt, c, BM=128, BN=BN, BK=64, num_consumer_groups=groups)
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K,groups", [(1000, 1000, 1000, 2), (300, 200, 264, 1)])
def test_sm80_column_major_b(dtype, M, N, K, groups):
    """b column-major: cp.async reads its transposed view along K (the contiguous
    dimension), the tile lands K-major as for ``ws.trans`` and ldmatrix reads it
    without .trans."""
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    BN = 256 if groups == 2 else 128
    _launch(gemm, a, column_major(b), c, BM=128, BN=BN, BK=64, num_consumer_groups=groups)
    check_gemm(c, ref)
    assert _compiled_for_sm80(gemm)


@pytest.mark.parametrize("in_flight", [0, 1])
@pytest.mark.parametrize("buffers", [1, 2, 3])
@pytest.mark.parametrize("groups", [1, 2])
def test_sm80_options(groups, buffers, in_flight):
    a, b, c, ref = gemm_inputs(512, 512, 320, "float16")
    BN = 256 if groups == 2 else 128
    _launch(gemm, a, b, c, BM=128, BN=BN, BK=64, num_consumer_groups=groups,
            num_buffers_warp_spec=buffers, dot_in_flight=in_flight)
    check_gemm(c, ref)


def test_sm80_persistent_gemm():
    a, b, c, ref = gemm_inputs(1000, 1000, 1000, "float16")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    ws.jit(matmul_persistent)[(sms,)](a, b, c, BM=128, BN=256, BK=64, GROUP_M=8)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)
