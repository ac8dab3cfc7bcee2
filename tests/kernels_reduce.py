"""Tile programs written with NumPy / Triton reduction semantics (issue 15 item 4): the
reduced axis is dropped (``ws.max(t, axis=1)`` of a (BM, BN) tile is (BM,)), kept with
``keepdims=True``, and ``axis=None`` gives a scalar. Plain functions; each documents its
grid and shapes. :data:`CASES` (as tests/kernels_tiles.py) gives fresh random inputs and
float64 references for the interpreter, ``ws.verify``, ptxas and the GPU.
"""
import math

import numpy as np

import numba_ws as ws

import kernels_tiles as kt
from kernels_tiles import Case, Out, f64


def softmax_np(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """Triton's tutorial softmax: y = softmax(x, axis=1) for rows of N <= BN columns
    (``mask=``, ``other=-inf``), the row max and sum as (BM,) vectors put back with
    ``[:, None]``; y in x's dtype. Any M. Grid: (cdiv(M, BM),)."""
    N = x.shape[1]
    row = ws.program_id(0) * BM
    cols = ws.arange(0, BN)
    t = ws.load(x, (row, 0), (BM, BN), mask=cols[None, :] < N, other=-math.inf)
    t = t.astype(ws.float32)
    m = ws.max(t, axis=1)
    e = ws.exp(t - m[:, None])
    s = ws.sum(e, axis=1)
    ws.store(y, (row, 0), e / s[:, None], mask=cols[None, :] < N)


def row_stats(x, mean, amax, BM: ws.constexpr, BN: ws.constexpr):
    """Per row of x (N <= BN columns): mean (M,) float32 and the argmax (M,) int32 (the
    first of equal maxima), stored as 1-D tiles. Any M. Grid: (cdiv(M, BM),)."""
    N = x.shape[1]
    row = ws.program_id(0) * BM
    cols = ws.arange(0, BN)
    t = ws.load(x, (row, 0), (BM, BN)).astype(ws.float32)
    ws.store(mean, (row,), ws.sum(t, axis=1) / N)
    ws.store(amax, (row,), ws.argmax(ws.where(cols[None, :] < N, t, -math.inf), axis=1))


def col_stats(x, cmin, amin, BM: ws.constexpr, BN: ws.constexpr):
    """Per column of x (M <= BM rows, rows past M load +inf): the minimum (N,) in x's
    dtype and its row (N,) int32, as 1-D tiles. Any N. Grid: (cdiv(N, BN),)."""
    M = x.shape[0]
    col = ws.program_id(0) * BN
    rows = ws.arange(0, BM)
    t = ws.load(x, (0, col), (BM, BN), mask=rows[:, None] < M, other=math.inf)
    ws.store(cmin, (col,), ws.min(t, axis=0))
    ws.store(amin, (col,), ws.argmin(t, 0, keepdims=False))


def tile_totals(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """Per (BM, BN) tile of x (zeros past the edges): y = t / (sum |t| + 1) + max(t), the
    sum a scalar (``axis=None``), the max a (1, 1) tile (``keepdims=True``) broadcast
    back; y float32. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    r, c = ws.program_id(0) * BM, ws.program_id(1) * BN
    t = ws.load(x, (r, c), (BM, BN)).astype(ws.float32)
    total = ws.sum(ws.abs(t))
    ws.store(y, (r, c), t / (total + 1.0) + ws.max(t, keepdims=True))


def vec_center(a, out, B: ws.constexpr):
    """1-D: out = a - max(a block) per block of B (zeros past the end count), the max a
    scalar. Grid: (cdiv(n, B),)."""
    i = ws.program_id(0) * B
    t = ws.load(a, (i,), (B,)).astype(ws.float32)
    ws.store(out, (i,), t - ws.max(t))


def keep_and_squeeze(x, rsum, rsum_1d, BM: ws.constexpr, BN: ws.constexpr):
    """Row sums of x (N <= BN) twice: as (M, 1) (``keepdims=True``) and as (M,) through
    ``ws.squeeze``; float32. Any M. Grid: (cdiv(M, BM),)."""
    row = ws.program_id(0) * BM
    s = ws.sum(ws.load(x, (row, 0), (BM, BN)), 1, keepdims=True)
    ws.store(rsum, (row, 0), s)
    ws.store(rsum_1d, (row,), ws.squeeze(s, 1))


def gemm_rownorm(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = acc / (rowsum |acc| of the tile + 1) with acc = a @ b per output tile, cast to
    ``c.dtype`` (an array's dtype as astype's argument); the row sums a (BM,) vector of the
    accumulator. Any M, N, K.
    Grid: (cdiv(M, BM), cdiv(N, BN))."""
    K = a.shape[1]
    r, col = ws.program_id(0) * BM, ws.program_id(1) * BN
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        acc = ws.dot(ws.load(a, (r, k * BK), (BM, BK)), ws.load(b, (k * BK, col), (BK, BN)),
                     acc)
    norm = ws.sum(ws.abs(acc), axis=1) + 1.0
    ws.store(c, (r, col), (acc / norm[:, None]).astype(c.dtype))


# -- cases -------------------------------------------------------------------------------

def _softmax(dt, N):
    def make(rng):
        M = 300
        x = kt._values(rng, (M, N), dt, -8.0, 8.0)
        e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
        return [x, Out((M, N), dt, e / e.sum(axis=1, keepdims=True), kt.TOL[dt])], \
            (ws.cdiv(M, 64),)
    return Case(f"softmax_np-{dt}-N{N}", softmax_np, make, dict(BM=64, BN=128))


def _argmax_ref(x64):
    return np.argmax(x64, axis=1).astype(np.float64)


def _row_stats(dt, N):
    def make(rng):
        M = 300
        x = kt._values(rng, (M, N), dt)
        x64 = f64(x)
        return [x, Out((M,), "float32", x64.mean(axis=1), 1e-5),
                Out((M,), "int32", _argmax_ref(x64), how="exact")], (ws.cdiv(M, 64),)
    return Case(f"row_stats-{dt}-N{N}", row_stats, make, dict(BM=64, BN=128))


def _col_stats(dt, M):
    def make(rng):
        N = 200
        x = kt._values(rng, (M, N), dt)
        x64 = f64(x)
        return [x, Out((N,), dt, x64.min(axis=0), how="exact"),
                Out((N,), "int32", np.argmin(x64, axis=0).astype(np.float64), how="exact")], \
            (ws.cdiv(N, 64),)
    return Case(f"col_stats-{dt}-M{M}", col_stats, make, dict(BM=64, BN=64), exact=False)


def _tile_totals(dt):
    def make(rng):
        M, N = kt.M_EW, kt.N_EW
        x = kt._values(rng, (M, N), dt)
        ref = np.zeros((M, N))
        for r in range(0, M, 64):
            for c in range(0, N, 64):
                t = f64(x[r:r + 64, c:c + 64])
                ref[r:r + 64, c:c + 64] = t / (np.abs(t).sum() + 1.0) + max(t.max(), 0.0) \
                    if t.shape != (64, 64) else t / (np.abs(t).sum() + 1.0) + t.max()
        return [x, Out((M, N), "float32", ref, 1e-5)], kt._grid2(M, N)
    return Case(f"tile_totals-{dt}", tile_totals, make, dict(kt.TILE), exact=False)


def _vec_center(dt):
    def make(rng):
        n, B = 1000, 256
        a = kt._values(rng, n, dt)
        ref = np.concatenate([f64(a[i:i + B]) - (f64(a[i:i + B]).max() if i + B <= n else
                                                 max(f64(a[i:i + B]).max(), 0.0))
                              for i in range(0, n, B)])
        return [a, Out((n,), "float32", ref, 1e-6)], (ws.cdiv(n, B),)
    return Case(f"vec_center-{dt}", vec_center, make, dict(B=256))


def _keep_and_squeeze(dt):
    def make(rng):
        M, N = 300, 128
        x = kt._values(rng, (M, N), dt)
        s = f64(x).sum(axis=1)
        return [x, Out((M, 1), "float32", s[:, None], 1e-5), Out((M,), "float32", s, 1e-5)], \
            (ws.cdiv(M, 64),)
    return Case(f"keep_and_squeeze-{dt}", keep_and_squeeze, make, dict(BM=64, BN=128))


def _gemm_rownorm(dt):
    def make(rng):
        M, N, K = 300, 200, 136
        a = kt._values(rng, (M, K), dt, -1.0, 1.0)
        b = kt._values(rng, (K, N), dt, -1.0, 1.0)
        acc = f64(a) @ f64(b)
        ref = np.zeros((M, N))
        for r in range(0, M, 128):
            for c in range(0, N, 128):
                t = acc[r:r + 128, c:c + 128]
                ref[r:r + 128, c:c + 128] = t / (np.abs(t).sum(axis=1, keepdims=True) + 1.0)
        return [a, b, Out((M, N), dt, ref, kt.TOL[dt])], (ws.cdiv(M, 128), ws.cdiv(N, 128))
    return Case(f"gemm_rownorm-{dt}", gemm_rownorm, make, dict(BM=128, BN=128, BK=64),
                gemm=True)


def _cases():
    cases = [_softmax("float16", 100), _softmax("float32", 77), _row_stats("float32", 100),
             _row_stats("float16", 128), _col_stats("float32", 50), _col_stats("int32", 64)]
    cases += [_tile_totals("float32"), _tile_totals("float16"), _vec_center("float32"),
              _keep_and_squeeze("float32"), _gemm_rownorm("float16"), _gemm_rownorm("bfloat16")]
    return cases


CASES = {c.name: c for c in _cases()}
host_args = kt.host_args
