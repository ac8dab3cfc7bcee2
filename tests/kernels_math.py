"""Math, integer and promotion kernels (issue 15 item 3) and their test cases, shared by
tests/test_math_ops.py (interpreter, ws.verify, ptxas) and tests/gpu/test_math_ops_gpu.py.

The kernels are plain functions (wrap them with ``ws.jit``); each docstring states its
grid and what it needs of the shapes. :data:`CASES` maps a name to a
:class:`kernels_tiles.Case` whose ``make(rng)`` gives fresh NumPy inputs -- with NaN,
±inf, ±0, negative operands, ties and out-of-range shift counts planted among random
values -- output placeholders carrying their float64 reference, and the grid.

Outputs are :class:`Out` (kernels_tiles.Out with a sentinel poison instead of NaN, since
these outputs may hold NaN legitimately): an element never written keeps the sentinel,
NaN must appear exactly where the reference has NaN, ±inf where it has ±inf.
"""
import math
from dataclasses import dataclass

import numpy as np
from numba import cuda

import numba_ws as ws

import kernels_tiles as kt
from kernels_tiles import Case, f64, np_dtype


# -- element-wise math -------------------------------------------------------------------


def unary(x, y, OP: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """y = OP(x), OP one of "sqrt", "rsqrt", "abs", "sigmoid", "tanh", "gelu" (a constexpr:
    the other branches are not compiled). Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    t = ws.load(x, (row, col), (BM, BN))
    if OP == "sqrt":
        r = ws.sqrt(t)
    elif OP == "rsqrt":
        r = ws.rsqrt(t)
    elif OP == "abs":
        r = ws.abs(t)
    elif OP == "sigmoid":
        r = ws.sigmoid(t)
    elif OP == "tanh":
        r = ws.tanh(t)
    else:
        r = ws.gelu(t)
    ws.store(y, (row, col), r)


def minimum_tiles(x, z, v, y, y_scalar, y_vec, BM: ws.constexpr, BN: ws.constexpr):
    """y = minimum(x, z); y_scalar = minimum(x, 0.5); y_vec = minimum(x, v) with v a 1-D
    (N,) tile broadcast along the rows. Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    a = ws.load(x, (row, col), (BM, BN))
    b = ws.load(z, (row, col), (BM, BN))
    vec = ws.load(v, (col,), (BN,))
    ws.store(y, (row, col), ws.minimum(a, b))
    ws.store(y_scalar, (row, col), ws.minimum(a, 0.5))
    ws.store(y_vec, (row, col), ws.minimum(a, vec))


def fma_tiles(a, b, c, y, y_scalar, s, BM: ws.constexpr, BN: ws.constexpr):
    """y = fma(a, b, c) (one rounding); y_scalar = fma(a, s, 1.0) with s a runtime float.
    Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    ta = ws.load(a, (row, col), (BM, BN))
    tb = ws.load(b, (row, col), (BM, BN))
    tc = ws.load(c, (row, col), (BM, BN))
    ws.store(y, (row, col), ws.fma(ta, tb, tc))
    ws.store(y_scalar, (row, col), ws.fma(ta, s, 1.0))


# -- reductions ----------------------------------------------------------------------------


def row_reduce(x, out, OP: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """out[i, 0] = OP(x[i, :]) for OP "min", "argmax" or "argmin" (``ws.OP(t, 1)``: a
    (BM, 1) tile). Needs N == BN (whole rows: padding columns read 0). Any M.
    Grid: (cdiv(M, BM),)."""
    row = ws.program_id(0) * BM
    t = ws.load(x, (row, 0), (BM, BN))
    if OP == "min":
        r = ws.min(t, 1, keepdims=True)
    elif OP == "argmax":
        r = ws.argmax(t, 1, keepdims=True)
    else:
        r = ws.argmin(t, 1, keepdims=True)
    ws.store(out, (row, 0), r)


def col_reduce(x, out, OP: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """out[0, j] = OP(x[:, j]) (``ws.OP(t, 0)``: a (1, BN) tile). Needs M == BM (whole
    columns); any N. Grid: (cdiv(N, BN),)."""
    col = ws.program_id(0) * BN
    t = ws.load(x, (0, col), (BM, BN))
    if OP == "min":
        r = ws.min(t, 0, keepdims=True)
    elif OP == "argmax":
        r = ws.argmax(t, 0, keepdims=True)
    else:
        r = ws.argmin(t, 0, keepdims=True)
    ws.store(out, (0, col), r)


def vec_argmax(x, out, B: ws.constexpr):
    """out[0] = argmax(x), out[1] = argmin(x) of a 1-D x of length B (one (B,) tile;
    ``ws.argmax(v, 0, keepdims=True)`` is a (1,) tile). Grid: (1,)."""
    v = ws.load(x, (0,), (B,))
    ws.store(out, (0,), ws.argmax(v, 0, keepdims=True))
    ws.store(out, (1,), ws.argmin(v, 0, keepdims=True))


def gemm_row_argmax(a, b, idx, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """idx[i, 0] = argmax_j (a @ b)[i, j]: ws.argmax of the accumulator (its layout) along
    the rows. Needs N == BN (one column tile). Grid: (cdiv(M, BM),)."""
    K = a.shape[1]
    row = ws.program_id(0) * BM
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        acc = ws.dot(ws.load(a, (row, k * BK), (BM, BK)), ws.load(b, (k * BK, 0), (BK, BN)),
                     acc)
    ws.store(idx, (row, 0), ws.argmax(acc, 1, keepdims=True))


# -- integer operators ---------------------------------------------------------------------


def int_binop(a, b, y, OP: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    """y = a OP b for int tiles, OP one of "floordiv", "mod", "lshift", "rshift", "and",
    "or", "xor", "invert" (``~a``). Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    x = ws.load(a, (row, col), (BM, BN))
    z = ws.load(b, (row, col), (BM, BN))
    if OP == "floordiv":
        r = x // z
    elif OP == "mod":
        r = x % z
    elif OP == "lshift":
        r = x << z
    elif OP == "rshift":
        r = x >> z
    elif OP == "and":
        r = x & z
    elif OP == "or":
        r = x | z
    elif OP == "xor":
        r = x ^ z
    else:
        r = ~x + (z - z)       # z used: a load must feed something
    ws.store(y, (row, col), r)


def int_scalar_ops(a, y, s, BM: ws.constexpr, BN: ws.constexpr):
    """y = ((a // s) % 7 << 2) - (a >> 3) + (a ^ s), with ``t //= s`` written in place; s
    a runtime int (negative in the cases). Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    x = ws.load(a, (row, col), (BM, BN))
    t = x
    t //= s
    ws.store(y, (row, col), ((t % 7) << 2) - (x >> 3) + (x ^ s))


def float_divmod(a, b, y_div, y_mod, BM: ws.constexpr, BN: ws.constexpr):
    """y_div = a // b, y_mod = a % b for float tiles (NumPy's floor semantics). Any M, N.
    Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    x = ws.load(a, (row, col), (BM, BN))
    z = ws.load(b, (row, col), (BM, BN))
    ws.store(y_div, (row, col), x // z)
    ws.store(y_mod, (row, col), x % z)


# -- dtype promotion -----------------------------------------------------------------------


def promote_mix(xi, xf, xh, xl, y_if, y_is, y_div, y_hf, y_il, BM: ws.constexpr,
                BN: ws.constexpr):
    """Each result times 0.1, stored into float64 (int64 for y_il) outputs, so that its
    dtype shows: an int32 tile xi with a float32 tile xf is float32 (NumPy: float64);
    xi * 1.5 is float32; xi / (xi + 1001) is float32; a fp16 tile xh + xf is float32;
    xi + an int64 tile xl is int64 (times 3, exact). Any M, N.
    Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    i = ws.load(xi, (row, col), (BM, BN))
    f = ws.load(xf, (row, col), (BM, BN))
    h = ws.load(xh, (row, col), (BM, BN))
    big = ws.load(xl, (row, col), (BM, BN))
    ws.store(y_if, (row, col), (i + f) * 0.1)
    ws.store(y_is, (row, col), (i * 1.5) * 0.1)
    ws.store(y_div, (row, col), (i / (i + 1001)) * 0.1)
    ws.store(y_hf, (row, col), (h + f) * 0.1)
    ws.store(y_il, (row, col), (i + big) * 3)


@cuda.jit(device=True)
def leaky(v):
    """leaky ReLU of one scalar; ``0.01 * v`` is float64 in Numba for a float32 ``v``."""
    return v if v > 0 else 0.01 * v


@cuda.jit(device=True)
def halve(v):
    """v * 0.5 (float64 in Numba for an int32 ``v``)."""
    return v * 0.5


def map_dtype(x, xi, y, y_int, BM: ws.constexpr, BN: ws.constexpr):
    """y = leaky(x) of a float32 tile, y_int = halve(xi) of an int32 tile, both times 0.1
    and stored into float64: ws.map of a float function keeps the float32 tile float32
    and makes an int tile float32. Any M, N. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    row = ws.program_id(0) * BM
    col = ws.program_id(1) * BN
    t = ws.load(x, (row, col), (BM, BN))
    ti = ws.load(xi, (row, col), (BM, BN))
    ws.store(y, (row, col), leaky(t) * 0.1)
    ws.store(y_int, (row, col), ws.map(halve, ti) * 0.1)


# == outputs with NaN ========================================================================

#: what a float output starts as (no case computes it)
SENTINEL = -31337.0


@dataclass
class Out(kt.Out):
    """kernels_tiles.Out for outputs that may hold NaN / ±inf: poisoned with
    :data:`SENTINEL` (:data:`kernels_tiles.INT_POISON` for ints); NaN and ±inf must match
    the reference exactly, the finite elements within ``tol`` as ``how`` says ("rel",
    "exact"; "ulp": |out - ref| <= tol * |ref| + the smallest normal, flushed subnormal
    results allowed; "absrel": |out - ref| <= tol * (1 + |ref|))."""

    def _poison(self):
        dt = np_dtype(self.dtype)
        return kt.INT_POISON if np.dtype(dt).kind in "iu" else SENTINEL

    def host(self):
        base = np.full((self.shape[0] + kt.GUARD,) + tuple(self.shape[1:]), self._poison(),
                       np_dtype(self.dtype))
        return base, base[:self.shape[0]]

    def check(self, base, what=""):
        out, guard = base[:self.shape[0]], base[self.shape[0]:]
        poison = np.asarray(self._poison()).astype(np_dtype(self.dtype))
        # an element whose reference rounds to the poison (a // b of fp16 with a tiny b can
        # be -31344) is checked by value below instead
        ref_is_poison = np.asarray(self.ref).astype(np_dtype(self.dtype)) == poison
        unwritten = (out == poison) & ~ref_is_poison
        assert not unwritten.any(), (
            f"{what}: {int(unwritten.sum())} of {out.size} outputs never written, first at "
            f"{np.argwhere(unwritten)[0].tolist()}")
        assert (guard == poison).all(), f"{what}: the kernel wrote past the output's last row"
        got, ref = out.astype(np.float64), np.asarray(self.ref, np.float64)
        for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
            bad = test(got) != test(ref)
            assert not bad.any(), (f"{what}: {int(bad.sum())} elements differ in being {name}, "
                                   f"first at {np.argwhere(bad)[0].tolist()}: got "
                                   f"{got[bad][0]!r}, want {ref[bad][0]!r}")
        finite = np.isfinite(ref)
        g, r = got[finite], ref[finite]
        diff = np.abs(g - r)
        if self.how == "exact":
            bad = diff != 0
        elif self.how == "ulp":   # results below the smallest normal may flush to 0
            bad = ~(diff <= self.tol * np.abs(r) + float(kt.finfo(self.dtype).tiny))
        elif self.how == "absrel":
            bad = ~(diff <= self.tol * (1.0 + np.abs(r)))
        else:
            scale = max(float(np.max(np.abs(r))) if r.size else 0.0, 1e-30)
            bad = ~(diff <= self.tol * scale)
        assert not bad.any(), (f"{what}: {int(bad.sum())} finite elements off ({self.how}, "
                               f"tol {self.tol:g}); first: got {g[bad][0]!r}, want "
                               f"{r[bad][0]!r}")
        return self


# == inputs ==================================================================================

#: the ragged shape of the element-wise cases and their tiles
M, N = 300, 200
TILE = dict(BM=64, BN=64)
SPECIAL = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30, 30.0, -30.0,
           90.0, -90.0)


def grid2(m=M, n=N):
    return (ws.cdiv(m, TILE["BM"]), ws.cdiv(n, TILE["BN"]))


def with_specials(rng, x, values=SPECIAL):
    """``x`` with ``values`` planted at random positions (each several times)."""
    x = x.copy()
    flat = x.reshape(-1)
    for v in values:
        flat[rng.choice(flat.size, 7, replace=False)] = v
    return x


def floats(rng, shape, dt, low=-4.0, high=4.0):
    return rng.uniform(low, high, size=shape).astype(np_dtype(dt))


def ints(rng, shape, dt, low=-1000, high=1000):
    return rng.integers(low, high + 1, size=shape).astype(np_dtype(dt))


def _erf(x):
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


#: float64 references of the unary ops
UNARY = {
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "abs": np.abs,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
}
#: per op and dtype: (tolerance, how) of the GPU against the float64 reference (module
#: docstring of numba_ws/codegen/math_ops.py: sqrt/abs exact roundings, the approximate
#: ones a few ulp; tanh.approx 2**-16 relative; fp16 outputs one fp16 rounding)
UNARY_TOL = {
    "float32": {"sqrt": (2 ** -24, "ulp"), "abs": (0.0, "exact"), "rsqrt": (2 ** -21, "ulp"),
                "sigmoid": (2 ** -17, "ulp"), "tanh": (2 ** -15, "ulp"),
                "gelu": (2e-6, "absrel")},
    "float64": {"sqrt": (2 ** -53, "ulp"), "abs": (0.0, "exact"), "rsqrt": (2 ** -51, "ulp"),
                "sigmoid": (2 ** -50, "ulp"), "tanh": (2 ** -50, "ulp"),
                "gelu": (1e-14, "absrel")},
    "float16": {op: (2 ** -10, "ulp") for op in UNARY} | {"abs": (0.0, "exact"),
                                                          "gelu": (2e-3, "absrel")},
}


def _unary(op, dt):
    def make(rng):
        x = floats(rng, (M, N), dt, -6.0, 6.0)
        if op in ("sqrt", "rsqrt"):
            x = np.abs(x) * 10
        x = with_specials(rng, x)
        tol, how = UNARY_TOL[dt][op]
        with np.errstate(all="ignore"):
            ref = UNARY[op](f64(x))
        return [x, Out((M, N), dt, ref, tol, how)], grid2()
    return Case(f"unary-{op}-{dt}", unary, make, dict(TILE, OP=op))


def _minimum(dt):
    def make(rng):
        if dt.startswith("int"):
            x, z, v = ints(rng, (M, N), dt), ints(rng, (M, N), dt), ints(rng, N, dt)
            # an int tile with a float scalar is float32, stored into ints: truncated
            half = np.trunc(np.minimum(f64(x), 0.5))
        else:
            x = with_specials(rng, floats(rng, (M, N), dt))
            z = with_specials(rng, floats(rng, (M, N), dt))
            v = with_specials(rng, floats(rng, N, dt), (np.nan, np.inf, -np.inf))
            half = np.minimum(f64(x), 0.5)
        outs = [Out((M, N), dt, np.minimum(f64(x), f64(z)), how="exact"),
                Out((M, N), dt, half, how="exact"),
                Out((M, N), dt, np.minimum(f64(x), f64(v)[None, :]), how="exact")]
        return [x, z, v] + outs, grid2()
    return Case(f"minimum_tiles-{dt}", minimum_tiles, make, dict(TILE))


#: (significand bits, smallest normal exponent, largest finite exponent) per float dtype
FORMATS = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127), "float32": (24, -126, 127),
           "float64": (53, -1022, 1023)}


def round_fraction(v, dt):
    """The Fraction ``v`` rounded once, to nearest even, into float dtype ``dt`` (as a
    Python float): subnormals with the format's smallest step, ±inf past its range."""
    from fractions import Fraction
    p, emin, emax = FORMATS[dt]
    if v == 0:
        return 0.0
    mag = abs(v)
    e = max(math.floor(math.log2(mag)), emin)
    while Fraction(2) ** e > mag:                 # log2 of a Fraction may round
        e -= 1
    while Fraction(2) ** (e + 1) <= mag:
        e += 1
    e = max(e, emin)
    step = Fraction(2) ** (e - (p - 1))
    q = mag / step
    n = math.floor(q)
    rest = q - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2):
        n += 1
    out = n * step
    if out > (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax:
        return math.copysign(math.inf, v)
    return math.copysign(float(out), v)


def fma_reference(a, b, c, dt):
    """The exactly rounded ``a * b + c`` in ``dt`` (float64 array), from Fractions;
    non-finite operands as NumPy's ``a * b + c``."""
    from fractions import Fraction

    def one(x, y, z):
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
            return x * y + z
        return round_fraction(Fraction(x) * Fraction(y) + Fraction(z), dt)
    with np.errstate(all="ignore"):
        return np.frompyfunc(one, 3, 1)(f64(a), f64(b), f64(c)).astype(np.float64)


def _fma(dt):
    def make(rng):
        m, n = 130, 70            # Fractions per element: a smaller ragged shape
        a, b, c = (with_specials(rng, floats(rng, (m, n), dt), (np.nan, np.inf, 0.0, -0.0))
                   for _ in range(3))
        # cancellations: c = -(a * b) rounded, where fma keeps the product's low bits
        pick = rng.random((m, n)) < 0.3
        c = np.where(pick, -(a * b).astype(np_dtype(dt)), c)
        s = float(rng.uniform(0.5, 2.0))
        outs = [Out((m, n), dt, fma_reference(a, b, c, dt), how="exact"),
                Out((m, n), dt, fma_reference(a, np.full_like(a, s), np.ones_like(a), dt),
                    how="exact")]
        return [a, b, c] + outs + [s], grid2(m, n)
    return Case(f"fma_tiles-{dt}", fma_tiles, make, dict(TILE))


def _ties(rng, shape, dt, nan=True):
    """Values with many ties (a few distinct ones), NaN in some rows / columns."""
    if np.dtype(np_dtype(dt)).kind in "iu":
        return ints(rng, shape, dt, -3, 3)
    x = rng.integers(-3, 4, size=shape).astype(np_dtype(dt))
    if nan:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, max(3, flat.size // 200), replace=False)] = np.nan
        flat[rng.choice(flat.size, 5, replace=False)] = np.inf
        flat[rng.choice(flat.size, 5, replace=False)] = -np.inf
    return x


REDUCE_REF = {"min": lambda x, axis: np.min(x, axis=axis, keepdims=True),
              "argmax": lambda x, axis: np.argmax(x, axis=axis, keepdims=True),
              "argmin": lambda x, axis: np.argmin(x, axis=axis, keepdims=True)}


def _row_reduce(op, dt, n=64):
    def make(rng):
        x = _ties(rng, (M, n), dt)
        out_dt = dt if op == "min" else "int32"
        ref = REDUCE_REF[op](x, 1).astype(np.float64)
        return [x, Out((M, 1), out_dt, ref, how="exact")], (ws.cdiv(M, 64),)
    return Case(f"row_reduce-{op}-{dt}-N{n}", row_reduce, make, dict(BM=64, BN=n, OP=op))


def _col_reduce(op, dt, m=64):
    def make(rng):
        x = _ties(rng, (m, N), dt)
        out_dt = dt if op == "min" else "int32"
        ref = REDUCE_REF[op](x, 0).astype(np.float64)
        return [x, Out((1, N), out_dt, ref, how="exact")], (ws.cdiv(N, 64),)
    return Case(f"col_reduce-{op}-{dt}-M{m}", col_reduce, make, dict(BM=m, BN=64, OP=op))


def _vec_argmax(dt, n=256):
    def make(rng):
        x = _ties(rng, n, dt, nan=False)
        ref = np.array([np.argmax(x), np.argmin(x)], np.float64)
        return [x, Out((2,), "int32", ref, how="exact")], (1,)
    return Case(f"vec_argmax-{dt}", vec_argmax, make, dict(B=n))


def _gemm_row_argmax():
    def make(rng):
        Mg, Ng, K = 300, 128, 136
        # small integers: every product and sum exact in fp32, so ties are real ties
        a = rng.integers(-2, 3, size=(Mg, K)).astype(np.float16)
        b = rng.integers(-2, 3, size=(K, Ng)).astype(np.float16)
        ref = np.argmax(f64(a) @ f64(b), axis=1, keepdims=True).astype(np.float64)
        return [a, b, Out((Mg, 1), "int32", ref, how="exact")], (ws.cdiv(Mg, 128),)
    return Case("gemm_row_argmax", gemm_row_argmax, make, dict(BM=128, BN=128, BK=64),
                gemm=True)


def int_reference(op, a, b):
    """NumPy's result of ``a op b`` (int arrays of one dtype); // and % by 0 give 0."""
    with np.errstate(all="ignore"):
        return {"floordiv": np.floor_divide, "mod": np.remainder, "lshift": np.left_shift,
                "rshift": np.right_shift, "and": np.bitwise_and, "or": np.bitwise_or,
                "xor": np.bitwise_xor, "invert": lambda x, _: np.invert(x)}[op](a, b)


def _int_binop(op, dt):
    def make(rng):
        a = ints(rng, (M, N), dt)
        info = np.iinfo(np_dtype(dt))
        if op in ("lshift", "rshift"):
            b = ints(rng, (M, N), dt, -3, info.bits + 8)   # out-of-range counts too
        else:
            b = ints(rng, (M, N), dt, -9, 9)                 # zeros and negatives
        a.reshape(-1)[:4] = [info.min, info.min, info.max, -1]
        b.reshape(-1)[:4] = [-1, 0, -1, 0]
        ref = int_reference(op, a, b).astype(np.float64)
        return [a, b, Out((M, N), dt, ref, how="exact")], grid2()
    return Case(f"int_binop-{op}-{dt}", int_binop, make, dict(TILE, OP=op))


def _int_scalar(dt, s):
    def make(rng):
        a = ints(rng, (M, N), dt)
        scalar = np_dtype(dt).type(s)
        t = a // scalar
        ref = ((t % 7) << 2) - (a >> 3) + (a ^ scalar)
        return [a, Out((M, N), dt, ref.astype(np.float64), how="exact"), s], grid2()
    return Case(f"int_scalar_ops-{dt}-s{s}", int_scalar_ops, make, dict(TILE))


def _float_divmod(dt):
    def make(rng):
        a = with_specials(rng, floats(rng, (M, N), dt, -50.0, 50.0))
        b = with_specials(rng, floats(rng, (M, N), dt, -7.0, 7.0))
        with np.errstate(all="ignore"):
            d, m = np.floor_divide(a, b), np.remainder(a, b)     # in dt, as the kernel
        return [a, b, Out((M, N), dt, f64(d), how="exact"),
                Out((M, N), dt, f64(m), how="exact")], grid2()
    return Case(f"float_divmod-{dt}", float_divmod, make, dict(TILE))


def _promote_mix():
    def make(rng):
        xi = ints(rng, (M, N), "int32")
        xf = floats(rng, (M, N), "float32", -100.0, 100.0)
        xh = floats(rng, (M, N), "float16", -10.0, 10.0)
        xl = ints(rng, (M, N), "int64") * (2 ** 40)
        f32, tenth = np.float32, np.float32(0.1)
        with np.errstate(all="ignore"):
            refs = [(xi.astype(f32) + xf) * tenth,
                    (xi.astype(f32) * f32(1.5)) * tenth,
                    (xi.astype(f32) / (xi + 1001).astype(f32)) * tenth,
                    (xh.astype(f32) + xf) * tenth]
        outs = [Out((M, N), "float64", f64(r), how="exact") for r in refs]
        outs.append(Out((M, N), "int64", f64((xi.astype(np.int64) + xl) * 3), how="exact"))
        return [xi, xf, xh, xl] + outs, grid2()
    return Case("promote_mix", promote_mix, make, dict(TILE))


def _map_dtype():
    def make(rng):
        x = floats(rng, (M, N), "float32")
        xi = ints(rng, (M, N), "int32")
        f32, tenth = np.float32, np.float32(0.1)
        lk = np.where(x > 0, x, (0.01 * f64(x)).astype(f32))     # rounded once to fp32
        return [x, xi, Out((M, N), "float64", f64(lk * tenth), how="exact"),
                Out((M, N), "float64", f64((f64(xi) * 0.5).astype(f32) * tenth),
                    how="exact")], grid2()
    return Case("map_dtype", map_dtype, make, dict(TILE))


def _cases():
    cases = []
    for dt in ("float32", "float16", "float64"):
        cases += [_unary(op, dt) for op in UNARY]
    cases += [_minimum(dt) for dt in ("float32", "float16", "float64", "int32")]
    cases += [_fma(dt) for dt in ("float32", "float16", "bfloat16", "float64")]
    for op in ("min", "argmax", "argmin"):
        cases += [_row_reduce(op, dt) for dt in ("float32", "float16", "int32")]
        cases += [_col_reduce(op, dt) for dt in ("float32", "int32")]
    cases += [_row_reduce("argmax", "float32", 128), _col_reduce("argmax", "float64", 128)]
    cases += [_vec_argmax("float32"), _vec_argmax("int32"), _gemm_row_argmax()]
    for dt in ("int32", "int64"):
        cases += [_int_binop(op, dt) for op in ("floordiv", "mod", "lshift", "rshift", "and",
                                                "or", "xor", "invert")]
    cases += [_int_scalar("int32", -3), _int_scalar("int64", 5)]
    cases += [_float_divmod(dt) for dt in ("float32", "float16", "float64")]
    cases += [_promote_mix(), _map_dtype()]
    return cases


#: every case, by name
CASES = {c.name: c for c in _cases()}
host_args = kt.host_args
