"""How far the GPU may legitimately be from the interpreter, element by element.

A running error analysis: the fuzzed kernel runs unchanged (same code object) with ``ws``
replaced by :func:`abstract_module`, one program instance at a time, on the launch's real
host arrays. Every tile is a :class:`Val`: ``v``, the interpreter's own value (computed
with :data:`numba_ws.interpreter.ops.INTERPRET`, so it *is* the reference), and ``e``, a
float64 array bounding ``|gpu - interpreter|`` per element (0: both sides compute the
same bits; ``inf``: no bound, the element is not compared). ``ws.store`` writes the
stored tile's bound, after the cast to the array's dtype, into a per-output tolerance
array (``nan`` where nothing is stored), which :func:`numba_ws.fuzz.check.compare` uses.

The model (``u``: unit roundoff of the result dtype -- 2**-11 fp16, 2**-8 bf16, 2**-24
fp32, 2**-53 fp64; ``|x|``: the interpreter's magnitude, ``|x| + e`` the GPU's at most):

- Correctly rounded on both sides -- ``+ - * /``, ``sqrt``, ``astype`` and store casts:
  bit-identical inputs give bit-identical results (fp16 / bf16 arithmetic is done in fp32
  and rounded once on the GPU, ``codegen.tile_ops.elementwise``, and fp32 holds one op of
  two 11- or 8-bit significands exactly enough that the double rounding is innocuous);
  different inputs give the propagated difference plus ``2 u |result|``.
- fp32 / fp64 products may be contracted with a following add into one ``fma`` by NVVM,
  skipping the product's rounding: ``+ u |product|`` (not for power-of-two scalars).
- ``exp`` / ``exp2`` / ``log`` in fp16 / bf16 / fp32: the GPU's ``ex2.approx.ftz`` /
  ``lg2.approx.ftz`` (codegen/frag_math.py: ``(2 + 1.2 |x|)`` ulp relative for exp, about
  2**-21 absolute for log), NumPy's own 4 ulp, ``2**-126`` for flushed subnormals, then the
  fp16 / bf16 rounding; fp64 8 ulp (libdevice). ``log`` of an fp32 subnormal: no bound
  (the GPU flushes it to 0 and returns -inf). ``sigmoid``, ``tanh``, ``gelu``, ``rsqrt``
  (when the language has them): their documented approximations, Lipschitz-propagated.
- ``sum`` over n elements: a different summation order on each side, each within
  ``(n - 1) u_acc sum|x|`` of the exact sum (``u_acc`` of fp32 for fp16 / bf16 / fp32).
- ``dot`` over K: exact products, possibly truncating tensor-core accumulation:
  ``2 (K + 1) 2**-22 (|a| @ |b| + |acc|)``, plus ``e_a @ |b| + |a| @ e_b + e_acc``;
  float32 operands (tf32) add ``3 * 2**-10 |a| @ |b|`` (:data:`TF32`).
- ``maximum``, ``max``, ``neg``, ``abs``, ``trans``, loads, ``zeros`` / ``full``: the
  input's bound (no bound where an operand is NaN: the GPU's ``max.f32`` drops NaN,
  NumPy keeps it -- a documented difference, codegen/frag_math.py).
- float -> int truncation: exact inputs stay exact, else ``e + 1``; out of range: none.
- A comparison of values whose bounds overlap may flip: ``where`` on it takes
  ``|a - b|`` plus the branches' bounds.
- Any non-finite result of an inexact computation: no bound.
"""
import itertools
import math
import types

import numpy as np

from ..errors import WSUsageError
from ..interpreter.ops import INTERPRET, _window

UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24,
        "float64": 2.0 ** -53}
#: half the smallest subnormal step: the absolute rounding error near 0
TINY = {"float16": 2.0 ** -25, "bfloat16": 2.0 ** -134, "float32": 2.0 ** -150,
        "float64": 0.0}
#: float conversions that are exact (every value of the first is one of the second)
WIDENING = {("float16", "float32"), ("float16", "float64"), ("bfloat16", "float32"),
            ("bfloat16", "float64"), ("float32", "float64")}
FTZ = 2.0 ** -126            # what ``.ftz`` flushes (fp32)
APPROX_EXP = 2.0 ** -23      # ex2.approx error per unit of (2 + 1.2 |x|), relative
APPROX_LOG = 2.0 ** -20      # lg2.approx * ln 2, absolute, times (1 + |log x|)
NUMPY_ULPS = 4               # NumPy's own fp32 exp / log error, ulps
LIBDEVICE_ULPS = 8           # fp64 exp / log, both sides together
DOT_ROUND = 2.0 ** -22       # per accumulation step, relative, tensor cores + BLAS
#: a float32 (tf32) dot's products, relative: each operand keeps 10 mantissa bits, rounded
#: to nearest by the interpreter (2**-11) and truncated by the tensor cores (2**-10), so
#: the two differ by up to 1.5 * 2**-10 per operand, twice per product
TF32 = 3.0 * 2.0 ** -10
INF = math.inf


class AnalysisError(WSUsageError):
    """The kernel does something the error model has no rule for."""


def dtype_name(d):
    if isinstance(d, str):
        return d
    name = getattr(d, "name", None)
    if isinstance(name, str) and not isinstance(d, np.dtype):
        return name
    return np.dtype(d).name


def is_float(dt):
    return dt in UNIT


class Val:
    """A tile of the abstract run: ``v`` the interpreter's value, ``e`` the bound."""
    __slots__ = ("v", "e")

    def __init__(self, v, e=None):
        self.v = v
        if e is None:
            e = np.zeros(v.shape)
        e = np.broadcast_to(np.asarray(e, np.float64), v.shape)
        self.e = np.where(np.isnan(e), INF, e)

    @property
    def dtype(self):
        return dtype_name(self.v.dtype)

    @property
    def shape(self):
        return self.v.shape

    def __repr__(self):
        return f"Val({self.dtype}{list(self.shape)}, max e {float(np.max(self.e, initial=0)):.3g})"

    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return truediv(self, o)
    def __rtruediv__(self, o): return truediv(o, self)
    def __neg__(self): return neg(self)
    def __lt__(self, o): return _compare(np.less, self, o)
    def __le__(self, o): return _compare(np.less_equal, self, o)
    def __gt__(self, o): return _compare(np.greater, self, o)
    def __ge__(self, o): return _compare(np.greater_equal, self, o)
    def __eq__(self, o): return _compare(np.equal, self, o)
    def __ne__(self, o): return _compare(np.not_equal, self, o)
    def __and__(self, o): return _logical(np.bitwise_and, self, o)
    def __rand__(self, o): return _logical(np.bitwise_and, o, self)
    def __or__(self, o): return _logical(np.bitwise_or, self, o)
    def __ror__(self, o): return _logical(np.bitwise_or, o, self)
    def __xor__(self, o): return _logical(np.bitwise_xor, self, o)
    def __invert__(self): return Val(np.invert(self.v), self.e)
    def __getitem__(self, index): return Val(self.v[index], self.e[index])
    __hash__ = object.__hash__

    def astype(self, dtype):
        return astype(self, dtype)


def _parts(x):
    """(value, bound, |value| as float64) of a Val or a scalar."""
    if isinstance(x, Val):
        return x.v, x.e, np.abs(x.v.astype(np.float64))
    if isinstance(x, np.generic):
        x = x.item()
    if not isinstance(x, (int, float, bool)):
        raise AnalysisError(f"operand {x!r} is neither a tile nor a scalar")
    return x, 0.0, abs(float(x))


def _as(x, dtype):
    """``x`` (a tile's values or a scalar) converted to ``dtype`` as the op converts it."""
    with np.errstate(all="ignore"):
        return np.asarray(x).astype(dtype)


def _f64(v):
    return np.asarray(v).astype(np.float64)


def _rounded(v, ep):
    """The bound of a correctly rounded result ``v`` whose exact inputs differ by ``ep``;
    none where an inexact computation gave a non-finite value."""
    dt = dtype_name(v.dtype)
    ep = np.asarray(ep, np.float64)
    if is_float(dt):
        with np.errstate(all="ignore"):
            e = np.where(ep > 0, ep + 2.0 * UNIT[dt] * np.abs(_f64(v)) + 2.0 * TINY[dt], 0.0)
    else:
        e = ep
    return _nonfinite(v, e)


def _nonfinite(v, e):
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(_f64(v)) & (np.asarray(e) > 0)
    return np.where(bad | np.isnan(e), INF, e)


def _is_pow2(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x == 0 or not math.isfinite(x):
        return False
    return math.frexp(abs(x))[0] == 0.5


def _infinite_wins(av, ae, bv, be, nonzero=False):
    """Where one operand is exactly ±inf on both sides and the other finite on both
    (``nonzero``: and of a known sign), so the result is the same infinity on both."""
    a64, b64 = _f64(av), _f64(bv)
    with np.errstate(all="ignore"):
        fa = np.isfinite(a64) & np.isfinite(ae) & (~nonzero | (np.abs(a64) > ae))
        fb = np.isfinite(b64) & np.isfinite(be) & (~nonzero | (np.abs(b64) > be))
        return (np.isinf(a64) & (ae == 0) & fb) | (np.isinf(b64) & (be == 0) & fa)


def _add_like(op, a, b):
    av, ae, _ = _parts(a)
    bv, be, _ = _parts(b)
    v = INTERPRET[op](av, bv)
    e = _rounded(v, ae + be)
    return Val(v, np.where(_infinite_wins(av, ae, bv, be), 0.0, e))


def add(a, b):
    return _add_like("add", a, b)


def sub(a, b):
    return _add_like("sub", a, b)


def mul(a, b):
    pow2 = (not isinstance(a, Val) and _is_pow2(a)) or (not isinstance(b, Val) and _is_pow2(b))
    av, ae, am = _parts(a)
    bv, be, bm = _parts(b)
    v = INTERPRET["mul"](av, bv)
    with np.errstate(all="ignore"):
        ep = ae * (bm + be) + be * am
        e = _rounded(v, ep)
        dt = dtype_name(v.dtype)
        if dt in ("float32", "float64") and not pow2:
            # a contracted fma skips this rounding; nothing to skip where the product of
            # equal inputs is exact (fp32: the float64 product is exact, compare with it)
            v64 = np.abs(_f64(v))
            # the operands as the op used them: a Python float scalar is rounded to
            # float32 first (seed 16450669: 80 * 0.3 is 24.0 in float64 but 80 times
            # float32(0.3) is not a float32, and the GPU's fma kept its low bits)
            exact = (ep == 0) & (_f64(_as(av, v.dtype)) * _f64(_as(bv, v.dtype)) == _f64(v)) \
                if dt == "float32" else False
            e = e + np.where(exact, 0.0, UNIT[dt] * (v64 + ep))
        e = np.where(_infinite_wins(av, ae, bv, be, nonzero=True), 0.0, _nonfinite(v, e))
    return Val(v, e)


def truediv(a, b):
    av, ae, am = _parts(a)
    bv, be, bm = _parts(b)
    v = INTERPRET["truediv"](av, bv)
    with np.errstate(all="ignore"):
        room = bm - be
        ep = ae / room + am * be / (bm * room)
        ep = np.where((ae == 0) & (be == 0), 0.0, np.where(room > 0, ep, INF))
    return Val(v, _rounded(v, ep))


def neg(a):
    if not isinstance(a, Val):
        return -a
    return Val(INTERPRET["neg"](a.v), a.e)


def _nan_any(*vals):
    out = False
    for x in vals:
        if isinstance(x, Val) and is_float(x.dtype):
            out = out | np.isnan(_f64(x.v))
    return out


def _max_like(rule, a, b):
    av, ae, _ = _parts(a)
    bv, be, _ = _parts(b)
    v = rule(av, bv)
    e = np.maximum(ae, be)
    return Val(v, np.where(_nan_any(a, b), INF, e))


def maximum(a, b):
    return _max_like(INTERPRET["maximum"], a, b)


def minimum(a, b):
    return _max_like(INTERPRET.get("minimum", np.minimum), a, b)


def _approx(x, v, ep, rel, absolute):
    """Bound of an approximate function's result ``v`` (fp32 path, or fp64 libdevice)."""
    dt = dtype_name(v.dtype)
    mag = np.abs(_f64(v))
    with np.errstate(all="ignore"):
        if dt == "float64":
            e = ep + LIBDEVICE_ULPS * 2.0 ** -53 * mag
        else:
            e = ep + rel * mag + absolute + NUMPY_ULPS * 2.0 ** -24 * mag + FTZ
            if dt in ("float16", "bfloat16"):
                e = e + 2.0 * UNIT[dt] * mag + 2.0 * TINY[dt]
        special = ~np.isfinite(_f64(x.v)) & (x.e == 0)     # exp(-inf) = 0 ... on both sides
        e = np.where(special, 0.0, e)
    return _nonfinite(v, e)


def _float_tile(op, x):
    if not isinstance(x, Val):
        raise AnalysisError(f"ws.{op} of a scalar")
    if not is_float(x.dtype):
        raise AnalysisError(f"ws.{op} of a {x.dtype} tile")
    return x


def _exp_like(op, x, scale):
    x = _float_tile(op, x)
    v = INTERPRET[op](x.v)
    x64 = _f64(x.v)
    with np.errstate(all="ignore"):
        ep = np.where(x.e > 0, np.exp((x64 + x.e) * scale) * scale * x.e, 0.0)
        rel = (2.0 + 1.2 * np.abs(x64 * scale)) * APPROX_EXP
    return Val(v, _approx(x, v, ep, rel, 0.0))


def exp(x):
    return _exp_like("exp", x, 1.0)


def exp2(x):
    return _exp_like("exp2", x, math.log(2.0))


def _near_pole(x, rule):
    """(x as float64, propagated bound) of a function with a pole at 0: ``rule(e, room)``
    where the input stays positive (``room = x - e > 0``), else no bound."""
    x64 = _f64(x.v)
    with np.errstate(all="ignore"):
        room = x64 - x.e
        return x64, np.where(x.e > 0, np.where(room > 0, rule(x.e, room), INF), 0.0)


def log(x):
    x = _float_tile("log", x)
    v = INTERPRET["log"](x.v)
    x64, ep = _near_pole(x, lambda e, room: e / room)
    with np.errstate(all="ignore"):
        e = _approx(x, v, ep, 0.0, APPROX_LOG * (1.0 + np.abs(_f64(v))))
        if x.dtype == "float32":       # lg2.approx.ftz flushes subnormal inputs to 0
            e = np.where((np.abs(x64) < FTZ) & (x64 != 0), INF, e)
        e = np.where((x.e == 0) & ((x64 <= 0) | np.isinf(x64)), 0.0, e)
    return Val(v, e)


def sqrt(x):
    x = _float_tile("sqrt", x)
    v = INTERPRET["sqrt"](x.v)
    x64 = _f64(x.v)
    with np.errstate(all="ignore"):
        ep = x.e / (np.sqrt(np.maximum(x64, 0)) + np.sqrt(np.maximum(x64 - x.e, 0)))
        ep = np.where(x.e > 0, np.where(x64 - x.e >= 0, ep, np.sqrt(x.e) + ep), 0.0)
    return Val(v, _rounded(v, ep))


def rsqrt(x):
    x = _float_tile("rsqrt", x)
    v = INTERPRET["rsqrt"](x.v)
    _, ep = _near_pole(x, lambda e, room: 0.5 * e * room ** -1.5)
    return Val(v, _approx(x, v, ep, 2.0 ** -21, 0.0))


def _smooth(op, x, lipschitz, rel, absolute_per_x=0.0):
    x = _float_tile(op, x)
    v = INTERPRET[op](x.v)
    absolute = absolute_per_x * np.abs(_f64(x.v))
    return Val(v, _approx(x, v, lipschitz * x.e, rel, absolute))


def sigmoid(x):
    return _smooth("sigmoid", x, 0.25, 8 * 2.0 ** -23)


def tanh(x):
    return _smooth("tanh", x, 1.0, 2.0 ** -10.5)


def gelu(x):
    return _smooth("gelu", x, 1.13, 8 * 2.0 ** -23, 4 * 2.0 ** -23)


def absolute(x):
    if not isinstance(x, Val):
        return abs(x)
    return Val(INTERPRET["abs"](x.v), x.e)


def fma(a, b, c):
    av, ae, am = _parts(a)
    bv, be, bm = _parts(b)
    cv, ce, _ = _parts(c)
    v = INTERPRET["fma"](av, bv, cv)
    with np.errstate(all="ignore"):
        ep = ae * (bm + be) + be * am + ce
        e = _rounded(v, ep)
        dt = dtype_name(v.dtype)
        if is_float(dt):
            e = e + UNIT[dt] * np.abs(_f64(v))
    return Val(v, _nonfinite(v, e))


def astype(x, dtype):
    if not isinstance(x, Val):
        raise AnalysisError(f"astype of {x!r}")
    if isinstance(dtype, np.dtype):
        from ..language.dtypes import from_numpy
        dtype = from_numpy(dtype)
    dst = dtype_name(dtype)
    src = x.dtype
    v = INTERPRET["astype"](x.v, dtype)
    if dst == src:
        return Val(v, x.e)
    x64 = _f64(x.v)
    if not is_float(dst):
        info = np.iinfo(v.dtype) if v.dtype.kind in "iu" else None
        with np.errstate(all="ignore"):
            if is_float(src):       # truncation: how far the integer part may move
                t = np.trunc(x64)
                e = np.maximum(np.abs(np.trunc(x64 + x.e) - t), np.abs(np.trunc(x64 - x.e) - t))
                e = np.where(x.e == 0, 0.0, e)
            else:
                e = x.e
            if info is not None:
                out = ~np.isfinite(x64) | (x64 + x.e >= info.max + 1.0) | \
                    (x64 - x.e <= info.min - 1.0)
                e = np.where(out & ((x.e > 0) | is_float(src)), INF, e)
        return Val(v, e)
    if (src, dst) in WIDENING:
        return Val(v, x.e)
    return Val(v, _rounded(v, x.e))


def _axis_args(x, axis, keepdims):
    if not isinstance(x, Val):
        raise AnalysisError(f"reduction of {x!r}")
    keep = bool(keepdims)           # NumPy's default (the language's): the axis dropped
    return {"keepdims": keep}, keep


def reduce_sum(x, axis, keepdims=None):
    kw, keep = _axis_args(x, axis, keepdims)
    v = INTERPRET["sum"](x.v, axis, **kw)
    n = x.shape[axis]
    dt = dtype_name(v.dtype)
    with np.errstate(all="ignore"):
        e = np.sum(x.e, axis=axis, keepdims=keep)
        if is_float(dt):
            e = e + 2.0 * (n - 1) * UNIT[dt] * np.sum(np.abs(_f64(x.v)), axis=axis,
                                                      keepdims=keep) + 2.0 * TINY[dt]
    return Val(v, _nonfinite(v, np.reshape(e, v.shape)))


def _reduce_max_like(op, x, axis, keepdims):
    kw, keep = _axis_args(x, axis, keepdims)
    v = INTERPRET[op](x.v, axis, **kw)
    e = np.max(x.e, axis=axis, keepdims=keep)
    if is_float(x.dtype):
        e = np.where(np.any(np.isnan(_f64(x.v)), axis=axis, keepdims=keep), INF, e)
    return Val(v, np.reshape(e, v.shape))


def reduce_max(x, axis, keepdims=None):
    return _reduce_max_like("max", x, axis, keepdims)


def reduce_min(x, axis, keepdims=None):
    return _reduce_max_like("min", x, axis, keepdims)


def _arg_reduce(op):
    def rule(x, axis, keepdims=None):
        kw, keep = _axis_args(x, axis, keepdims)
        v = INTERPRET[op](x.v, axis, **kw)
        exact = np.all(x.e == 0, axis=axis, keepdims=keep)
        return Val(v, np.reshape(np.where(exact, 0.0, INF), v.shape))
    return rule


def trans(x):
    if not isinstance(x, Val):
        raise AnalysisError(f"trans of {x!r}")
    return Val(INTERPRET["trans"](x.v), np.ascontiguousarray(x.e.T))


def dot(a, b, acc=None):
    if not (isinstance(a, Val) and isinstance(b, Val)):
        raise AnalysisError("dot of a scalar")
    v = INTERPRET["dot"](a.v, b.v, None if acc is None else acc.v)
    k = a.shape[1]
    am, bm = np.abs(_f64(a.v)), np.abs(_f64(b.v))
    with np.errstate(all="ignore"):
        e = a.e @ (bm + b.e) + am @ b.e
        mag = products = am @ bm
        if acc is not None:
            e = e + acc.e
            mag = mag + np.abs(_f64(acc.v))
        e = e + 2.0 * (k + 1) * DOT_ROUND * mag + FTZ
        if np.asarray(a.v).dtype == np.float32:
            e = e + TF32 * products  # tf32: operands rounded (interpreter) / truncated (GPU)
    return Val(v, _nonfinite(v, e))


def _compare(fn, a, b):
    av, ae, _ = _parts(a)
    bv, be, _ = _parts(b)
    with np.errstate(all="ignore"):
        v = np.asarray(fn(av, bv))
        room = ae + be
        flips = (room > 0) & ~(np.abs(_f64(av) - _f64(bv)) > room)
    return Val(v, np.where(flips, 1.0, 0.0))


def _logical(fn, a, b):
    av, ae, _ = _parts(a)
    bv, be, _ = _parts(b)
    return Val(np.asarray(fn(av, bv)), np.maximum(ae, be))


def where(cond, a, b):
    cv, ce, _ = _parts(cond)
    av, ae, _ = _parts(a)
    bv, be, _ = _parts(b)
    v = INTERPRET["where"](cv, av, bv)
    with np.errstate(all="ignore"):
        picked = np.where(cv, ae, be)
        spread = np.abs(_f64(av) - _f64(bv))
        e = np.where(np.asarray(ce) > 0, np.maximum(ae, be) + spread, picked)
    return Val(v, np.broadcast_to(e, v.shape))


# -- memory and the rest ----------------------------------------------------------------

class _Run:
    """The abstract launch in progress: grid, program id, tolerance arrays by id."""
    grid, pid, tolerance = (), (), None


_RUN = _Run()


def load(array, offsets, shape, mask=None, other=0):
    if mask is None and other == 0:
        return Val(INTERPRET["load"](array, offsets, shape))
    mv, me, _ = _parts(mask) if mask is not None else (None, 0.0, None)
    v = INTERPRET["load"](array, offsets, shape, mv, other)
    return Val(v, np.where(np.asarray(me) > 0, INF, 0.0))


def store(array, offsets, tile, mask=None):
    if not isinstance(tile, Val):
        raise AnalysisError(f"ws.store of {tile!r}")
    tol = _RUN.tolerance.get(id(array)) if _RUN.tolerance is not None else None
    if tol is None:
        raise AnalysisError("ws.store into an array that is not an output")
    if tile.v.ndim != array.ndim:
        raise AnalysisError(f"ws.store of a {tile.v.ndim}-D tile into a {array.ndim}-D array")
    e = astype(tile, array.dtype).e
    if mask is not None:
        mv, me, _ = _parts(mask)
        e = np.where(np.asarray(me) > 0, INF, e)
        written = np.broadcast_to(np.asarray(mv, bool), tile.shape)
    else:
        written = np.ones(tile.shape, bool)
    win = _window(tuple(int(o) for o in offsets), tile.shape, array.shape)
    if win is not None:
        part = tol[win[0]]
        tol[win[0]] = np.where(written[win[1]], e[win[1]], part)


def arange(start, end):
    return Val(INTERPRET["arange"](start, end))


def expand_dims(x, axis):
    v = INTERPRET["expand_dims"](x.v, axis)
    return Val(v, np.reshape(x.e, v.shape))


def broadcast_to(x, shape):
    v = INTERPRET["broadcast_to"](x.v, shape)
    return Val(v, np.broadcast_to(x.e, v.shape))


def zeros(shape, dtype):
    return Val(INTERPRET["zeros"](shape, dtype))


def full(shape, value, dtype):
    return Val(INTERPRET["full"](shape, value, dtype))


def _program_id(axis):
    return _RUN.pid[axis] if axis < len(_RUN.pid) else 0


def _num_programs(axis):
    return _RUN.grid[axis] if axis < len(_RUN.grid) else 1


def _cdiv(a, b):
    return -(-int(a) // int(b))


def _no_model(name):
    def rule(*args, **kwargs):
        raise AnalysisError(f"ws.{name} has no error model in the fuzzer")
    return rule


_MODULE = None


def abstract_module():
    """The ``ws`` an abstract run gives the kernel: numba_ws's names, with the ops above."""
    global _MODULE
    if _MODULE is None:
        import numba_ws as real
        ns = types.ModuleType("numba_ws_abstract", "numba_ws with error-bound tiles")
        for name in dir(real):
            if not name.startswith("_"):
                setattr(ns, name, getattr(real, name))
        ops = {"program_id": _program_id, "num_programs": _num_programs, "cdiv": _cdiv,
               "zeros": zeros, "full": full, "load": load, "store": store, "dot": dot,
               "astype": astype, "exp": exp, "exp2": exp2, "log": log, "maximum": maximum,
               "minimum": minimum, "where": where, "max": reduce_max, "min": reduce_min,
               "sum": reduce_sum, "trans": trans, "sqrt": sqrt, "rsqrt": rsqrt,
               "abs": absolute, "sigmoid": sigmoid, "tanh": tanh, "gelu": gelu, "fma": fma,
               "argmax": _arg_reduce("argmax"), "argmin": _arg_reduce("argmin"),
               "arange": arange, "expand_dims": expand_dims, "broadcast_to": broadcast_to}
        for name in getattr(real, "OP_NAMES", ()):
            if name not in ops and hasattr(real, name):
                ops[name] = _no_model(name)
        for name, fn in ops.items():
            setattr(ns, name, fn)
        _MODULE = ns
    return _MODULE


def tolerances(fn, grid, args, outputs):
    """Run ``fn(**args)`` with error-bound tiles for every program id of ``grid`` (row-major,
    as the interpreter); {id(output): tolerance array} for the ``outputs`` among ``args``.

    ``args``: parameter name -> host value (NumPy arrays, scalars, constexprs). Input arrays
    are only read; outputs are not written (their tolerance arrays are).
    """
    glb = dict(fn.__globals__)
    for name, value in fn.__globals__.items():
        if getattr(value, "__name__", None) == "numba_ws":
            glb[name] = abstract_module()
    clone = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    _RUN.tolerance = {id(a): np.full(a.shape, np.nan) for a in outputs}
    _RUN.grid = tuple(grid)
    args = {n: v.item() if isinstance(v, np.generic) else v for n, v in args.items()}
    try:
        with np.errstate(all="ignore"):
            for pid in itertools.product(*(range(n) for n in grid)):
                _RUN.pid = pid
                clone(**args)
        return _RUN.tolerance
    finally:
        _RUN.tolerance = None
