"""Offsets that are not multiples of the tile, on the GPU (the GPU fuzzer's findings of
2026-12-03): loads at ``i + SHIFT`` (TMA only where the column offset is 16-byte aligned;
an illegal instruction before) and accumulator stores at negative and odd column offsets
(the epilogue's fast path wrote the row before's last columns). NaN-poisoned outputs,
float64 references."""
import numpy as np
import pytest

import numba_ws as ws

cp = pytest.importorskip("cupy")


def shifted_row(x, y, SHIFT: ws.constexpr, B: ws.constexpr):
    i = ws.program_id(0) * B
    ws.store(y, (i,), ws.load(x, (i + SHIFT,), (B,)))


def gemm_shifted_store(a, b, c, SHIFT: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr,
                       BK: ws.constexpr):
    r, col = ws.program_id(0) * BM, ws.program_id(1) * BN
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        acc = ws.dot(ws.load(a, (r, k * BK), (BM, BK)), ws.load(b, (k * BK, col), (BK, BN)),
                     acc)
    ws.store(c, (r, col + SHIFT), acc)


@pytest.mark.parametrize("shift", [0, 1, 2, -3, 8])
def test_shifted_loads(shift):
    n, B = 1000, 256
    x = np.random.default_rng().standard_normal(n).astype(np.float16)
    y = cp.full(n, cp.nan, cp.float16)
    ws.jit(shifted_row)[(ws.cdiv(n, B),)](cp.asarray(x), y, SHIFT=shift, B=B)
    src = np.arange(n) + shift
    ref = np.where((src >= 0) & (src < n), x[np.clip(src, 0, n - 1)], 0)
    assert np.array_equal(cp.asnumpy(y), ref.astype(np.float16))


@pytest.mark.parametrize("shift", [-2, 1, -3])
def test_gemm_stores_at_shifted_columns(shift):
    rng = np.random.default_rng()
    M, N, K = 256, 256, 128
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = cp.full((M, N), cp.nan, cp.float32)
    ws.jit(gemm_shifted_store)[(2, 2)](cp.asarray(a), cp.asarray(b), c, SHIFT=shift,
                                       BM=128, BN=128, BK=64)
    full = a.astype(np.float64) @ b.astype(np.float64)
    ref = np.full((M, N), np.nan)
    for j in range(N):              # output column j + shift gets column j of the product
        if 0 <= j + shift < N:
            ref[:, j + shift] = full[:, j]
    got = cp.asnumpy(c).astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(ref)), "written where nothing belongs"
    ok = ~np.isnan(ref)
    assert np.abs(got[ok] - ref[ok]).max() <= 1e-3 * np.abs(ref[ok]).max()
