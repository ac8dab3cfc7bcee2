"""NumPy rules of the tile language: the semantic reference for the compiled kernels.

:data:`INTERPRET` maps every name of :data:`numba_ws.language.core.OP_NAMES` to a function
taking the same arguments as the op's stub. Tiles are plain ``numpy.ndarray`` values
(always fresh arrays, never views of a kernel argument); scalars are Python numbers.

Semantics decided here (the compiled path must match them):

- ``load`` reads 0 outside the array (negative offsets included); ``store`` drops
  out-of-bounds elements and casts with round-to-nearest-even.
- Every conversion to bfloat16 (``astype``, ``store``, ``full``, a scalar operand of a
  bf16 tile, the result of ``exp``/``map`` on bf16) rounds ONCE, to nearest even, from the
  exact value (:func:`to_bfloat16`), as the GPU's ``cvt.rn.bf16.*``; ml_dtypes' own
  ``astype`` may narrow float64 and integers to float32 first (a double rounding).
- ``dot``: fp16/bf16 operands are exact in float32, so the product is an fp32 matmul;
  fp32 operands are first rounded to tf32 (10 mantissa bits, nearest even). The result,
  plus ``acc`` (float32) if given, is float32.
- ``max``/``sum`` keep the reduced axis with size 1 (``keepdims``): ``max(x, 1)`` of a
  (BM, BN) tile is (BM, 1), so a row statistic broadcasts against the tile directly.
  ``sum`` of fp16/bf16 accumulates in and returns float32; integer sums keep their dtype.
- ``exp``/``exp2``/``log`` of fp16/bf16 compute in float32 and round back to the input
  dtype; integer tiles are refused.
- Binary ops broadcast NumPy-style; a float tile combined with a scalar keeps the tile's
  dtype (NumPy 2 weak-scalar promotion; NumPy scalars are treated as Python scalars, and
  the interpreter passes scalar kernel arguments as Python scalars).
- ``program_id``/``num_programs`` on an axis the grid does not have give 0 and 1, as on
  the GPU.
"""
import math
import numbers

import ml_dtypes
import numpy as np

from ..errors import WSUsageError
from ..language import core
from ..language import dtypes as wsdt

_FLOATS = ("float16", "bfloat16", "float32", "float64")
_LOW_PRECISION = ("float16", "bfloat16")
_BF16 = np.dtype(ml_dtypes.bfloat16)


def _quiet():
    """Floating-point exceptions give inf/NaN silently, as on the GPU."""
    return np.errstate(all="ignore")



# -- conversion to bfloat16 -----------------------------------------------------------

_F64_2_POW_M126 = 0x3810000000000000    # bits of 2**-126, the smallest normal bf16
_REBIAS = (1023 - 127) << 7               # f64 exponent -> bf16 exponent, above 7 bits
_BF16_INF, _BF16_NAN = 0x7F80, 0x7FC0


def _bf16_bits_of_float64(x):
    """uint16 bf16 bit patterns of the 1-D float64 array ``x``, each one rounding of its
    value.

    - |x| >= 2**-126: the f64 bit pattern rounded at bit 45 (52 - 7 mantissa bits), half
      to even; a carry moves into the exponent. Re-biased, a result at or above 0x7f80
      (|x| >= bf16 max + half an ulp, the tie at the top included: bf16 max is odd, so it
      rounds up) or x = ±inf gives ±inf.
    - |x| < 2**-126 (f64 subnormals included): the bf16 step is 2**-133 here, so the bf16
      bits are ``rint(|x| * 2**133)`` (both exact in f64; 128 is 0x0080 = 2**-126).
    - The sign bit is kept (±0 stay ±0); NaN gives the quiet NaN 0x7fc0 with x's sign.
    """
    x = np.ascontiguousarray(x, np.float64)
    bits = x.view(np.uint64)
    sign = ((bits >> np.uint64(48)) & np.uint64(0x8000)).astype(np.uint16)
    mag = bits & np.uint64(0x7FFF_FFFF_FFFF_FFFF)
    half_even = np.uint64(2 ** 44 - 1) + ((mag >> np.uint64(45)) & np.uint64(1))
    rounded = ((mag + half_even) >> np.uint64(45)).astype(np.int64) - _REBIAS
    normal = np.minimum(rounded, _BF16_INF)
    tiny = mag < np.uint64(_F64_2_POW_M126)
    small = np.rint(np.abs(np.where(tiny, x, 0.0)) * 2.0 ** 133).astype(np.int64)
    out = np.where(tiny, small, normal)
    out = np.where(np.isnan(x), _BF16_NAN, out).astype(np.uint16)
    return out | sign


def _int_as_float64(x):
    """A float64 array with, element by element, the bf16 rounding of the 1-D integer
    array ``x`` (any signed or unsigned integer dtype up to 64 bits).

    Below 2**53 in magnitude that is the integer itself (exact). From 2**53 up, its bf16
    rounding bit is bit 45 or higher, and the magnitude truncated to a multiple of 2**11
    with bit 11 set when a 1 was dropped (round to odd) has the same kept bits, rounding
    bit and sticky bits -- and at most 53 significant bits, so it is exact in float64.
    """
    if x.dtype.kind == "i":
        wide = x.astype(np.int64)
        negative = wide < 0
        bits = wide.view(np.uint64)
        mag = np.where(negative, ~bits + np.uint64(1), bits)   # |int64 min| = 2**63 fits
    else:
        mag = x.astype(np.uint64)
        negative = np.zeros(x.shape, bool)
    dropped = (mag & np.uint64(0x7FF)) != 0
    odd = (mag >> np.uint64(11)) | dropped.astype(np.uint64)
    out = np.where(mag >= np.uint64(2 ** 53), odd.astype(np.float64) * 2.0 ** 11,
                   mag.astype(np.float64))
    return np.where(negative, -out, out)


def _python_int_as_float64(value):
    """A Python int of any size as a float64 that rounds to bf16 as the int does (round to
    odd at 53 significant bits, as :func:`_int_as_float64`); beyond float64, ±inf."""
    mag = abs(value)
    drop = max(mag.bit_length() - 53, 0)
    odd = (mag >> drop) | (1 if mag & ((1 << drop) - 1) else 0)
    try:
        return math.copysign(math.ldexp(odd, drop), value)
    except OverflowError:
        return math.copysign(math.inf, value)


def to_bfloat16(x):
    """``x`` -- an array or scalar of float64, float32, float16, bfloat16, any integer up
    to 64 bits or bool -- as an ml_dtypes.bfloat16 array of its shape, each element the
    exact value rounded ONCE to nearest even (the GPU's ``cvt.rn.bf16.*``), never through
    float32 first (a double rounding: int32 2**27 + 2**19 + 1 is 0x4d01, not 0x4d00).

    ±0 keep their sign, ±inf stay, NaN gives a NaN (sign and payload unspecified);
    |x| >= bf16 max + half an ulp gives ±inf (the tie at the top rounds to even, to inf);
    below 2**-126 the step is 2**-133 (bf16 subnormals, no flush to zero; float64
    subnormals give ±0); integers beyond 2**53 round from their exact value; a Python int
    of any size is exact too. A bfloat16 input is copied unchanged.
    """
    if _is_int(x) and not isinstance(x, np.generic):
        x = _python_int_as_float64(int(x))
    x = np.asarray(x)
    if x.dtype == _BF16:
        return x.copy()
    flat = x.reshape(-1)                         # 1-D: array arithmetic wraps silently
    if x.dtype.kind in "iu":
        wide = _int_as_float64(flat)
    elif x.dtype.kind == "b" or x.dtype in (np.float16, np.float32, np.float64):
        with np.errstate(invalid="ignore"):      # a signalling NaN stays a NaN
            wide = flat.astype(np.float64)       # exact
    else:
        raise WSUsageError(f"to_bfloat16(): no exact conversion from {x.dtype} "
                           "(expected a float, an integer or bool)")
    return _bf16_bits_of_float64(wide).view(_BF16).reshape(x.shape)


def _cast(x, dtype):
    """The array ``x`` as NumPy dtype ``dtype``: :func:`to_bfloat16` for bfloat16 from
    a real source, NumPy's ``astype`` otherwise, except float -> integer, which is the
    GPU's ``cvt.rzi``: toward zero, saturating at the integer's range, NaN -> 0 (NumPy
    leaves out-of-range values undefined; int8 / uint8 / int16 stores hit them often)."""
    x = np.asarray(x)
    to = np.dtype(dtype)
    if to == _BF16 and x.dtype.kind in "biuf":
        return to_bfloat16(x)
    if to.kind in "iu" and (x.dtype.kind == "f" or x.dtype == _BF16):   # issue 15 item 7
        info = np.iinfo(to)
        wide = x.astype(np.float64)                      # exact for every float source
        high, low = wide >= float(info.max), wide <= float(info.min)
        with np.errstate(invalid="ignore"):
            out = np.where(np.isnan(wide) | high | low, 0.0, wide).astype(to)
        out = np.where(high, np.array(info.max, to), out)
        return np.where(low, np.array(info.min, to), out).astype(to)
    return x.astype(dtype)


# -- argument checks ------------------------------------------------------------------

def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _shape(op, shape, arg="shape"):
    if (not isinstance(shape, tuple) or not shape
            or not all(_is_int(s) and s > 0 for s in shape)):
        raise WSUsageError(
            f"ws.{op}(): {arg} must be a non-empty tuple of positive ints, got {shape!r}")
    return tuple(int(s) for s in shape)


def _dtype(op, dtype):
    if not isinstance(dtype, wsdt.DType):
        raise WSUsageError(
            f"ws.{op}(): dtype must be a numba_ws dtype (ws.float16, ws.float32, ...), "
            f"got {dtype!r}")
    return dtype


def _array(op, array):
    if not isinstance(array, np.ndarray):
        raise WSUsageError(
            f"ws.{op}(): array must be a NumPy array in interpreter mode, got "
            f"{type(array).__module__}.{type(array).__qualname__} (copy it to the host)")
    if array.ndim not in (1, 2):
        raise WSUsageError(f"ws.{op}(): array must be 1-D or 2-D, got {array.ndim}-D")
    return array


def _offsets(op, offsets, ndim):
    if not isinstance(offsets, tuple) or not all(_is_int(o) for o in offsets):
        raise WSUsageError(f"ws.{op}(): offsets must be a tuple of ints, got {offsets!r}")
    if len(offsets) != ndim:
        raise WSUsageError(
            f"ws.{op}(): offsets has {len(offsets)} "
            f"{'entry' if len(offsets) == 1 else 'entries'} but the array is {ndim}-D")
    return tuple(int(o) for o in offsets)


def _tile(op, x, arg="x"):
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (numbers.Number, np.generic)):
        return np.asarray(x)
    raise WSUsageError(f"ws.{op}(): {arg} must be a tile or a scalar, got {type(x).__name__}")


def _dtype_name(x):
    d = wsdt.from_numpy(x.dtype)
    return d.name if d is not None else str(x.dtype)


def _window(offsets, tile_shape, array_shape):
    """Slices (into the array, into the tile) of the in-bounds part, or None if empty."""
    src, dst = [], []
    for o, s, n in zip(offsets, tile_shape, array_shape):
        lo, hi = max(o, 0), min(o + s, n)
        if lo >= hi:
            return None
        src.append(slice(lo, hi))
        dst.append(slice(lo - o, hi - o))
    return tuple(src), tuple(dst)


def _interpreter(op):
    interp = core._ACTIVE.get()
    if interp is None:
        raise WSUsageError(f"ws.{op}() needs a running program instance (interpreter)")
    return interp


def _axis(op, axis):
    if not _is_int(axis) or not 0 <= axis <= 2:
        raise WSUsageError(f"ws.{op}(): axis must be 0, 1 or 2, got {axis!r}")
    return int(axis)


# -- the rules ------------------------------------------------------------------------

def program_id(axis):
    axis = _axis("program_id", axis)
    pid = _interpreter("program_id").pid
    return pid[axis] if axis < len(pid) else 0


def num_programs(axis):
    axis = _axis("num_programs", axis)
    grid = _interpreter("num_programs").grid
    return grid[axis] if axis < len(grid) else 1


def cdiv(a, b):
    if not (_is_int(a) and _is_int(b)):
        raise WSUsageError(f"ws.cdiv(): expected two ints, got {a!r} and {b!r}")
    if b == 0:
        raise WSUsageError("ws.cdiv(): division by zero")
    return -(-int(a) // int(b))


def zeros(shape, dtype):
    return np.zeros(_shape("zeros", shape), _dtype("zeros", dtype).dtype)


def full(shape, value, dtype):
    shape, dtype = _shape("full", shape), _dtype("full", dtype)
    if not isinstance(value, (numbers.Number, np.generic)):
        raise WSUsageError(f"ws.full(): value must be a scalar, got {type(value).__name__}")
    if dtype.dtype == _BF16:
        value = to_bfloat16(value)               # one rounding, a 0-d bf16 array
    return np.full(shape, value, dtype.dtype)


def load(array, offsets, shape):
    """A fresh ``shape`` tile of ``array``'s dtype; elements outside the array read 0."""
    array = _array("load", array)
    offsets = _offsets("load", offsets, array.ndim)
    shape = _shape("load", shape)
    if len(shape) != array.ndim:
        raise WSUsageError(
            f"ws.load(): shape {shape} has {len(shape)} dims but the array is {array.ndim}-D")
    out = np.zeros(shape, array.dtype)
    win = _window(offsets, shape, array.shape)
    if win is not None:
        out[win[1]] = array[win[0]]
    return out


def store(array, offsets, tile):
    """Write ``tile`` cast to ``array``'s dtype (nearest even); out-of-bounds parts dropped."""
    array = _array("store", array)
    offsets = _offsets("store", offsets, array.ndim)
    if not isinstance(tile, np.ndarray):
        raise WSUsageError(f"ws.store(): tile must be a tile, got {type(tile).__name__}")
    if tile.ndim != array.ndim:
        raise WSUsageError(
            f"ws.store(): tile is {tile.ndim}-D but the array is {array.ndim}-D")
    if not array.flags.writeable:
        raise WSUsageError("ws.store(): array is read-only")
    win = _window(offsets, tile.shape, array.shape)
    if win is not None:
        array[win[0]] = _cast(tile[win[1]], array.dtype)


def _tf32(x):
    """float32 array rounded to tf32 (10 mantissa bits), nearest even; NaN and inf kept."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1)))
    rounded &= np.uint32(0xFFFFE000)
    out = rounded.view(np.float32)
    return np.where(np.isfinite(x), out, x).astype(np.float32)


def dot(a, b, acc=None):
    """``a @ b (+ acc)`` in float32: fp16/bf16 exact in fp32, fp32 rounded to tf32 first."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, np.ndarray) or t.ndim != 2:
            got = getattr(t, "shape", t)
            raise WSUsageError(f"ws.dot(): {name} must be a 2-D tile, got {got!r}")
        if _dtype_name(t) not in wsdt.DOT_INPUTS:
            raise WSUsageError(
                f"ws.dot(): {name} has dtype {_dtype_name(t)}; expected one of {wsdt.DOT_INPUTS}")
    if a.dtype != b.dtype:
        raise WSUsageError(f"ws.dot(): a and b must have the same dtype, got "
                           f"{_dtype_name(a)} and {_dtype_name(b)}")
    if a.shape[1] != b.shape[0]:
        raise WSUsageError(f"ws.dot(): shapes {a.shape} and {b.shape} do not chain (K differs)")
    shape = (a.shape[0], b.shape[1])
    if acc is not None:
        if not isinstance(acc, np.ndarray) or acc.shape != shape or acc.dtype != np.float32:
            raise WSUsageError(
                f"ws.dot(): acc must be a float32 tile of shape {shape}, got "
                f"{getattr(acc, 'dtype', type(acc).__name__)} {getattr(acc, 'shape', '')}")
    if a.dtype == np.float32:
        a32, b32 = _tf32(a), _tf32(b)
    else:
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
    with _quiet():
        out = np.matmul(a32, b32)
        if acc is not None:
            out += acc
    return out


def astype(tile, dtype):
    """``tile`` as ``dtype``: one rounding to nearest even (bf16 too); float -> int
    truncates toward zero."""
    return _cast(_tile("astype", tile, "tile"), _dtype("astype", dtype).dtype)


def _unary_float(op, fn):
    def rule(x):
        if _is_int(x):
            x = float(x)
        x = _tile(op, x)
        name = _dtype_name(x)
        if name not in _FLOATS:
            raise WSUsageError(f"ws.{op}(): expected a float tile, got {name}")
        with _quiet():
            if name in _LOW_PRECISION:
                return _cast(fn(x.astype(np.float32)), x.dtype)
            return fn(x)
    rule.__name__ = op
    rule.__doc__ = f"Element-wise {op}; fp16/bf16 computed in float32, result in the input dtype."
    return rule


exp = _unary_float("exp", np.exp)
exp2 = _unary_float("exp2", np.exp2)
log = _unary_float("log", np.log)


def _operand(op, x, arg):
    if isinstance(x, np.generic):
        return x.item()  # a scalar never widens a tile, whatever its NumPy type
    if isinstance(x, (np.ndarray, numbers.Number)):
        return x
    raise WSUsageError(f"ws.{op}(): {arg} must be a tile or a scalar, got {type(x).__name__}")


def _bf16_scalars(*operands):
    """``operands`` with each Python scalar next to a bf16 tile rounded to bf16 once (a
    0-d array), as the GPU casts a scalar to the tile's dtype; NumPy would round it
    through float32 first (ml_dtypes' scalar conversion)."""
    if not any(isinstance(x, np.ndarray) and x.dtype == _BF16 for x in operands):
        return operands
    return tuple(to_bfloat16(x) if isinstance(x, numbers.Real) else x for x in operands)


def _binary(op, fn):
    def rule(a, b):
        a, b = _bf16_scalars(_operand(op, a, "a"), _operand(op, b, "b"))
        with _quiet():
            return fn(a, b)
    rule.__name__ = op
    rule.__doc__ = f"Element-wise {op} with NumPy broadcasting (scalars keep the tile's dtype)."
    return rule


maximum = _binary("maximum", np.maximum)
add = _binary("add", np.add)
sub = _binary("sub", np.subtract)
mul = _binary("mul", np.multiply)
truediv = _binary("truediv", np.true_divide)


def neg(x):
    x = _operand("neg", x, "x")
    with _quiet():
        return np.negative(x)


def where(cond, a, b):
    cond = _operand("where", cond, "cond")
    kind = np.asarray(cond).dtype
    if kind != np.bool_:
        raise WSUsageError(f"ws.where(): cond must be a boolean tile, got {kind}")
    a, b = _bf16_scalars(_operand("where", a, "a"), _operand("where", b, "b"))
    return np.where(cond, a, b)


def _reduce_args(op, x, axis):
    if not isinstance(x, np.ndarray) or x.ndim == 0:
        raise WSUsageError(f"ws.{op}(): x must be a 1-D or 2-D tile, got {type(x).__name__}")
    if not _is_int(axis) or not 0 <= axis < x.ndim:
        raise WSUsageError(f"ws.{op}(): axis must be an int in [0, {x.ndim}), got {axis!r}")
    return int(axis)


def reduce_max(x, axis):
    """``ws.max``: maximum along ``axis``, keeping it with size 1."""
    axis = _reduce_args("max", x, axis)
    return np.max(x, axis=axis, keepdims=True)


def reduce_sum(x, axis):
    """``ws.sum``: sum along ``axis``, keeping it with size 1; fp16/bf16 sum in float32."""
    axis = _reduce_args("sum", x, axis)
    with _quiet():
        if _dtype_name(x) in _LOW_PRECISION:
            return np.sum(x.astype(np.float32), axis=axis, keepdims=True)
        return np.sum(x, axis=axis, dtype=x.dtype, keepdims=True)


def trans(x):
    if not isinstance(x, np.ndarray) or x.ndim != 2:
        raise WSUsageError(f"ws.trans(): x must be a 2-D tile, got {getattr(x, 'shape', x)!r}")
    return np.ascontiguousarray(x.T)


def map_elementwise(fn, *args):
    """``fn``'s Python function on every element (NumPy broadcasting); the result takes
    the dtype of the first tile argument (scalar functions compute in Python floats)."""
    py = getattr(fn, "py_func", fn)
    tiles = [a for a in args if isinstance(a, np.ndarray)]
    if not tiles:
        return py(*args)
    out = np.vectorize(py, otypes=[np.float64])(*[_operand("map", a, "arg") for a in args])
    return _cast(out, tiles[0].dtype)


#: op name -> NumPy rule; keys are exactly ``OP_NAMES``.
INTERPRET = {
    "program_id": program_id, "num_programs": num_programs, "cdiv": cdiv,
    "zeros": zeros, "full": full, "load": load, "store": store, "dot": dot,
    "astype": astype, "exp": exp, "exp2": exp2, "log": log, "maximum": maximum,
    "where": where, "max": reduce_max, "sum": reduce_sum, "trans": trans,
    "add": add, "sub": sub, "mul": mul, "truediv": truediv, "neg": neg,
    "map": map_elementwise,
}
