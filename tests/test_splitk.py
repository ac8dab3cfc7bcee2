"""Split-K GEMM (examples.matmul_splitk + splitk_reduce, issue 16 item 2) on the CPU: the
interpreter equals a float64 reference on ragged shapes, ``ws.verify`` is clean on both
kernels, and their sm_90a PTX assembles. tests/gpu/test_splitk_gpu.py runs them."""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws import examples
from ptx_tools import assemble

splitk = ws.jit(examples.matmul_splitk)
reduce_ = ws.jit(examples.splitk_reduce)


def run(a, b, c, split, BM=64, BN=64, BK=64, RBM=64, RBN=64):
    M, N = c.shape
    rows = examples.splitk_slice_rows(M, BM)
    partial = np.full((split * rows, N), np.nan, np.float32)
    splitk[(ws.cdiv(M, BM) * ws.cdiv(N, BN) * split,)](a, b, partial, rows, BM=BM, BN=BN,
                                                        BK=BK, SPLIT_K=split)
    reduce_[(ws.cdiv(M, RBM) * ws.cdiv(N, RBN),)](partial, c, rows, BM=RBM, BN=RBN,
                                                 SPLIT_K=split)


@pytest.mark.parametrize("M, N, K, split", [(200, 136, 1000, 3), (64, 64, 64, 2),
                                            (130, 70, 200, 4), (100, 90, 129, 5)])
def test_interpreter_equals_float64(M, N, K, split):
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float16)
    run(a, b, c, split)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert not np.isnan(c).any()
    assert np.abs(c - ref).max() <= 2e-3 * np.abs(ref).max()


def test_more_slices_than_k_blocks_leave_zero_slices():
    """K = 64 is one block: slices 1.. have no k and store zeros, which the reduce adds."""
    rng = np.random.default_rng()
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    c = np.full((64, 64), np.nan, np.float32)
    run(a, b, c, 3)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=0,
                               atol=1e-3)


@pytest.mark.parametrize("groups", [1, 2])
def test_verify_and_ptxas(groups, tmp_path):
    a = np.zeros((256, 512), np.float16)
    b = np.zeros((512, 256), np.float16)
    BN = 256 if groups == 2 else 128
    partial = np.zeros((2 * 256, 256), np.float32)
    c = np.zeros((256, 256), np.float16)
    for kernel, args, meta in [
            (splitk, (a, b, partial, 256), dict(BM=128, BN=BN, BK=64, SPLIT_K=2)),
            (reduce_, (partial, c, 256), dict(BM=64, BN=256, SPLIT_K=2))]:
        report = ws.verify(kernel, (4,), *args, **meta, num_consumer_groups=groups)
        assert report.ok, report
        assemble(kernel.inspect_ptx(*args, **meta, num_consumer_groups=groups), tmp_path)
