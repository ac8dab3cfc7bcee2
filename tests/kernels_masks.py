"""Tile programs of issue 15 items 1-2 -- index tiles (``ws.arange``), views
(``x[:, None]``, ``ws.expand_dims``, ``ws.broadcast_to``), comparisons, boolean tiles,
``ws.where`` and masked loads / stores -- and their cases, shared by the interpreter,
compiler and GPU tests (tests/test_index_masks.py, tests/gpu/test_index_masks_gpu.py).

The kernels are plain functions (wrap them with ``ws.jit``); each docstring states its
grid and what it needs of the shapes. Unlike tests/kernels_tiles.py, ragged shapes are
handled with masks: softmax and layer norm take any N <= BN, causal attention masks the
keys after each query.

The cases (:data:`CASES`) reuse kernels_tiles' :class:`~kernels_tiles.Case` and
:class:`~kernels_tiles.Out` (NaN-poisoned outputs with guard rows, float64 references);
:class:`Partial` is an output the kernel writes only in part (a masked store): where its
reference is NaN the poison must still be there.
"""
import math
from dataclasses import dataclass

import numpy as np

import numba_ws as ws

import kernels_tiles as kt
from kernels_tiles import Case, Out, f64

# -- index tiles and integer index arithmetic --------------------------------------------


def index_scale(x, y, B: ws.constexpr):
    """y[i] = x[i] * i for 1-D x, y (int32 or float32): ``i`` from ``ws.arange`` (an int32
    tile times x's tile). Any n. Grid: (cdiv(n, B),)."""
    off = ws.program_id(0) * B
    i = off + ws.arange(0, B)
    ws.store(y, (off,), ws.load(x, (off,), (B,)) * i)


def linear_index(y, START: ws.constexpr, STOP: ws.constexpr, BM: ws.constexpr,
                 BN: ws.constexpr):
    """y[i, j] = (i * N + j) + START (int32 y of shape (M, N)): a (BM, 1) row index
    ``rows[:, None]`` and a (1, BN) column index ``ws.expand_dims(cols, 0)`` combined;
    ``cols`` is ``ws.arange(START, STOP) - START`` (STOP = START + BN). Any M, N.
    Grid: (cdiv(M, BM), cdiv(N, BN))."""
    N = y.shape[1]
    rows = ws.program_id(0) * BM + ws.arange(0, BM)
    cols = ws.arange(START, STOP) - START + ws.program_id(1) * BN
    idx = rows[:, None] * N + ws.expand_dims(cols, 0) + START
    ws.store(y, (ws.program_id(0) * BM, ws.program_id(1) * BN), idx)


def broadcast_sum(r, c, y, BM: ws.constexpr, BN: ws.constexpr):
    """y[i, j] = r[i] * 2 + c[j] (float32): two loaded 1-D tiles viewed as (BM, 1) with
    ``r_t[:, None]`` and broadcast with ``ws.broadcast_to`` / ``c_t[None, :]``.
    r: (M,), c: (N,), y: (M, N). Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    r_t = ws.load(r, (row,), (BM,))
    c_t = ws.load(c, (col,), (BN,))
    full_r = ws.broadcast_to(r_t[:, None], (BM, BN))
    ws.store(y, (row, col), full_r * 2 + c_t[None, :])


# -- comparisons, boolean tiles, where ----------------------------------------------------


def compare_codes(x, z, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = sum of bit k where test k holds (int32 y): x < z (1), x <= z (2), x == z (4),
    x != z (8), x > z (16), x >= z (32), ~(x < z) (64), (x < z) ^ (x > z) (128),
    (x < z) | (x == z) (256), (x <= z) & (x >= z) (512), x > 0.5 (1024, a scalar). x, z
    of one float dtype, any values (NaN and inf included). Any M, N.
    Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    a = ws.load(x, (row, col), (BM, BN))
    b = ws.load(z, (row, col), (BM, BN))
    code = ws.where(a < b, 1, 0) + ws.where(a <= b, 2, 0) + ws.where(a == b, 4, 0)
    code = code + ws.where(a != b, 8, 0) + ws.where(a > b, 16, 0) + ws.where(a >= b, 32, 0)
    code = code + ws.where(~(a < b), 64, 0) + ws.where((a < b) ^ (a > b), 128, 0)
    code = code + ws.where((a < b) | (a == b), 256, 0)
    code = code + ws.where((a <= b) & (a >= b), 512, 0) + ws.where(a > 0.5, 1024, 0)
    ws.store(y, (row, col), code)


def where_select(x, y, K: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """y = where(x > 0, x, x * 0.25) (leaky relu) where column j < K, else -x: a tile
    condition and a (1, BN) column condition broadcast over the rows. Any M, N.
    Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    t = ws.load(x, (row, col), (BM, BN))
    cols = col + ws.arange(0, BN)
    leaky = ws.where(t > 0, t, t * 0.25)
    ws.store(y, (row, col), ws.where(cols[None, :] < K, leaky, -t))


def where_transposed(x, y, B: ws.constexpr):
    """y = where(x.T > 0, x, 0) for a square (B, B) block at the diagonal of x (N, N):
    ``ws.trans`` of a boolean tile, whose layout must then be converted (a boolean tile
    through the scratch region). Any N. Grid: (cdiv(N, B),)."""
    off = ws.program_id(0) * B
    t = ws.load(x, (off, off), (B, B)) * 1.0     # one register tile: m's layout is t's
    m = t > 0
    ws.store(y, (off, off), ws.where(ws.trans(m), t, 0.0))


# -- masked loads and stores ------------------------------------------------------------


def masked_copy(x, y, OTHER: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """y = x where (i ^ j) & 1 == 0 (a checkerboard, not a box) and inside x, else
    OTHER: ``ws.load(..., mask=, other=OTHER)`` stored whole. y (M2, N2) may be larger
    than x (M, N): its elements past x read OTHER too. Grid: (cdiv(M2, BM), cdiv(N2, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    rows = row + ws.arange(0, BM)
    cols = col + ws.arange(0, BN)
    checker = ((rows[:, None] ^ cols[None, :]) & 1) == 0
    ws.store(y, (row, col), ws.load(x, (row, col), (BM, BN), mask=checker, other=OTHER))


def padded_copy(x, y, OTHER: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """y = x inside x, OTHER past its edges (``other`` without a mask). y (M2, N2) >= x.
    Grid: (cdiv(M2, BM), cdiv(N2, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    ws.store(y, (row, col), ws.load(x, (row, col), (BM, BN), other=OTHER))


def masked_store(x, y, LO: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """y[i, j] = x[i, j] only where x[i, j] > LO (a data-dependent store mask); every
    other element of y keeps its value. Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    t = ws.load(x, (row, col), (BM, BN))
    ws.store(y, (row, col), t, mask=t > LO)


def masked_store_rows(x, y, NROWS: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """y[i, :] = x[i, :] * 2 for the first NROWS rows of each block of BM rows only (a
    (BM, 1) store mask from ``ws.arange(0, BM)[:, None] < NROWS``); the other rows of y
    keep their values. Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    t = ws.load(x, (row, col), (BM, BN))
    keep = ws.arange(0, BM)[:, None] < NROWS
    ws.store(y, (row, col), t * 2, mask=keep)


# -- fused row kernels with a ragged N -----------------------------------------------------


def softmax_masked(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = softmax(x, axis=1) in float32 for any N <= BN: the columns past N load as
    -inf (``mask=cols < N, other=-inf``), so exp gives them 0 and the row max ignores
    them. Any M. Grid: (cdiv(M, BM),)."""
    N = x.shape[1]
    row = ws.program_id(0) * BM
    cols = ws.arange(0, BN)
    t = ws.load(x, (row, 0), (BM, BN), mask=cols[None, :] < N, other=-math.inf)
    t = t.astype(ws.float32)
    e = ws.exp(t - ws.max(t, 1, keepdims=True))
    ws.store(y, (row, 0), e / ws.sum(e, 1, keepdims=True), mask=cols[None, :] < N)


def layernorm_masked(x, w, b, y, mean, rstd, eps, BM: ws.constexpr, BN: ws.constexpr):
    """Layer norm over rows of any N <= BN, in float32 (tests/kernels_tiles.py
    ``layernorm_fwd`` with masks): the padding columns are masked out of the variance
    (``where(mask, x - mean, 0)``); w and b load 0 past N. mean, rstd: (M, 1).
    Any M. Grid: (cdiv(M, BM),)."""
    N = x.shape[1]
    row = ws.program_id(0) * BM
    mask = ws.arange(0, BN)[None, :] < N
    t = ws.load(x, (row, 0), (BM, BN), mask=mask).astype(ws.float32)
    mu = ws.sum(t, 1, keepdims=True) / N
    xc = ws.where(mask, t - mu, 0.0)
    var = ws.sum(xc * xc, 1, keepdims=True) / N
    r = ws.exp(ws.log(var + eps) * -0.5)
    wt = ws.load(w, (0,), (BN,)).astype(ws.float32)
    bt = ws.load(b, (0,), (BN,)).astype(ws.float32)
    ws.store(y, (row, 0), xc * r * wt + bt)
    ws.store(mean, (row, 0), mu)
    ws.store(rstd, (row, 0), r)


# -- GEMM with masks --------------------------------------------------------------------


def gemm_tril(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = tril(a @ b) (fp16): the accumulator zeroed above the diagonal with
    ``where(rows[:, None] >= cols[None, :], acc, 0)`` (a mask in the accumulator
    layout), stored unmasked. Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    K = a.shape[1]
    N = b.shape[1]
    pid = ws.program_id(0)
    pid_m = pid // ws.cdiv(N, BN)
    pid_n = pid % ws.cdiv(N, BN)
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    rows = pid_m * BM + ws.arange(0, BM)
    cols = pid_n * BN + ws.arange(0, BN)
    acc = ws.where(rows[:, None] >= cols[None, :], acc, 0.0)
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(ws.float16))


def gemm_store_mask(a, b, c, LIMIT: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr,
                    BK: ws.constexpr):
    """c[i, j] = (a @ b)[i, j] (fp16) only where i + j < LIMIT (an anti-diagonal store
    mask on the accumulator); the rest of c is left as it was.
    Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    K = a.shape[1]
    N = b.shape[1]
    pid = ws.program_id(0)
    pid_m = pid // ws.cdiv(N, BN)
    pid_n = pid % ws.cdiv(N, BN)
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    rows = pid_m * BM + ws.arange(0, BM)
    cols = pid_n * BN + ws.arange(0, BN)
    keep = rows[:, None] + cols[None, :] < LIMIT
    ws.store(c, (pid_m * BM, pid_n * BN), acc, mask=keep)


def masked_k_product(a, b, pid_m, pid_n, KEEP, BM, BN, BK, MASK_B):
    """a[tile rows, :KEEP] @ b[:KEEP, tile cols] in fp32, a's K tail masked; b's too when
    MASK_B (a constexpr: decided at compile time)."""
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        ks = k * BK + ws.arange(0, BK)
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK), mask=ks[None, :] < KEEP)
        if MASK_B:
            y = ws.load(b, (k * BK, pid_n * BN), (BK, BN), mask=ks[:, None] < KEEP)
        else:
            y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    return acc


def gemm_masked_a(a, b, c, KEEP: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr,
                  BK: ws.constexpr):
    """c = a[:, :KEEP] @ b[:KEEP, :] (float32 c): the A tiles loaded with
    ``mask=ks[None, :] < KEEP`` -- a masked load is a register tile, so the dot takes A
    from registers (wgmma RS / mma.sync; a masked B goes to shared memory first:
    :func:`gemm_masked_ab`). Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    pid = ws.program_id(0)
    pid_m, pid_n = pid // ws.cdiv(b.shape[1], BN), pid % ws.cdiv(b.shape[1], BN)
    acc = masked_k_product(a, b, pid_m, pid_n, KEEP, BM, BN, BK, False)
    ws.store(c, (pid_m * BM, pid_n * BN), acc)


def gemm_masked_ab(a, b, c, KEEP: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr,
                   BK: ws.constexpr):
    """c = a[:, :KEEP] @ b[:KEEP, :] with both operands masked along K, as Triton's
    tutorial matmul writes it (``mask=ks[None, :] < K`` on a, ``ks[:, None] < K`` on b):
    the masked B is a register tile, written to shared memory before each dot. c in its
    own dtype. Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    pid = ws.program_id(0)
    pid_m, pid_n = pid // ws.cdiv(b.shape[1], BN), pid % ws.cdiv(b.shape[1], BN)
    acc = masked_k_product(a, b, pid_m, pid_n, KEEP, BM, BN, BK, True)
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(c.dtype))


def gemm_dequant(a, w, scale, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = a @ (w * scale) for int8 weights w (K, N) and a per-column fp32 ``scale``
    (weight-only quantization): B is computed in registers (``astype`` and a broadcast
    multiply, rounded to a's dtype) and written to shared memory before each dot.
    Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    K = a.shape[1]
    N = w.shape[1]
    pid = ws.program_id(0)
    pid_m = pid // ws.cdiv(N, BN)
    pid_n = pid % ws.cdiv(N, BN)
    acc = ws.zeros((BM, BN), ws.float32)
    s = ws.load(scale, (pid_n * BN,), (BN,))
    for k in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        q = ws.load(w, (k * BK, pid_n * BN), (BK, BN))
        y = (q.astype(ws.float32) * s[None, :]).astype(a.dtype)
        acc = ws.dot(x, y, acc)
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(c.dtype))

# -- causal attention ----------------------------------------------------------------------


def causal_attention_fwd(q, k, v, o, seq_len, sm_scale,
                         BM: ws.constexpr, BN: ws.constexpr, D: ws.constexpr):
    """Causal flash-attention forward (tests/kernels.py ``attention_fwd`` with a mask):
    o = softmax(q k^T * sm_scale + causal) v, query i attending to keys j <= i only:
    ``s = where(q_idx[:, None] >= k_idx[None, :], s, -inf)``; key blocks past the
    diagonal are skipped. q, k, v, o: (heads * seq_len, D) fp16, each head's rows
    contiguous; seq_len % BM == 0 and seq_len % BN == 0. Grid: (seq_len // BM, heads).
    """
    row0 = ws.program_id(1) * seq_len
    start = ws.program_id(0) * BM
    q_tile = ws.load(q, (row0 + start, 0), (BM, D))
    q_idx = start + ws.arange(0, BM)
    m_i = ws.full((BM, 1), -math.inf, ws.float32)
    l_i = ws.zeros((BM, 1), ws.float32)
    acc = ws.zeros((BM, D), ws.float32)
    for j in range(ws.cdiv(start + BM, BN)):
        k_tile = ws.load(k, (row0 + j * BN, 0), (BN, D))
        v_tile = ws.load(v, (row0 + j * BN, 0), (BN, D))
        k_idx = j * BN + ws.arange(0, BN)
        s = ws.dot(q_tile, ws.trans(k_tile)) * sm_scale
        s = ws.where(q_idx[:, None] >= k_idx[None, :], s, -math.inf)
        m_new = ws.maximum(m_i, ws.max(s, 1, keepdims=True))
        alpha = ws.exp(m_i - m_new)
        p = ws.exp(s - m_new)
        l_i = l_i * alpha + ws.sum(p, 1, keepdims=True)
        acc = ws.dot(p.astype(ws.float16), v_tile, acc * alpha)
        m_i = m_new
    ws.store(o, (row0 + start, 0), (acc / l_i).astype(ws.float16))


def causal_attention_diag_fwd(q, k, v, o, seq_len, sm_scale,
                              BM: ws.constexpr, BN: ws.constexpr, D: ws.constexpr):
    """:func:`causal_attention_fwd` masking only the key blocks that cross the diagonal
    (a runtime ``if`` in the loop body: the K/V slot is read on both sides of it, so the
    partitioner releases it in the block after the ``if``). Same shapes and grid."""
    row0 = ws.program_id(1) * seq_len
    start = ws.program_id(0) * BM
    q_tile = ws.load(q, (row0 + start, 0), (BM, D))
    q_idx = start + ws.arange(0, BM)
    m_i = ws.full((BM,), -math.inf, ws.float32)
    l_i = ws.zeros((BM,), ws.float32)
    acc = ws.zeros((BM, D), ws.float32)
    for j in range(ws.cdiv(start + BM, BN)):
        k_tile = ws.load(k, (row0 + j * BN, 0), (BN, D))
        v_tile = ws.load(v, (row0 + j * BN, 0), (BN, D))
        s = ws.dot(q_tile, ws.trans(k_tile)) * sm_scale
        if j * BN + BN > start:
            k_idx = j * BN + ws.arange(0, BN)
            s = ws.where(q_idx[:, None] >= k_idx[None, :], s, -math.inf)
        m_new = ws.maximum(m_i, ws.max(s, axis=1))
        alpha = ws.exp(m_i - m_new)
        p = ws.exp(s - m_new[:, None])
        l_i = l_i * alpha + ws.sum(p, axis=1)
        acc = ws.dot(p.astype(ws.float16), v_tile, acc * alpha[:, None])
        m_i = m_new
    ws.store(o, (row0 + start, 0), (acc / l_i[:, None]).astype(ws.float16))


# == test cases ===========================================================================


@dataclass
class Partial(Out):
    """An output the kernel writes in part: where ``ref`` is NaN the element must be NaN
    afterwards (the poison left alone, or a NaN written); elsewhere as :class:`Out`
    (``how`` "exact" or "rel"). Guard rows must keep their poison."""

    def check(self, base, what=""):
        out, guard = base[:self.shape[0]], base[self.shape[0]:]
        assert kt._poisoned(guard).all(), f"{what}: the kernel wrote past the output's last row"
        got = out.astype(np.float64)
        want_nan = np.isnan(self.ref)
        bad = np.isnan(got) != want_nan
        assert not bad.any(), (f"{what}: {int(bad.sum())} elements NaN where they should not "
                               f"be, or written where they should not, first at "
                               f"{np.argwhere(bad)[0].tolist()}")
        got, ref = got[~want_nan], self.ref[~want_nan]
        if self.how == "exact":
            bad = got != ref
            assert not bad.any(), (f"{what}: {int(bad.sum())} elements differ, e.g. got "
                                   f"{got[bad][:3]} want {ref[bad][:3]}")
        elif ref.size:
            diff = np.abs(got - ref)
            scale = max(float(np.max(np.abs(ref[np.isfinite(ref)]), initial=0.0)), 1e-30)
            err = float(np.max(np.where(np.isfinite(ref), diff, 0.0))) / scale
            assert err <= self.tol, f"{what}: relative error {err:.3e} > {self.tol:g}"
            assert (got[~np.isfinite(ref)] == ref[~np.isfinite(ref)]).all(), \
                f"{what}: infinities differ"
        return self


def _grid2(M, N, BM=64, BN=64):
    return (ws.cdiv(M, BM), ws.cdiv(N, BN))


TILE = dict(BM=64, BN=64)
M_EW, N_EW = 300, 200


def _index_scale(dt):
    def make(rng):
        n = 1000
        x = kt._values(rng, n, dt)
        return [x, Out((n,), dt, f64(x) * np.arange(n),
                       0.0 if dt == "int32" else 1e-6,
                       "exact" if dt == "int32" else "ulp")], (ws.cdiv(n, 256),)
    return Case(f"index_scale-{dt}", index_scale, make, dict(B=256))


def _linear_index(start):
    def make(rng):
        M, N = M_EW, N_EW
        ref = np.arange(M)[:, None] * N + np.arange(N)[None, :] + start
        return [Out((M, N), "int32", ref.astype(np.float64), how="exact")], _grid2(M, N)
    return Case(f"linear_index-s{start}", linear_index, make,
                dict(TILE, START=start, STOP=start + TILE["BN"]))


def _broadcast_sum():
    def make(rng):
        M, N = M_EW, N_EW
        r, c = kt._values(rng, M, "float32"), kt._values(rng, N, "float32")
        ref = f64(r)[:, None] * 2 + f64(c)[None, :]
        return [r, c, Out((M, N), "float32", ref, 1e-6, "ulp")], _grid2(M, N)
    return Case("broadcast_sum", broadcast_sum, make, dict(TILE))


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.0, -1.0])


def _with_specials(rng, x):
    """``x`` with a quarter of its elements replaced by NaN, ±inf, ±0, 0.5, ±1 (float
    ``x``; an int ``x`` is returned as it is)."""
    if x.dtype.kind in "iu":
        return x
    x = x.copy()
    flat = x.reshape(-1)
    pick = rng.random(flat.size) < 0.25
    flat[pick] = rng.choice(SPECIALS, int(pick.sum())).astype(x.dtype)
    return x


def compare_reference(a, b):
    """float64 codes of :func:`compare_codes` (NumPy's comparisons)."""
    with np.errstate(invalid="ignore"):
        tests = [a < b, a <= b, a == b, a != b, a > b, a >= b, ~(a < b), (a < b) ^ (a > b),
                 (a < b) | (a == b), (a <= b) & (a >= b), a > 0.5]
    return sum(t.astype(np.float64) * 2 ** k for k, t in enumerate(tests))


def _compare_codes(dt):
    def make(rng):
        M, N = M_EW, N_EW
        x = _with_specials(rng, kt._values(rng, (M, N), dt, -2.0, 2.0))
        z = _with_specials(rng, kt._values(rng, (M, N), dt, -2.0, 2.0))
        z[::7] = x[::7]                     # equal pairs (NaN == NaN is False)
        return [x, z, Out((M, N), "int32", compare_reference(f64(x), f64(z)),
                          how="exact")], _grid2(M, N)
    return Case(f"compare_codes-{dt}", compare_codes, make, dict(TILE))


def _where_select(dt):
    def make(rng):
        M, N, K = M_EW, N_EW, 70
        x = _with_specials(rng, kt._values(rng, (M, N), dt))
        x64 = f64(x)
        with np.errstate(invalid="ignore"):    # x * 0.25 rounded once to x's dtype
            quarter = f64((x64 * 0.25).astype(kt.np_dtype(dt)))   # (fp16 subnormals)
            leaky = np.where(x64 > 0, x64, quarter)
        ref = np.where(np.arange(N)[None, :] < K, leaky, -x64)
        return [x, Partial((M, N), dt, ref, how="exact")], _grid2(M, N)
    return Case(f"where_select-{dt}", where_select, make, dict(TILE, K=70))


def _where_transposed():
    def make(rng):
        N, B = 200, 64
        x = kt._values(rng, (N, N), "float32")
        ref = np.full((N, N), np.nan)
        for o in range(0, N, B):
            blk = f64(x[o:o + B, o:o + B])
            ref[o:o + B, o:o + B] = np.where(blk.T > 0, blk, 0.0)
        return [x, Partial((N, N), "float32", ref, how="exact")], (ws.cdiv(N, B),)
    return Case("where_transposed", where_transposed, make, dict(B=64))


def checker_reference(x, shape, other):
    """float64 result of :func:`masked_copy` into a ``shape`` array."""
    out = np.full(shape, other, np.float64)
    i, j = np.indices(x.shape)
    keep = ((i ^ j) & 1) == 0
    out[:x.shape[0], :x.shape[1]] = np.where(keep, f64(x), other)
    return out


def _masked_copy(dt, other):
    def make(rng):
        M, N, M2, N2 = 250, 170, 320, 256
        x = _with_specials(rng, kt._values(rng, (M, N), dt))
        return [x, Partial((M2, N2), dt, checker_reference(x, (M2, N2), other),
                           how="exact")], _grid2(M2, N2)
    return Case(f"masked_copy-{dt}-{other}", masked_copy, make, dict(TILE, OTHER=other))


def _padded_copy(dt, other):
    def make(rng):
        M, N, M2, N2 = 250, 170, 320, 256
        x = kt._values(rng, (M, N), dt)
        ref = np.full((M2, N2), other, np.float64)
        ref[:M, :N] = f64(x)
        return [x, Partial((M2, N2), dt, ref, how="exact")], _grid2(M2, N2)
    return Case(f"padded_copy-{dt}-{other}", padded_copy, make, dict(TILE, OTHER=other))


def _masked_store(dt, lo):
    def make(rng):
        M, N = M_EW, N_EW
        x = kt._values(rng, (M, N), dt)
        x64 = f64(x)
        ref = np.where(x64 > lo, x64, np.nan)
        return [x, Partial((M, N), dt, ref, how="exact")], _grid2(M, N)
    return Case(f"masked_store-{dt}-lo{lo}", masked_store, make, dict(TILE, LO=lo))


def _masked_store_rows(nrows):
    def make(rng):
        M, N = M_EW, N_EW
        x = kt._values(rng, (M, N), "float32")
        keep = (np.arange(M) % 64 < nrows)[:, None]
        ref = np.where(keep, f64(x) * 2, np.nan)
        return [x, Partial((M, N), "float32", ref, how="exact")], _grid2(M, N)
    return Case(f"masked_store_rows-{nrows}", masked_store_rows, make,
                dict(TILE, NROWS=nrows))


def _softmax_masked(dt, N):
    def make(rng):
        M = 300
        x = kt._values(rng, (M, N), dt, -8.0, 8.0)
        e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        return [x, Out((M, N), dt, ref, kt.TOL[dt])], (ws.cdiv(M, 64),)
    return Case(f"softmax_masked-{dt}-N{N}", softmax_masked, make, dict(BM=64, BN=128))


def _layernorm_masked(dt, N):
    def make(rng):
        M, eps = 300, 1e-5
        x = kt._values(rng, (M, N), dt, -3.0, 5.0)
        w, b = kt._values(rng, N, dt, 0.5, 1.5), kt._values(rng, N, dt, -1.0, 1.0)
        x64 = f64(x)
        mu = x64.mean(axis=1, keepdims=True)
        r = 1.0 / np.sqrt(((x64 - mu) ** 2).mean(axis=1, keepdims=True) + eps)
        y = (x64 - mu) * r * f64(w) + f64(b)
        return [x, w, b, Out((M, N), dt, y, kt.TOL[dt]), Out((M, 1), "float32", mu, 1e-5),
                Out((M, 1), "float32", r, 1e-5), eps], (ws.cdiv(M, 64),)
    return Case(f"layernorm_masked-{dt}-N{N}", layernorm_masked, make, dict(BM=64, BN=128))


GEMM = dict(M=300, N=200, K=136)
GEMM_META = dict(BM=128, BN=128, BK=64)


def _gemm_inputs(rng):
    M, N, K = GEMM["M"], GEMM["N"], GEMM["K"]
    a = kt._values(rng, (M, K), "float16", -1.0, 1.0)
    b = kt._values(rng, (K, N), "float16", -1.0, 1.0)
    grid = (ws.cdiv(M, GEMM_META["BM"]) * ws.cdiv(N, GEMM_META["BN"]),)
    return a, b, f64(a) @ f64(b), grid


def _gemm_tril():
    def make(rng):
        a, b, ab, grid = _gemm_inputs(rng)
        return [a, b, Out(ab.shape, "float16", np.tril(ab), kt.TOL["float16"])], grid
    return Case("gemm_tril", gemm_tril, make, dict(GEMM_META), gemm=True)


def _gemm_store_mask(limit):
    def make(rng):
        a, b, ab, grid = _gemm_inputs(rng)
        i, j = np.indices(ab.shape)
        ref = np.where(i + j < limit, ab, np.nan)
        return [a, b, Partial(ab.shape, "float16", ref, kt.TOL["float16"])], grid
    return Case(f"gemm_store_mask-{limit}", gemm_store_mask, make,
                dict(GEMM_META, LIMIT=limit), gemm=True)


def _gemm_masked_a(keep):
    def make(rng):
        a, b, _, _ = _gemm_inputs(rng)
        ref = f64(a[:, :keep]) @ f64(b[:keep])
        grid = (ws.cdiv(GEMM["M"], 64) * ws.cdiv(GEMM["N"], 128),)
        return [a, b, Out(ref.shape, "float32", ref, kt.DOT_F32_TOL)], grid
    # BM = 64: A (64 x 64 fp16) and the accumulator in registers fit sm_80's budget
    return Case(f"gemm_masked_a-{keep}", gemm_masked_a, make,
                dict(BM=64, BN=128, BK=64, KEEP=keep), gemm=True)


def _gemm_masked_ab(keep, dt):
    """Both operands NaN past column / row ``keep`` of K: the masks must replace them."""
    def make(rng):
        M, N, K = GEMM["M"], GEMM["N"], GEMM["K"]
        a = kt._values(rng, (M, K), dt, -1.0, 1.0)
        b = kt._values(rng, (K, N), dt, -1.0, 1.0)
        ref = f64(a[:, :keep]) @ f64(b[:keep])
        a[:, keep:] = np.nan
        b[keep:] = np.nan
        grid = (ws.cdiv(M, 64) * ws.cdiv(N, 128),)
        return [a, b, Out(ref.shape, dt, ref, kt.TOL[dt])], grid
    # BM = 64 as gemm_masked_a: A, B and the accumulator in registers fit without spills
    return Case(f"gemm_masked_ab-{dt}-{keep}", gemm_masked_ab, make,
                dict(BM=64, BN=128, BK=64, KEEP=keep), gemm=True)


def _gemm_dequant(dt):
    def make(rng):
        M, N, K = GEMM["M"], GEMM["N"], GEMM["K"]
        a = kt._values(rng, (M, K), dt, -1.0, 1.0)
        w = rng.integers(-127, 128, size=(K, N)).astype(np.int8)
        scale = rng.uniform(0.002, 0.01, size=N).astype(np.float32)
        b = (w.astype(np.float32) * scale[None, :]).astype(kt.np_dtype(dt))   # B as rounded
        ref = f64(a) @ f64(b)
        grid = (ws.cdiv(M, GEMM_META["BM"]) * ws.cdiv(N, GEMM_META["BN"]),)
        return [a, w, scale, Out(ref.shape, dt, ref, kt.TOL[dt])], grid
    return Case(f"gemm_dequant-{dt}", gemm_dequant, make, dict(GEMM_META), gemm=True)


def causal_reference(q, k, v, heads, seq, scale):
    """float64 causal attention per head."""
    o = np.empty(q.shape)
    causal = np.tril(np.ones((seq, seq), bool))
    for h in range(heads):
        rows = slice(h * seq, (h + 1) * seq)
        s = np.where(causal, f64(q[rows]) @ f64(k[rows]).T * scale, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        o[rows] = (p / p.sum(axis=1, keepdims=True)) @ f64(v[rows])
    return o


def _causal(heads, seq, D, BM, BN, kernel=causal_attention_fwd):
    def make(rng):
        q, k, v = (kt._values(rng, (heads * seq, D), "float16", -2.0, 2.0) for _ in range(3))
        scale = 1.0 / math.sqrt(D)
        o = causal_reference(q, k, v, heads, seq, scale)
        return [q, k, v, Out(o.shape, "float16", o, kt.TOL["float16"]), seq, scale], \
            (seq // BM, heads)
    name = kernel.__name__.replace("_fwd", "")
    return Case(f"{name}-h{heads}-s{seq}-d{D}-{BM}x{BN}", kernel, make,
                dict(BM=BM, BN=BN, D=D), gemm=True)


def _cases():
    cases = [_index_scale("int32"), _index_scale("float32"), _linear_index(0),
             _linear_index(5), _broadcast_sum()]
    cases += [_compare_codes("float32"), _compare_codes("float16"), _where_select("float32"),
              _where_select("float16"), _where_transposed()]
    cases += [_masked_copy("float32", other) for other in (-math.inf, math.nan, 2.5)]
    cases += [_masked_copy("float16", -math.inf), _masked_copy("int32", -7)]
    cases += [_padded_copy("float32", math.inf), _padded_copy("float32", 0)]
    cases += [_masked_store("float32", 0.0), _masked_store("float32", 1e9),
              _masked_store("float16", -1e9)]
    cases += [_masked_store_rows(5), _masked_store_rows(0)]
    cases += [_softmax_masked("float32", 100), _softmax_masked("float16", 77),
              _softmax_masked("float32", 128)]
    cases += [_layernorm_masked("float32", 100), _layernorm_masked("float16", 33)]
    cases += [_gemm_tril(), _gemm_store_mask(250), _gemm_masked_a(100)]
    cases += [_gemm_masked_ab(100, "float16"), _gemm_masked_ab(130, "bfloat16"),
              _gemm_dequant("float16"), _gemm_dequant("bfloat16")]
    cases += [_causal(2, 256, 64, 128, 64), _causal(1, 128, 64, 128, 64),
              _causal(2, 256, 64, 128, 64, causal_attention_diag_fwd)]
    return cases


#: every case, by name
CASES = {c.name: c for c in _cases()}
host_args = kt.host_args
