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


def gemm_shifted_a(a, b, c, DR: ws.constexpr, DC: ws.constexpr, BM: ws.constexpr,
                   BN: ws.constexpr, BK: ws.constexpr):
    r, col = ws.program_id(0) * BM, ws.program_id(1) * BN
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        acc = ws.dot(ws.load(a, (r + DR, k * BK + DC), (BM, BK)),
                     ws.load(b, (k * BK, col), (BK, BN)), acc)
    ws.store(c, (r, col), acc)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("n,path", [(64, "TMA"), (58, "cp.async")])
@pytest.mark.parametrize("dr,dc", [(-1, 0), (0, -8)])
def test_gemm_operand_above_and_left_of_the_array_reads_zeros(dr, dc, n, path, groups):
    """A dot operand loaded at row -1 / column -8: those elements are 0 (the fuzzer's seeds
    15203079 / 15203466: the unrolled cp.async copy compared rows signed and read the row
    before the array). The array sits in a buffer whose row and columns before it hold
    1000, so reading them cannot go unnoticed."""
    rng = np.random.default_rng()
    M, K = 200, 136
    base = np.full((M + 1, K + 8), 1000.0, np.float16)
    base[1:, 8:] = rng.standard_normal((M, K))
    b = rng.standard_normal((K, n)).astype(np.float16)
    c = cp.full((M, n), cp.nan, cp.float32)
    a = cp.asarray(base)[1:, 8:]
    meta = dict(DR=dr, DC=dc, BM=128, BN=64, BK=64, num_consumer_groups=groups)
    kernel = ws.jit(gemm_shifted_a)
    assert f"load of 'a': {path}" in kernel.explain(a, cp.asarray(b), c, **meta)
    kernel[(ws.cdiv(M, 128), 1)](a, cp.asarray(b), c, **meta)
    a64 = np.zeros((M, K))
    src = base[1:, 8:].astype(np.float64)
    rows, cols = np.arange(M) + dr, np.arange(K) + dc
    a64[np.ix_((rows >= 0), (cols >= 0))] = src[np.ix_(rows[rows >= 0], cols[cols >= 0])]
    ref = a64 @ b.astype(np.float64)
    got = cp.asnumpy(c).astype(np.float64)
    assert not np.isnan(got).any()
    assert np.abs(got - ref).max() <= 1e-3 * np.abs(ref).max()
