"""Interval arithmetic on tiles, for the generator's choices (no data needed).

An :class:`Iv` holds a tile's dtype, shape and an interval ``[lo, hi]`` containing every
element, for the *declared* input ranges of a program's arrays (zero padding included).
The generator uses it to keep values inside their dtype (scaling back by exact powers of
two), ``exp`` arguments small and ``log`` / division arguments positive. It is
conservative: ``[-inf, inf]`` where a rule cannot say more. One relational fact keeps
softmax forms bounded: a value remembers the values it is ``>=`` (``maximum`` / ``max``
results), so ``s - ws.max(s, 1)`` is known to be ``<= 0``.

(The checker's error bounds come from the data instead: :mod:`numba_ws.fuzz.bounds`.)
"""
import math

INF = math.inf


class Iv:
    """dtype (name), shape, ``lo <= every element <= hi``, ``ge``: {id: value} of values
    this one is element-wise >= (kept alive, so the ids stay theirs)."""
    __slots__ = ("dtype", "shape", "lo", "hi", "ge")

    def __init__(self, dtype, shape, lo, hi, ge=None):
        if math.isnan(lo) or math.isnan(hi):
            lo, hi = -INF, INF
        self.dtype, self.shape, self.lo, self.hi = dtype, tuple(shape), float(lo), float(hi)
        self.ge = ge or {}

    @property
    def mag(self):
        return max(abs(self.lo), abs(self.hi))

    def __repr__(self):
        return f"Iv({self.dtype}{list(self.shape)}, [{self.lo:.4g}, {self.hi:.4g}])"


def _as_iv(x, like):
    if isinstance(x, Iv):
        return x
    return Iv(like.dtype, (), float(x), float(x))


def _broadcast(sa, sb):
    rank = max(len(sa), len(sb))
    pa = (1,) * (rank - len(sa)) + tuple(sa)
    pb = (1,) * (rank - len(sb)) + tuple(sb)
    return tuple(max(x, y) for x, y in zip(pa, pb))


def _pair(a, b):
    tile = a if isinstance(a, Iv) else b
    a, b = _as_iv(a, tile), _as_iv(b, tile)
    dtype = a.dtype if a.dtype == b.dtype else "float32"
    return a, b, dtype, _broadcast(a.shape, b.shape)


def _mul_iv(alo, ahi, blo, bhi):
    prods = []
    for x in (alo, ahi):
        for y in (blo, bhi):
            if (x == 0 and math.isinf(y)) or (y == 0 and math.isinf(x)):
                return -INF, INF
            prods.append(x * y)
    return min(prods), max(prods)


def add(a, b):
    a, b, dt, shape = _pair(a, b)
    return Iv(dt, shape, a.lo + b.lo, a.hi + b.hi)


def sub(a, b):
    a, b, dt, shape = _pair(a, b)
    lo, hi = a.lo - b.hi, a.hi - b.lo
    if id(a) in b.ge:
        hi = min(hi, 0.0)
    if id(b) in a.ge:
        lo = max(lo, 0.0)
    return Iv(dt, shape, lo, hi)


def mul(a, b):
    a, b, dt, shape = _pair(a, b)
    return Iv(dt, shape, *_mul_iv(a.lo, a.hi, b.lo, b.hi))


def truediv(a, b):
    a, b, dt, shape = _pair(a, b)
    if b.lo <= 0.0 <= b.hi:
        return Iv(dt, shape, -INF, INF)
    return Iv(dt, shape, *_mul_iv(a.lo, a.hi, 1.0 / b.hi, 1.0 / b.lo))


def neg(a):
    return Iv(a.dtype, a.shape, -a.hi, -a.lo)


def maximum(a, b):
    a, b, dt, shape = _pair(a, b)
    return Iv(dt, shape, max(a.lo, b.lo), max(a.hi, b.hi), {**a.ge, **b.ge, id(a): a, id(b): b})


def minimum(a, b):
    a, b, dt, shape = _pair(a, b)
    return Iv(dt, shape, min(a.lo, b.lo), min(a.hi, b.hi))


def _safe_exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return INF


def exp(a):
    lo = 0.0 if a.lo == -INF else _safe_exp(a.lo)
    return Iv(a.dtype, a.shape, lo, _safe_exp(a.hi))


def exp2(a):
    lo = 0.0 if a.lo == -INF else _safe_exp(a.lo * math.log(2.0))
    return Iv(a.dtype, a.shape, lo, _safe_exp(a.hi * math.log(2.0)))


def log(a):
    if a.lo <= 0.0:
        return Iv(a.dtype, a.shape, -INF, INF)
    return Iv(a.dtype, a.shape, math.log(a.lo), math.log(a.hi))


def sqrt(a):
    if a.lo < 0.0:
        return Iv(a.dtype, a.shape, -INF, INF)
    return Iv(a.dtype, a.shape, math.sqrt(a.lo), math.sqrt(a.hi))


def rsqrt(a):
    if a.lo <= 0.0:
        return Iv(a.dtype, a.shape, -INF, INF)
    return Iv(a.dtype, a.shape, 1.0 / math.sqrt(a.hi), 1.0 / math.sqrt(a.lo))


def absolute(a):
    lo = 0.0 if a.lo <= 0.0 <= a.hi else min(abs(a.lo), abs(a.hi))
    return Iv(a.dtype, a.shape, lo, a.mag)


def sigmoid(a):
    return Iv(a.dtype, a.shape, 0.0, 1.0)


def tanh(a):
    return Iv(a.dtype, a.shape, math.tanh(a.lo), math.tanh(a.hi))


def gelu(a):
    return Iv(a.dtype, a.shape, -0.17, max(a.hi, 0.0))


def fma(a, b, c):
    return add(mul(a, b), c)


def astype(a, dtype):
    if dtype.startswith("int"):
        return Iv(dtype, a.shape, math.trunc(a.lo) if math.isfinite(a.lo) else a.lo,
                  math.trunc(a.hi) if math.isfinite(a.hi) else a.hi)
    return Iv(dtype, a.shape, a.lo, a.hi, a.ge)


def _reduced(x, axis):
    shape = list(x.shape)
    n = shape[axis]
    shape[axis] = 1
    return n, tuple(shape)


def reduce_sum(x, axis):
    n, shape = _reduced(x, axis)
    dt = "float32" if x.dtype in ("float16", "bfloat16") else x.dtype
    return Iv(dt, shape, n * x.lo, n * x.hi)


def reduce_max(x, axis):
    n, shape = _reduced(x, axis)
    return Iv(x.dtype, shape, x.lo, x.hi, {**x.ge, id(x): x})


def reduce_min(x, axis):
    n, shape = _reduced(x, axis)
    return Iv(x.dtype, shape, x.lo, x.hi)


def trans(x):
    return Iv(x.dtype, x.shape[::-1], x.lo, x.hi)


def dot(a, b, acc=None):
    k = a.shape[1]
    plo, phi = _mul_iv(a.lo, a.hi, b.lo, b.hi)
    lo, hi = k * plo, k * phi
    if acc is not None:
        lo, hi = lo + acc.lo, hi + acc.hi
    return Iv("float32", (a.shape[0], b.shape[1]), lo, hi)


def compare(a, b):
    a, b, dt, shape = _pair(a, b)
    return Iv("bool", shape, 0.0, 1.0)


def where(cond, a, b):
    a, b, dt, shape = _pair(a, b)
    return Iv(dt, _broadcast(cond.shape, shape), min(a.lo, b.lo), max(a.hi, b.hi))


def zeros(shape, dtype):
    return Iv(dtype, shape, 0.0, 0.0)


def full(shape, value, dtype):
    return Iv(dtype, shape, float(value), float(value))
