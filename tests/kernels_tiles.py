"""Register-tile kernels (issue 14) and their test cases, shared by the interpreter, compiler
and GPU tests (tests/test_tiles_interp.py, tests/test_tiles_compile.py,
tests/gpu/test_tiles_gpu.py).

The kernels are plain functions (wrap them with ``ws.jit``). Each docstring states its grid
and what it needs of the shapes. Loads read 0 past an array's edge and stores drop what
falls outside, so every kernel is written for arrays that are not multiples of the tile
unless its docstring says otherwise: sums and products are unaffected by zero padding, a
max is not (the max kernels need the reduced dimension to be a multiple of the tile), and
softmax / layer norm need whole rows in one tile (N == BN) until masks exist (issue 15).

The second half of the file is :data:`CASES`: per kernel and configuration, a
:class:`Case` whose ``make(rng)`` gives fresh random NumPy inputs, output placeholders
(:class:`Out`) carrying their float64 reference and tolerance, and the grid.
"""
import math
from dataclasses import dataclass

import numpy as np

import numba_ws as ws

# -- copies and astype ----------------------------------------------------------------


def copy2d(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = x (2-D arrays of one shape and dtype), a loaded tile stored unchanged.

    Grid: (cdiv(M, BM), cdiv(N, BN)). Any M, N.
    """
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    ws.store(y, (row, col), ws.load(x, (row, col), (BM, BN)))


def copy_astype(x, y, DT: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """y = x.astype(DT) with y of dtype DT (float -> int truncates toward zero).

    Grid: (cdiv(M, BM), cdiv(N, BN)). Any M, N.
    """
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    t = ws.load(x, (row, col), (BM, BN))
    ws.store(y, (row, col), t.astype(DT))


def astype_fanout(x, y_f16, y_bf16, y_f32, y_f64, y_i32, y_i64,
                  BM: ws.constexpr, BN: ws.constexpr):
    """One loaded tile converted to every dtype: y_<dt> = x.astype(<dt>) (each y of that
    dtype): all 36 astype pairs in 6 kernels (one per source dtype).

    Grid: (cdiv(M, BM), cdiv(N, BN)). Any M, N.
    """
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    t = ws.load(x, (row, col), (BM, BN))
    ws.store(y_f16, (row, col), t.astype(ws.float16))
    ws.store(y_bf16, (row, col), t.astype(ws.bfloat16))
    ws.store(y_f32, (row, col), t.astype(ws.float32))
    ws.store(y_f64, (row, col), t.astype(ws.float64))
    ws.store(y_i32, (row, col), t.astype(ws.int32))
    ws.store(y_i64, (row, col), t.astype(ws.int64))


# -- 1-D tiles and scalars -----------------------------------------------------------


def vec_add(a, b, c, B: ws.constexpr):
    """c = a + b for 1-D arrays of length n (1-D tiles of B). Grid: (cdiv(n, B),). Any n."""
    off = ws.program_id(0) * B
    ws.store(c, (off,), ws.load(a, (off,), (B,)) + ws.load(b, (off,), (B,)))


def vec_add_scaled(a, b, c, B: ws.constexpr):
    """c = a * 2 + b for 1-D arrays of length n. Grid: (cdiv(n, B),). Any n."""
    off = ws.program_id(0) * B
    x = ws.load(a, (off,), (B,))
    y = ws.load(b, (off,), (B,))
    ws.store(c, (off,), x * 2 + y)


def scale_shift(x, y, s, BM: ws.constexpr, BN: ws.constexpr):
    """y = x * s + 1 with ``s`` a runtime float (the tile keeps x's dtype).

    Grid: (cdiv(M, BM), cdiv(N, BN)). Any M, N.
    """
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    t = ws.load(x, (row, col), (BM, BN))
    ws.store(y, (row, col), t * s + 1)


# -- fused row kernels -----------------------------------------------------------------


def softmax(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = softmax(x, axis=1), computed in float32 (cast on store to y's dtype).

    Needs N == BN (whole rows; padding columns would read 0 and join the row's sum).
    Any M. Grid: (cdiv(M, BM),).
    """
    row = ws.program_id(0) * BM
    t = ws.load(x, (row, 0), (BM, BN)).astype(ws.float32)
    e = ws.exp(t - ws.max(t, 1, keepdims=True))
    ws.store(y, (row, 0), e / ws.sum(e, 1, keepdims=True))


def softmax_tile_attrs(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """:func:`softmax` written with the tile's attributes: the row offset from
    ``t.shape[0]`` (the program's BM, not a consumer group's part of it) and the result
    cast back to ``t.dtype`` (x's dtype). Grid: (cdiv(M, BM),)."""
    t = ws.load(x, (ws.program_id(0) * BM, 0), (BM, BN))
    f = t.astype(ws.float32)
    e = ws.exp(f - ws.max(f, 1, keepdims=True))
    r = e / ws.sum(e, 1, keepdims=True)
    ws.store(y, (ws.program_id(0) * t.shape[0], 0), r.astype(t.dtype))


def layernorm_fwd(x, w, b, y, mean, rstd, eps, BM: ws.constexpr, BN: ws.constexpr):
    """Layer norm over rows: y = (x - mean) * rstd * w + b, in float32.

    x, y: (M, N); w, b: (N,) loaded as 1-D tiles; mean, rstd: (M, 1) float32, stored
    from (BM, 1) row statistics; rstd = 1 / sqrt(var + eps) (biased variance), computed
    as exp(-0.5 * log(var + eps)). Needs N == BN (padding columns would count in the
    variance). Any M. Grid: (cdiv(M, BM),).
    """
    N = x.shape[1]
    row = ws.program_id(0) * BM
    t = ws.load(x, (row, 0), (BM, BN)).astype(ws.float32)
    mu = ws.sum(t, 1, keepdims=True) / N
    xc = t - mu
    var = ws.sum(xc * xc, 1, keepdims=True) / N
    r = ws.exp(ws.log(var + eps) * -0.5)
    wt = ws.load(w, (0,), (BN,)).astype(ws.float32)
    bt = ws.load(b, (0,), (BN,)).astype(ws.float32)
    ws.store(y, (row, 0), xc * r * wt + bt)
    ws.store(mean, (row, 0), mu)
    ws.store(rstd, (row, 0), r)


# -- reductions and broadcasts -----------------------------------------------------------


def col_sums(x, out, BM: ws.constexpr, BN: ws.constexpr):
    """out[0, j] = sum_i x[i, j], in float32: ``ws.sum(t, 0, keepdims=True)`` of each (BM, BN) tile,
    accumulated over the row tiles. out: (1, N). Any M, N. Grid: (cdiv(N, BN),)."""
    M = x.shape[0]
    col = ws.program_id(0) * BN
    acc = ws.zeros((1, BN), ws.float32)
    for i in range(ws.cdiv(M, BM)):
        acc = acc + ws.sum(ws.load(x, (i * BM, col), (BM, BN)), 0, keepdims=True)
    ws.store(out, (0, col), acc)


def col_maxes(x, out, BM: ws.constexpr, BN: ws.constexpr):
    """out[0, j] = max_i x[i, j]: ``ws.max(t, 0, keepdims=True)`` accumulated over the row tiles.

    out: (1, N) float32. Needs M % BM == 0 (padding rows read 0 and would join the max);
    any N. Grid: (cdiv(N, BN),).
    """
    M = x.shape[0]
    col = ws.program_id(0) * BN
    acc = ws.full((1, BN), -math.inf, ws.float32)
    for i in range(ws.cdiv(M, BM)):
        t = ws.load(x, (i * BM, col), (BM, BN))
        acc = ws.maximum(acc, ws.max(t, 0, keepdims=True))
    ws.store(out, (0, col), acc)


def row_sums(x, out, BM: ws.constexpr, BN: ws.constexpr):
    """out[i, 0] = sum_j x[i, j], in float32: ``ws.sum(t, 1, keepdims=True)`` over the column tiles.

    out: (M, 1). Any M, N. Grid: (cdiv(M, BM),).
    """
    N = x.shape[1]
    row = ws.program_id(0) * BM
    acc = ws.zeros((BM, 1), ws.float32)
    for j in range(ws.cdiv(N, BN)):
        acc = acc + ws.sum(ws.load(x, (row, j * BN), (BM, BN)), 1, keepdims=True)
    ws.store(out, (row, 0), acc)


def row_maxes(x, out, BM: ws.constexpr, BN: ws.constexpr):
    """out[i, 0] = max_j x[i, j]: ``ws.max(t, 1, keepdims=True)`` over the column tiles.

    out: (M, 1) float32. Needs N % BN == 0 (padding columns read 0); any M.
    Grid: (cdiv(M, BM),).
    """
    N = x.shape[1]
    row = ws.program_id(0) * BM
    acc = ws.full((BM, 1), -math.inf, ws.float32)
    for j in range(ws.cdiv(N, BN)):
        acc = ws.maximum(acc, ws.max(ws.load(x, (row, j * BN), (BM, BN)), 1, keepdims=True))
    ws.store(out, (row, 0), acc)


def sub_row_max(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = x - max(x, axis=1): a (BM, 1) column of row maxima broadcast back along the
    rows. Needs N == BN (whole rows); any M. Grid: (cdiv(M, BM),)."""
    row = ws.program_id(0) * BM
    t = ws.load(x, (row, 0), (BM, BN))
    ws.store(y, (row, 0), t - ws.max(t, 1, keepdims=True))


def mul_col_sum(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = x * sum(x, axis=0): a (1, BN) row of column sums (float32) broadcast back
    down the columns. Needs M <= BM (all rows in one tile; zero padding rows do not
    change the sums); any N. Grid: (cdiv(N, BN),)."""
    col = ws.program_id(0) * BN
    t = ws.load(x, (0, col), (BM, BN))
    ws.store(y, (0, col), t * ws.sum(t, 0, keepdims=True))


def persistent_bands(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y[:, cols of block k] = band * (k + 1), for each band of BM rows of x (M, BN) and
    each BN-column block k of y (M, N): a persistent loop over bands whose load is read
    inside an inner loop (the slot is released after the inner loop). Any M, N; any
    grid (programs stride over the bands)."""
    for t in range(ws.program_id(0), ws.cdiv(x.shape[0], BM), ws.num_programs(0)):
        band = ws.load(x, (t * BM, 0), (BM, BN))
        for k in range(ws.cdiv(y.shape[1], BN)):
            ws.store(y, (t * BM, k * BN), band * (k + 1.0))


def trans_store(x, yt, BM: ws.constexpr, BN: ws.constexpr):
    """yt = x.T: ``ws.trans`` of a register tile (``t * 1.0``, not the loaded tile)
    stored into the (N, M) array. Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    t = ws.load(x, (row, col), (BM, BN))
    ws.store(yt, (col, row), ws.trans(t * 1.0))


# -- element-wise math ---------------------------------------------------------------


def exp_tile(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = exp(x). Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    ws.store(y, (row, col), ws.exp(ws.load(x, (row, col), (BM, BN))))


def exp2_tile(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = 2 ** x. Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    ws.store(y, (row, col), ws.exp2(ws.load(x, (row, col), (BM, BN))))


def log_tile(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = log(x) (x > 0; the padding's log(0) = -inf is never stored). Any M, N.
    Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    ws.store(y, (row, col), ws.log(ws.load(x, (row, col), (BM, BN))))


def neg_tile(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = -x. Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    ws.store(y, (row, col), -ws.load(x, (row, col), (BM, BN)))


def maximum_tiles(x, z, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = maximum(x, z) of two tiles. Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    a = ws.load(x, (row, col), (BM, BN))
    b = ws.load(z, (row, col), (BM, BN))
    ws.store(y, (row, col), ws.maximum(a, b))


# -- GEMM epilogues --------------------------------------------------------------------
# a (M, K) and b (K, N) fp16 or bf16; grid (cdiv(M, BM) * cdiv(N, BN),); any M, N, K
# (the zero padding of a and b adds 0 to the products).


def gemm_bias_relu(a, b, bias, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = relu(a @ b + bias) (fp16 out), the 1-D bias tile (BN,) loaded after the K loop."""
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
    bias_tile = ws.load(bias, (pid_n * BN,), (BN,))
    acc = ws.maximum(acc + bias_tile, 0.0)
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(ws.float16))


def gemm_act(a, b, c, ACT: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr,
             BK: ws.constexpr):
    """c = act(a @ b) (fp16 out), ``ACT`` a constexpr string: "leaky_relu" (slope 0.01),
    "relu", or anything else for none. Branches not taken must not be compiled."""
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
    if ACT == "leaky_relu":
        acc = ws.maximum(acc, acc * 0.01)
    elif ACT == "relu":
        acc = ws.maximum(acc, 0.0)
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(ws.float16))


def gemm_residual(a, b, r, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = a @ b + r (fp16 out), the (BM, BN) residual tile of r (M, N) loaded after the K
    loop and added to the accumulator directly."""
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
    res = ws.load(r, (pid_m * BM, pid_n * BN), (BM, BN))
    ws.store(c, (pid_m * BM, pid_n * BN), (acc + res).astype(ws.float16))


def gemm_out(a, b, c, OUT: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr,
             BK: ws.constexpr):
    """c = (a @ b).astype(OUT), c of dtype OUT (bf16 and fp32 outputs)."""
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
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(OUT))


def gemm_store_f32(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = a @ b with the float32 accumulator stored as is (``ws.store`` casts it to c's
    dtype: bf16, fp16 or fp32)."""
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
    ws.store(c, (pid_m * BM, pid_n * BN), acc)


# -- attention ---------------------------------------------------------------------------


def attention_fwd_stats(q, k, v, o, m_out, lse, seq_len, sm_scale,
                        BM: ws.constexpr, BN: ws.constexpr, D: ws.constexpr):
    """Flash-attention forward (tests/kernels.py ``attention_fwd``) that also stores its
    row statistics: m_out = max_j s_ij and lse = log(sum_j exp(s_ij)) with
    s = q k^T * sm_scale, both (heads * seq_len, 1) float32, from (BM, 1) tiles.

    q, k, v, o: (heads * seq_len, D) fp16, each head's rows contiguous. Needs
    seq_len % BM == 0 and seq_len % BN == 0 (padding keys would score 0 and join the
    softmax). Grid: (seq_len // BM, heads).
    """
    row0 = ws.program_id(1) * seq_len
    row = row0 + ws.program_id(0) * BM
    q_tile = ws.load(q, (row, 0), (BM, D))
    m_i = ws.full((BM, 1), -math.inf, ws.float32)
    l_i = ws.zeros((BM, 1), ws.float32)
    acc = ws.zeros((BM, D), ws.float32)
    for j in range(ws.cdiv(seq_len, BN)):
        k_tile = ws.load(k, (row0 + j * BN, 0), (BN, D))
        v_tile = ws.load(v, (row0 + j * BN, 0), (BN, D))
        s = ws.dot(q_tile, ws.trans(k_tile)) * sm_scale
        m_new = ws.maximum(m_i, ws.max(s, 1, keepdims=True))
        alpha = ws.exp(m_i - m_new)
        p = ws.exp(s - m_new)
        l_i = l_i * alpha + ws.sum(p, 1, keepdims=True)
        acc = ws.dot(p.astype(ws.float16), v_tile, acc * alpha)
        m_i = m_new
    ws.store(o, (row, 0), (acc / l_i).astype(ws.float16))
    ws.store(m_out, (row, 0), m_i)
    ws.store(lse, (row, 0), m_i + ws.log(l_i))


# == test cases ===========================================================================

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
#: max |out - ref| / max |ref| allowed for outputs of each dtype (float64 reference).
TOL = {"float16": 1e-2, "bfloat16": 1e-2, "float32": 1e-5, "float64": 1e-5}
#: the same for float32 results of tensor-core dots (their accumulation does not round
#: each add as IEEE fp32 does; K = 136 products of values in [-1, 1])
DOT_F32_TOL = 1e-4
#: what an int output starts as; no case computes it (int inputs stay within +-1000).
INT_POISON = -999_999_937
#: extra rows (leading dimension) past each output that must keep the poison.
GUARD = 3


def finfo(name):
    """``np.finfo`` of a float dtype name; ml_dtypes' for bfloat16 (NumPy's refuses it)."""
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(np_dtype(name))


def np_dtype(name):
    return getattr(ws, name).dtype


def poison_value(dtype):
    return INT_POISON if np.dtype(dtype).kind in "iu" else np.nan


@dataclass
class Out:
    """An output argument: the test allocates it poisoned (NaN, or :data:`INT_POISON`)
    with :data:`GUARD` poisoned rows after it, and checks it against ``ref`` (float64).

    ``how``: "rel" (max |out - ref| / max |ref| <= tol), "ulp" (every element within
    tol * |ref|: a single rounding), or "exact".
    """
    shape: tuple
    dtype: str
    ref: np.ndarray
    tol: float = 0.0
    how: str = "rel"

    def host(self):
        """(base, view): the poisoned NumPy array with guard rows and the output view."""
        base = np.full((self.shape[0] + GUARD,) + tuple(self.shape[1:]),
                       poison_value(np_dtype(self.dtype)), np_dtype(self.dtype))
        return base, base[:self.shape[0]]

    def check(self, base, what=""):
        """Assert that the output (``base`` with its guard rows, as NumPy) is right."""
        out, guard = base[:self.shape[0]], base[self.shape[0]:]
        unwritten = _poisoned(out)
        assert not unwritten.any(), (
            f"{what}: {int(unwritten.sum())} of {out.size} outputs never written, first at "
            f"{np.argwhere(unwritten)[0].tolist()}")
        assert _poisoned(guard).all(), f"{what}: the kernel wrote past the output's last row"
        got = out.astype(np.float64)
        diff = np.abs(got - self.ref)
        if self.how == "exact":
            bad = diff != 0
            assert not bad.any(), (f"{what}: {int(bad.sum())} elements differ, first at "
                                   f"{np.argwhere(bad)[0].tolist()}")
        elif self.how == "ulp":
            tiny = float(finfo(self.dtype).smallest_subnormal)
            bad = ~(diff <= self.tol * np.abs(self.ref) + tiny)
            assert not bad.any(), (
                f"{what}: {int(bad.sum())} elements off by more than {self.tol:g} relative, "
                f"first at {np.argwhere(bad)[0].tolist()}: got {got[bad][0]!r}, "
                f"want {self.ref[bad][0]!r}")
        else:
            scale = max(float(np.max(np.abs(self.ref))), 1e-30)
            err = float(np.max(diff)) / scale if diff.size else 0.0
            first = np.argwhere(~(diff <= self.tol * scale))
            assert err <= self.tol, (f"{what}: relative error {err:.3e} > {self.tol:g}; "
                                     f"first bad {first[:3].tolist()}")
        return self


def _poisoned(a):
    if a.dtype.kind in "iu":
        return a == INT_POISON
    return np.isnan(a.astype(np.float32))


@dataclass
class Case:
    """One kernel with one configuration. ``make(rng)`` -> (args, grid): args are the
    kernel's positional arguments (NumPy arrays, scalars, :class:`Out`), grid a tuple.

    ``gemm``: a GEMM or attention kernel (ptxas must report 0 spill bytes);
    ``exact``: whether ``ws.verify`` can compare bit for bit (False where a column
    reduction may be split over consumer groups, which changes the fp32 summation order).
    """
    name: str
    kernel: object
    make: object
    meta: dict
    gemm: bool = False
    exact: bool = True

    def __repr__(self):
        return self.name


def _values(rng, shape, dtype, low=-4.0, high=4.0):
    """Fresh random values of ``dtype``: floats uniform in [low, high), ints in
    [-1000, 1000] (whatever low/high say)."""
    if np.dtype(np_dtype(dtype)).kind in "iu":
        return rng.integers(-1000, 1001, size=shape).astype(np_dtype(dtype))
    return rng.uniform(low, high, size=shape).astype(np_dtype(dtype))


def f64(a):
    return np.asarray(a).astype(np.float64)


#: the ragged shape of the element-wise cases and their tiles
M_EW, N_EW = 300, 200
TILE = dict(BM=64, BN=64)


def _grid2(M, N):
    """(cdiv(M, BM), cdiv(N, BN)) for :data:`TILE`."""
    return (ws.cdiv(M, TILE["BM"]), ws.cdiv(N, TILE["BN"]))


def _copy(dt):
    def make(rng):
        M, N = M_EW, N_EW
        x = _values(rng, (M, N), dt, -1000.0, 1000.0)
        return [x, Out((M, N), dt, f64(x), how="exact")], _grid2(M, N)
    return Case(f"copy2d-{dt}", copy2d, make, dict(TILE))


def _astype_ref(x, dst):
    """(reference, tol, how) of ``x.astype(dst)``: into an int it truncates toward zero
    (exact); into a float it is one rounding of the exact value (within one ulp, allowing
    a conversion that rounds twice, e.g. float64 -> float32 -> bfloat16)."""
    if dst.startswith("int"):
        return np.trunc(f64(x)), 0.0, "exact"
    return f64(x), float(finfo(dst).eps), "ulp"


def _astype(src, dst):
    def make(rng):
        M, N = M_EW, N_EW
        x = _values(rng, (M, N), src, -1000.0, 1000.0)
        ref, tol, how = _astype_ref(x, dst)
        return [x, Out((M, N), dst, ref, tol, how)], _grid2(M, N)
    return Case(f"copy_astype-{src}-{dst}", copy_astype, make,
                dict(TILE, DT=getattr(ws, dst)))


def _fanout(src):
    def make(rng):
        M, N = M_EW, N_EW
        x = _values(rng, (M, N), src, -1000.0, 1000.0)
        outs = [Out((M, N), dst, *_astype_ref(x, dst)) for dst in DTYPES]
        return [x] + outs, _grid2(M, N)
    return Case(f"astype_fanout-{src}", astype_fanout, make, dict(TILE))


def _vec(kernel, dt, fn, B=256):
    """``B`` above 256: a consumer group's part is wider than one 256-column box (the
    fuzzer's seed 15203086: such parts were addressed as B rows, out of bounds)."""
    def make(rng):
        n = 1000 if B == 256 else 2 * B + 500
        a, b = _values(rng, n, dt), _values(rng, n, dt)
        ref = fn(f64(a), f64(b))
        tol, how = (0.0, "exact") if dt.startswith("int") else (TOL[dt], "rel")
        return [a, b, Out((n,), dt, ref, tol, how)], (ws.cdiv(n, B),)
    suffix = "" if B == 256 else f"-B{B}"
    return Case(f"{kernel.__name__}-{dt}{suffix}", kernel, make, dict(B=B))


def _scale_shift(dt):
    def make(rng):
        M, N = M_EW, N_EW
        x = _values(rng, (M, N), dt)
        s = float(rng.uniform(0.5, 2.0))
        return [x, Out((M, N), dt, f64(x) * s + 1, TOL[dt]), s], _grid2(M, N)
    return Case(f"scale_shift-{dt}", scale_shift, make, dict(TILE))


def _softmax(dt):
    def make(rng):
        M, N = 300, 128
        x = _values(rng, (M, N), dt, -8.0, 8.0)
        e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        return [x, Out((M, N), dt, ref, TOL[dt])], (ws.cdiv(M, 64),)
    return Case(f"softmax-{dt}", softmax, make, dict(BM=64, BN=128))


def _softmax_tile_attrs(dt):
    case = _softmax(dt)
    return Case(f"softmax_tile_attrs-{dt}", softmax_tile_attrs, case.make, dict(BM=64, BN=128))


def _layernorm(dt):
    def make(rng):
        M, N, eps = 300, 128, 1e-5
        x = _values(rng, (M, N), dt, -3.0, 5.0)
        w, b = _values(rng, N, dt, 0.5, 1.5), _values(rng, N, dt, -1.0, 1.0)
        x64 = f64(x)
        mu = x64.mean(axis=1, keepdims=True)
        r = 1.0 / np.sqrt(((x64 - mu) ** 2).mean(axis=1, keepdims=True) + eps)
        y = (x64 - mu) * r * f64(w) + f64(b)
        return [x, w, b, Out((M, N), dt, y, TOL[dt]), Out((M, 1), "float32", mu, 1e-5),
                Out((M, 1), "float32", r, 1e-5), eps], (ws.cdiv(M, 64),)
    return Case(f"layernorm_fwd-{dt}", layernorm_fwd, make, dict(BM=64, BN=128))


def _col_reduce(kernel, dt, M):
    def make(rng):
        N = 200
        x = _values(rng, (M, N), dt)
        x64 = f64(x)
        ref = (x64.sum if kernel is col_sums else x64.max)(axis=0, keepdims=True)
        return [x, Out((1, N), "float32", ref, 1e-5)], (ws.cdiv(N, 64),)
    return Case(f"{kernel.__name__}-{dt}-M{M}", kernel, make, dict(TILE),
                exact=False)


def _row_reduce(kernel, dt, N):
    def make(rng):
        M = 300
        x = _values(rng, (M, N), dt)
        x64 = f64(x)
        ref = (x64.sum if kernel is row_sums else x64.max)(axis=1, keepdims=True)
        return [x, Out((M, 1), "float32", ref, 1e-5)], (ws.cdiv(M, 64),)
    return Case(f"{kernel.__name__}-{dt}-N{N}", kernel, make, dict(TILE))


def _sub_row_max(dt):
    def make(rng):
        M, N = 300, 64
        x = _values(rng, (M, N), dt)
        ref = f64(x) - f64(x).max(axis=1, keepdims=True)
        return [x, Out((M, N), dt, ref, TOL[dt])], (ws.cdiv(M, 64),)
    return Case(f"sub_row_max-{dt}", sub_row_max, make, dict(TILE))


def _mul_col_sum(dt):
    def make(rng):
        M, N = 50, 200          # M <= BM: the 14 padding rows read 0
        x = _values(rng, (M, N), dt)
        ref = f64(x) * f64(x).sum(axis=0, keepdims=True)
        return [x, Out((M, N), "float32", ref, 1e-5)], (ws.cdiv(N, 64),)
    return Case(f"mul_col_sum-{dt}", mul_col_sum, make, dict(TILE), exact=False)


def _trans(dt):
    def make(rng):
        M, N = M_EW, N_EW
        x = _values(rng, (M, N), dt)
        return [x, Out((N, M), dt, f64(x).T.copy(), how="exact")], _grid2(M, N)
    return Case(f"trans_store-{dt}", trans_store, make, dict(TILE))


def _persistent_bands(dt):
    def make(rng):
        M, N, BN = M_EW, N_EW, TILE["BN"]
        x = _values(rng, (M, BN), dt)
        cols = np.arange(N)
        ref = f64(x)[:, cols % BN] * (cols // BN + 1.0)
        return [x, Out((M, N), dt, ref, float(finfo(dt).eps), "ulp")], (2,)
    return Case(f"persistent_bands-{dt}", persistent_bands, make, dict(TILE))


def _unary(kernel, dt, fn, low, high, how="rel"):
    def make(rng):
        M, N = M_EW, N_EW
        x = _values(rng, (M, N), dt, low, high)
        return [x, Out((M, N), dt, fn(f64(x)), TOL[dt], how)], _grid2(M, N)
    return Case(f"{kernel.__name__}-{dt}", kernel, make, dict(TILE))


def _maximum(dt):
    def make(rng):
        M, N = M_EW, N_EW
        x, z = _values(rng, (M, N), dt), _values(rng, (M, N), dt)
        return [x, z, Out((M, N), dt, np.maximum(f64(x), f64(z)), how="exact")], \
            _grid2(M, N)
    return Case(f"maximum_tiles-{dt}", maximum_tiles, make, dict(TILE))


#: ragged GEMM shape (row strides of 272 and 400 bytes: TMA-readable) and its tiles
GEMM = dict(M=300, N=200, K=136)
GEMM_META = dict(BM=128, BN=128, BK=64)


def _gemm_inputs(rng, dt="float16"):
    M, N, K = GEMM["M"], GEMM["N"], GEMM["K"]
    a = _values(rng, (M, K), dt, -1.0, 1.0)
    b = _values(rng, (K, N), dt, -1.0, 1.0)
    grid = (ws.cdiv(M, GEMM_META["BM"]) * ws.cdiv(N, GEMM_META["BN"]),)
    return a, b, f64(a) @ f64(b), grid


def _gemm_bias_relu():
    def make(rng):
        a, b, ab, grid = _gemm_inputs(rng)
        bias = _values(rng, GEMM["N"], "float16", -2.0, 2.0)
        ref = np.maximum(ab + f64(bias), 0.0)
        return [a, b, bias, Out(ab.shape, "float16", ref, TOL["float16"])], grid
    return Case("gemm_bias_relu", gemm_bias_relu, make, dict(GEMM_META), gemm=True)


def _gemm_act(act):
    def make(rng):
        a, b, ab, grid = _gemm_inputs(rng)
        ref = {"leaky_relu": np.maximum(ab, 0.01 * ab), "relu": np.maximum(ab, 0.0)}.get(
            act, ab)
        return [a, b, Out(ab.shape, "float16", ref, TOL["float16"])], grid
    return Case(f"gemm_act-{act}", gemm_act, make, dict(GEMM_META, ACT=act), gemm=True)


def _gemm_residual():
    def make(rng):
        a, b, ab, grid = _gemm_inputs(rng)
        r = _values(rng, ab.shape, "float16", -4.0, 4.0)
        return [a, b, r, Out(ab.shape, "float16", ab + f64(r), TOL["float16"])], grid
    return Case("gemm_residual", gemm_residual, make, dict(GEMM_META), gemm=True)


def _dot_tol(dtype):
    return DOT_F32_TOL if dtype == "float32" else TOL[dtype]


def _gemm_out(src, dst):
    def make(rng):
        a, b, ab, grid = _gemm_inputs(rng, src)
        return [a, b, Out(ab.shape, dst, ab, _dot_tol(dst))], grid
    return Case(f"gemm_out-{src}-{dst}", gemm_out, make,
                dict(GEMM_META, OUT=getattr(ws, dst)), gemm=True)


def _gemm_store_f32(src, dst):
    def make(rng):
        a, b, ab, grid = _gemm_inputs(rng, src)
        return [a, b, Out(ab.shape, dst, ab, _dot_tol(dst))], grid
    return Case(f"gemm_store_f32-{src}-{dst}", gemm_store_f32, make, dict(GEMM_META),
                gemm=True)


def attention_reference(q, k, v, heads, seq, scale):
    """float64 (o, m, lse) of softmax(q k^T * scale) v per head."""
    o = np.empty(q.shape)
    m = np.empty((q.shape[0], 1))
    lse = np.empty((q.shape[0], 1))
    for h in range(heads):
        rows = slice(h * seq, (h + 1) * seq)
        s = f64(q[rows]) @ f64(k[rows]).T * scale
        m[rows] = s.max(axis=1, keepdims=True)
        p = np.exp(s - m[rows])
        lse[rows] = m[rows] + np.log(p.sum(axis=1, keepdims=True))
        o[rows] = (p / p.sum(axis=1, keepdims=True)) @ f64(v[rows])
    return o, m, lse


def _attention(heads, seq, D, BM, BN):
    def make(rng):
        q, k, v = (_values(rng, (heads * seq, D), "float16", -2.0, 2.0) for _ in range(3))
        scale = 1.0 / math.sqrt(D)
        o, m, lse = attention_reference(q, k, v, heads, seq, scale)
        rows = heads * seq
        return [q, k, v, Out(o.shape, "float16", o, TOL["float16"]),
                Out((rows, 1), "float32", m, DOT_F32_TOL),
                Out((rows, 1), "float32", lse, DOT_F32_TOL),
                seq, scale], (seq // BM, heads)
    return Case(f"attention_fwd_stats-h{heads}-s{seq}-d{D}-{BM}x{BN}", attention_fwd_stats,
                make, dict(BM=BM, BN=BN, D=D), gemm=True)


def _cases():
    cases = [_copy(dt) for dt in ("float16", "bfloat16", "float32", "int32")]
    cases += [_astype(s, d) for s in DTYPES for d in DTYPES if s != d]
    cases += [_fanout(s) for s in DTYPES]
    for dt in ("float32", "float16", "int32"):
        cases.append(_vec(vec_add, dt, lambda a, b: a + b))
        cases.append(_vec(vec_add_scaled, dt, lambda a, b: a * 2 + b))
    cases += [_vec(vec_add, dt, lambda a, b: a + b, B) for dt in ("float32", "float16", "int64")
              for B in (512, 1024)]
    cases += [_scale_shift(dt) for dt in ("float32", "float16")]
    cases += [_softmax(dt) for dt in ("float32", "float16")]
    cases += [_softmax_tile_attrs(dt) for dt in ("float16", "bfloat16")]
    cases += [_layernorm(dt) for dt in ("float32", "float16")]
    for dt in ("float32", "float16"):
        cases += [_col_reduce(col_sums, dt, 300), _col_reduce(col_maxes, dt, 320),
                  _row_reduce(row_sums, dt, 200), _row_reduce(row_maxes, dt, 192)]
    cases += [_sub_row_max("float32"), _mul_col_sum("float32")]
    cases += [_trans(dt) for dt in ("float32", "float16")]
    cases += [_persistent_bands("float32")]
    for dt in ("float32", "float16"):
        cases += [_unary(exp_tile, dt, np.exp, -4.0, 4.0),
                  _unary(exp2_tile, dt, np.exp2, -4.0, 4.0),
                  _unary(log_tile, dt, np.log, 0.05, 8.0),
                  _unary(neg_tile, dt, np.negative, -4.0, 4.0, "exact"), _maximum(dt)]
    cases += [_gemm_bias_relu(), _gemm_residual()]
    cases += [_gemm_act(act) for act in ("leaky_relu", "relu", "none")]
    cases += [_gemm_out("bfloat16", "bfloat16"), _gemm_out("float16", "float32"),
              _gemm_out("bfloat16", "float32")]
    cases += [_gemm_store_f32("bfloat16", "bfloat16"), _gemm_store_f32("float16", "float32")]
    cases += [_attention(2, 256, 64, 128, 64), _attention(3, 128, 64, 128, 64)]
    return cases


#: every case, by name
CASES = {c.name: c for c in _cases()}


def host_args(args):
    """(launch args, [(Out, base)]): each :class:`Out` replaced by a poisoned NumPy view."""
    launch, outs = [], []
    for a in args:
        if isinstance(a, Out):
            base, view = a.host()
            outs.append((a, base))
            a = view
        launch.append(a)
    return launch, outs
