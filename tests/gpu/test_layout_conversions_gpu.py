"""The layouts pass's harder cases on the GPU (tests/kernels_layouts.py): a tile read
in the accumulator layout through a reduction, a transposed accumulator converted
through scratch into a register A operand, a vector converted to the accumulator's
column slice. Fresh random inputs, NaN-poisoned outputs, float64 references,
``max|out - ref| / max|ref|`` <= 1e-2 (fp16 operands, fp32 accumulation)."""
import numpy as np
import pytest

import numba_ws as ws
import kernels_layouts as kl

cp = pytest.importorskip("cupy")
TOL = 1e-2


def _check(out, ref):
    got = cp.asnumpy(out).astype(np.float64)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} outputs never written"
    err = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
    assert err <= TOL, f"relative error {err:.3e}"


def _f64(*arrays):
    return [a.astype(np.float64) for a in arrays]


@pytest.mark.parametrize("groups", [1, 2])
def test_gemm_divided_by_row_sums(groups):
    rng = np.random.default_rng()
    M, N, K = 300, 200, 136
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    x = rng.random((M, N)).astype(np.float32)
    c = cp.full((M, N), cp.nan, cp.float32)
    BM, BN = 128, 128
    grid = (ws.cdiv(M, BM) * ws.cdiv(N, BN),)
    ws.jit(kl.gemm_div_rowsum)[grid](cp.asarray(a), cp.asarray(b), cp.asarray(x), c,
                                     BM=BM, BN=BN, BK=64, num_consumer_groups=groups)
    cp.cuda.runtime.deviceSynchronize()
    a64, b64, x64 = _f64(a, b, x)
    ref = a64 @ b64
    for i in range(0, M, BM):           # row sums of each (BM, BN) tile, zeros past N
        for j in range(0, N, BN):
            s = x64[i:i + BM, j:j + BN].sum(axis=1, keepdims=True) + 1.0
            ref[i:i + BM, j:j + BN] /= s
    _check(c, ref)


def test_transposed_scores_as_register_a():
    rng = np.random.default_rng()
    N, D, BM = 200, 64, 64
    x = (rng.standard_normal((BM, D)) / 4).astype(np.float16)
    y = (rng.standard_normal((D, N)) / 4).astype(np.float16)
    z = rng.standard_normal((BM, D)).astype(np.float16)
    o = cp.full((N, D), cp.nan, cp.float32)
    ws.jit(kl.transposed_scores_dot)[(ws.cdiv(N, 64),)](
        cp.asarray(x), cp.asarray(y), cp.asarray(z), o, BM=BM, BN=64, D=D,
        num_consumer_groups=1)
    cp.cuda.runtime.deviceSynchronize()
    x64, y64, z64 = _f64(x, y, z)
    p = (x64 @ y64).T.astype(np.float16).astype(np.float64)
    _check(o, p @ z64)


@pytest.mark.parametrize("groups", [1, 2])
def test_column_maxima_converted_onto_the_accumulator(groups):
    rng = np.random.default_rng()
    M, N, K = 300, 200, 136
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    x = rng.standard_normal((M, N)).astype(np.float32)
    c = cp.full((M, N), cp.nan, cp.float32)
    BM, BN = 128, 128
    grid = (ws.cdiv(M, BM) * ws.cdiv(N, BN),)
    ws.jit(kl.blocked_stats_on_acc)[grid](cp.asarray(a), cp.asarray(b), cp.asarray(x), c,
                                          BM=BM, BN=BN, BK=64, num_buffers_warp_spec=2,
                                          num_consumer_groups=groups)
    cp.cuda.runtime.deviceSynchronize()
    a64, b64, x64 = _f64(a, b, x)
    ref = a64 @ b64
    for i in range(0, M, BM):     # column maxima of each whole (BM, BN) tile; rows past M
        for j in range(0, N, BN):  # read 0 (so they count in the maximum)
            pad = np.zeros((BM, BN))
            blk = x64[i:i + BM, j:j + BN]
            pad[:blk.shape[0], :blk.shape[1]] = blk
            out = ref[i:i + BM, j:j + BN]
            out -= pad.max(axis=0)[None, :out.shape[1]]
    _check(c, ref)
