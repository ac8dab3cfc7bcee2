"""NumPy rules of the tile language: the semantic reference for the compiled kernels.

:data:`INTERPRET` maps every name of :data:`numba_ws.language.core.OP_NAMES` to a function
taking the same arguments as the op's stub. Tiles are ``numpy.ndarray`` values (the
:class:`Tile` subclass; always fresh arrays, never views of a kernel argument); scalars
are Python numbers.

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
- ``max``/``min``/``sum``/``argmax``/``argmin`` follow NumPy: the reduced axis is dropped
  unless ``keepdims=True``, ``axis=None`` reduces everything. ``sum`` of fp16/bf16
  accumulates in and returns float32; integer sums keep their dtype.
- ``exp``/``exp2``/``log`` of fp16/bf16 compute in float32 and round back to the input
  dtype; integer tiles are refused.
- Binary ops broadcast NumPy-style; a float tile combined with a scalar keeps the tile's
  dtype (NumPy 2 weak-scalar promotion; NumPy scalars are treated as Python scalars, and
  the interpreter passes scalar kernel arguments as Python scalars).
- Result dtypes of arithmetic are the language's (``language.promotion.binary_result``,
  Triton's promotion: int32 tile + float32 tile is float32, an int tile with a Python
  float float32, int / int float32), not NumPy's: every rule returns its arrays as
  :class:`Tile`, an ``ndarray`` subclass whose operators apply that promotion (and whose
  in-place operators make new tiles). Integer ``//`` and ``%`` floor, and give 0 for a
  zero divisor (NumPy's values); shifts by counts outside ``[0, bits)`` give NumPy's 0 /
  sign fill. ``sqrt``, ``rsqrt``, ``sigmoid``, ``tanh``, ``gelu`` compute in float64 and
  round once to the tile's dtype; ``fma`` rounds the exact value once; ``argmax`` /
  ``argmin`` are int32, ties and NaN as NumPy.
- ``program_id``/``num_programs`` on an axis the grid does not have give 0 and 1, as on
  the GPU.
"""
import functools
import math
import numbers

import numpy as np

from ..errors import WSUsageError
from ..language import dtypes as wsdt
from ..language.promotion import binary_result, promote
from .arguments import (  # noqa: F401  (_dtype_name, _window: the fuzzer's too)
    _array, _axis, _dtype, _dtype_name, _interpreter, _offsets, _shape, _tile, _window)
from .casts import _BF16, _cast, _is_int, _quiet, to_bfloat16  # noqa: F401 (to_bfloat16)

_FLOATS = ("float16", "bfloat16", "float32", "float64")
_LOW_PRECISION = ("float16", "bfloat16")


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


def _mask(op, mask, shape):
    """``mask`` (None, or a boolean tile broadcastable to ``shape``) as a ``shape``
    boolean array, or None."""
    if mask is None:
        return None
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        got = getattr(mask, "dtype", type(mask).__name__)
        raise WSUsageError(f"ws.{op}(): mask must be a boolean tile (a comparison such as "
                           f"cols[None, :] < N), got {got}")
    try:
        if np.broadcast_shapes(mask.shape, shape) != tuple(shape):
            raise ValueError
    except ValueError:
        raise WSUsageError(f"ws.{op}(): mask has shape {mask.shape}, which does not "
                           f"broadcast to the tile's shape {tuple(shape)}") from None
    return np.broadcast_to(mask, shape)


def load(array, offsets, shape, mask=None, other=0):
    """A fresh ``shape`` tile of ``array``'s dtype: the array's elements where they are
    in bounds and ``mask`` holds, ``other`` (converted as ``astype`` converts: bf16
    rounded once) everywhere else."""
    array = _array("load", array)
    offsets = _offsets("load", offsets, array.ndim)
    shape = _shape("load", shape)
    if len(shape) != array.ndim:
        raise WSUsageError(
            f"ws.load(): shape {shape} has {len(shape)} dims but the array is {array.ndim}-D")
    keep = _mask("load", mask, shape)
    if isinstance(other, np.generic):
        other = other.item()
    if not isinstance(other, numbers.Number):
        raise WSUsageError(f"ws.load(): other must be a scalar, got {type(other).__name__}")
    with _quiet():
        fill = _cast(np.asarray(other), array.dtype)
    out = np.full(shape, fill, array.dtype)
    win = _window(offsets, shape, array.shape)
    if win is not None:
        out[win[1]] = array[win[0]]
    if keep is not None:
        out = np.where(keep, out, fill)
    return out


def _write_args(op, array, offsets, tile, mask):
    """(array, offsets, mask or None) of a ``store`` / ``atomic_add``, checked."""
    array = _array(op, array)
    offsets = _offsets(op, offsets, array.ndim)
    if not isinstance(tile, np.ndarray):
        raise WSUsageError(f"ws.{op}(): tile must be a tile, got {type(tile).__name__}")
    if tile.ndim != array.ndim:
        raise WSUsageError(f"ws.{op}(): tile is {tile.ndim}-D but the array is {array.ndim}-D")
    if not array.flags.writeable:
        raise WSUsageError(f"ws.{op}(): array is read-only")
    return array, offsets, _mask(op, mask, tile.shape)


def store(array, offsets, tile, mask=None):
    """Write ``tile`` cast to ``array``'s dtype (nearest even) where it is in bounds and
    ``mask`` (if given) holds; the rest of the array is left as it was."""
    array, offsets, keep = _write_args("store", array, offsets, tile, mask)
    win = _window(offsets, tile.shape, array.shape)
    if win is not None:
        values = _cast(tile[win[1]], array.dtype)
        if keep is not None:
            values = np.where(keep[win[1]], values, array[win[0]])
        array[win[0]] = values


def atomic_add(array, offsets, tile, mask=None):
    """``array[window] += tile`` cast to ``array``'s dtype, where in bounds and ``mask``
    holds; the sum rounded in the array's dtype (program instances run one at a time
    here, so every add is atomic)."""
    from ..language.typing import ATOMIC_ADD_DTYPES
    array, offsets, keep = _write_args("atomic_add", array, offsets, tile, mask)
    if _dtype_name(array) not in ATOMIC_ADD_DTYPES:
        raise WSUsageError(f"ws.atomic_add(): array has dtype {_dtype_name(array)}; "
                           f"expected one of {', '.join(ATOMIC_ADD_DTYPES)}")
    win = _window(offsets, tile.shape, array.shape)
    if win is not None:
        values = _cast(tile[win[1]], array.dtype)
        if keep is not None:
            values = np.where(keep[win[1]], values, np.zeros((), array.dtype))
        array[win[0]] = array[win[0]] + values


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
            return fn(*(as_tile(x) for x in (a, b)))   # Tile: the language's promotion
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
    """``a`` where ``cond`` else ``b``, broadcast together, in the dtype the language's
    promotion gives ``a`` and ``b`` (``binary_result("where", ...)``, as typing and the
    GPU: a scalar takes the tile's dtype, bf16 rounded once); two scalars: NumPy's."""
    cond = _operand("where", cond, "cond")
    kind = np.asarray(cond).dtype
    if kind != np.bool_:
        raise WSUsageError(f"ws.where(): cond must be a boolean tile, got {kind}")
    a, b = _bf16_scalars(_operand("where", a, "a"), _operand("where", b, "b"))
    kinds = (_kind(a), _kind(b))
    name = None if None in kinds else binary_result("where", *kinds)
    if name is not None:
        dtype = wsdt.from_name(name).dtype
        with _quiet():
            a, b = (_cast(_plain(x), dtype) for x in (a, b))
    return np.where(_plain(cond), _plain(a), _plain(b))


# -- issue 15 items 1-2: index tiles, views, comparisons, boolean operators ------------

def arange(start, end):
    """``ws.arange``: int32 ``[start, end)``; ``end > start``, both ints."""
    if not (_is_int(start) and _is_int(end)):
        raise WSUsageError(f"ws.arange(): start and end must be ints, got {start!r}, {end!r}")
    if end <= start:
        raise WSUsageError(f"ws.arange(): needs end > start, got arange({start}, {end})")
    return np.arange(int(start), int(end), dtype=np.int32)


def expand_dims(x, axis):
    """``ws.expand_dims``: a 1-D tile as (1, N) (axis 0) or (N, 1) (axis 1 or -1)."""
    if not isinstance(x, np.ndarray) or x.ndim != 1:
        raise WSUsageError(f"ws.expand_dims(): x must be a 1-D tile, got "
                           f"{getattr(x, 'shape', type(x).__name__)!r}")
    if axis not in (0, 1, -1) or not _is_int(axis):
        raise WSUsageError(f"ws.expand_dims(): axis must be 0, 1 or -1, got {axis!r}")
    return np.ascontiguousarray(x[None, :] if axis == 0 else x[:, None])


def broadcast_to(x, shape):
    """``ws.broadcast_to``: a fresh copy of ``x`` broadcast to ``shape``."""
    if not isinstance(x, np.ndarray):
        raise WSUsageError(f"ws.broadcast_to(): x must be a tile, got {type(x).__name__}")
    shape = _shape("broadcast_to", shape)
    try:
        return np.array(np.broadcast_to(x, shape), copy=True)
    except ValueError:
        raise WSUsageError(f"ws.broadcast_to(): a {x.shape} tile does not broadcast to "
                           f"{shape}") from None


def _bits_operand(op, x, arg):
    x = _operand(op, x, arg)
    kind = np.asarray(x).dtype.kind
    if kind not in "biu":
        raise WSUsageError(f"ws.{op}: {arg} must be a boolean or integer tile or scalar, "
                           f"got {np.asarray(x).dtype}")
    return x


def _bitwise(op, fn):
    def rule(a, b):
        return fn(_bits_operand(op, a, "a"), _bits_operand(op, b, "b"))
    rule.__name__ = op
    rule.__doc__ = f"``{op}`` of boolean / integer tiles with NumPy broadcasting."
    return rule


lt = _binary("lt", np.less)
le = _binary("le", np.less_equal)
eq = _binary("eq", np.equal)
ne = _binary("ne", np.not_equal)
gt = _binary("gt", np.greater)
ge = _binary("ge", np.greater_equal)
and_ = _bitwise("and_", np.bitwise_and)
or_ = _bitwise("or_", np.bitwise_or)
xor = _bitwise("xor", np.bitwise_xor)


def invert(x):
    """``~x``: logical not of a boolean tile, bitwise not of an integer tile."""
    return np.invert(_bits_operand("invert", x, "x"))


# -- issue 15 item 3: tiles with the language's dtype promotion ------------------------

#: NumPy ufuncs whose result dtype the language decides (language.promotion.binary_result)
_PROMOTED = {np.add: "add", np.subtract: "sub", np.multiply: "mul",
             np.true_divide: "truediv", np.floor_divide: "floordiv", np.remainder: "mod",
             np.left_shift: "lshift", np.right_shift: "rshift", np.bitwise_and: "and_",
             np.bitwise_or: "or_", np.bitwise_xor: "xor", np.maximum: "maximum",
             np.minimum: "minimum"}


def _plain(x):
    return x.view(np.ndarray) if isinstance(x, Tile) else x


def as_tile(x):
    """``x`` as a :class:`Tile` if it is an array (no copy), else ``x`` unchanged."""
    return x.view(Tile) if isinstance(x, np.ndarray) and not isinstance(x, Tile) else x


def _kind(x):
    """:func:`numba_ws.language.promotion.promote`'s description of an operand: a tile's
    dtype name, ``("scalar", kind)`` for a Python / NumPy scalar or a 0-d array (weak, as
    NumPy scalars are here), or None (not a language dtype)."""
    if isinstance(x, np.ndarray) and x.ndim > 0:
        d = wsdt.from_numpy(x.dtype)
        return d.name if d is not None else None
    kind = np.asarray(x).dtype.kind
    return {"b": ("scalar", "bool"), "i": ("scalar", "int"), "u": ("scalar", "int"),
            "f": ("scalar", "float")}.get(kind, ("scalar", "float") if
                                            np.asarray(x).dtype == _BF16 else None)


def promoted(op, ufunc, a, b):
    """``ufunc(a, b)`` with the language's result dtype (``binary_result(op, ...)``, the
    rule typing and the GPU use): both operands converted to it first (bf16 rounded once;
    an int scalar wraps to the tile's width, as the GPU's conversion), then ``ufunc`` in
    that dtype (NumPy computes fp16/bf16 in float32 and rounds once, as the GPU)."""
    kinds = (_kind(a), _kind(b))
    if None in kinds:
        return ufunc(_plain(a), _plain(b))
    try:
        name = binary_result(op, *kinds)
    except ValueError as e:
        raise WSUsageError(f"tile operator {e}") from None
    if name is None:
        return ufunc(_plain(a), _plain(b))
    dtype = wsdt.from_name(name).dtype
    with _quiet():
        x, y = (_plain(v) if isinstance(v, np.ndarray) and v.dtype == dtype
                else _cast(_plain(v), dtype) for v in (a, b))
        return as_tile(ufunc(x, y))


class Tile(np.ndarray):
    """A tile in the interpreter: an ``ndarray`` whose operators promote dtypes as compiled
    code does (:func:`promoted`; NumPy's own promotion differs: int32 + float32 is
    float64 there), whose in-place operators (``acc += x``) make a new tile (tiles are
    values, as in compiled code) and whose ``astype(ws dtype)`` rounds once (as
    ``ws.astype``). Every rule of :data:`INTERPRET` returns its arrays as Tiles; other
    NumPy ufuncs (comparisons, ``np.negative`` ...) act as on any array."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        op = _PROMOTED.get(ufunc)
        if op is not None and method == "__call__" and len(inputs) == 2 and not kwargs:
            return promoted(op, ufunc, *inputs)
        inputs = tuple(_plain(x) for x in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(_plain(x) for x in kwargs["out"])
        result = getattr(ufunc, method)(*inputs, **kwargs)
        if isinstance(result, tuple):
            return tuple(as_tile(r) for r in result)
        return as_tile(result)

    def astype(self, dtype, *args, **kwargs):
        if isinstance(dtype, wsdt.DType) and not args and not kwargs:
            return as_tile(_cast(_plain(self), dtype.dtype))
        return super().astype(dtype, *args, **kwargs)


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "lshift", "rshift", "and",
              "or", "xor", "pow"):
    setattr(Tile, f"__i{_name}__", getattr(np.ndarray, f"__{_name}__"))


def _float_math(op, fn):
    """An element-wise function of float tiles: ``fn`` computes in float64 (the input
    widened exactly) and the result is rounded ONCE to the input's dtype (bf16 by
    :func:`to_bfloat16`): the reference the GPU's approximations are measured against."""
    def rule(x):
        x = _tile(op, x)
        name = _dtype_name(x)
        if name not in _FLOATS:
            raise WSUsageError(f"ws.{op}(): expected a float tile, got {name} (convert it "
                               "first: x.astype(ws.float32))")
        with _quiet():
            return _cast(fn(x.astype(np.float64)), x.dtype)
    rule.__name__ = op
    return rule


def _erf64(x):
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


sqrt = _float_math("sqrt", np.sqrt)
rsqrt = _float_math("rsqrt", lambda x: 1.0 / np.sqrt(x))
sigmoid = _float_math("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)))
tanh = _float_math("tanh", np.tanh)
gelu = _float_math("gelu", lambda x: 0.5 * x * (1.0 + _erf64(x / math.sqrt(2.0))))
minimum = _binary("minimum", np.minimum)
floordiv = _binary("floordiv", np.floor_divide)
mod = _binary("mod", np.remainder)
lshift = _binary("lshift", np.left_shift)
rshift = _binary("rshift", np.right_shift)


def abs_(x):
    """``ws.abs``: |x| of a float or int tile (``abs`` of the most negative int wraps to
    itself, as NumPy and the GPU's ``abs.s32``)."""
    x = _tile("abs", x)
    if x.dtype.kind not in "iuf" and x.dtype != _BF16:
        raise WSUsageError(f"ws.abs(): expected a tile of numbers, got {_dtype_name(x)}")
    with _quiet():
        return np.abs(x)


def _round_to_odd(s, err):
    """float64 ``s`` (a rounding of ``s + err``, ``err`` its exact error) moved to the
    neighbour with an odd last bit where ``err`` is not 0: the round-to-odd value, which
    then rounds to any format of at most 51 bits exactly as the exact sum would."""
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    toward = np.where(err > 0, np.inf, -np.inf)
    return np.where((err != 0) & even & np.isfinite(s), np.nextafter(s, toward), s)


def _fma_exact(a, b, c):
    """``a * b + c`` of float64 arrays, exact and rounded once to float64 (Fractions,
    element by element; non-finite values and overflow as ``a * b + c``)."""
    from fractions import Fraction

    def one(x, y, z):
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
            return x * y + z
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        try:
            return float(exact)
        except OverflowError:
            return math.copysign(math.inf, exact)
    return np.frompyfunc(one, 3, 1)(a, b, c).astype(np.float64)


def fma(a, b, c):
    """``ws.fma``: ``a * b + c`` rounded once to the promoted float dtype of the operands,
    broadcast together (scalars take the tiles' dtype). fp16 / bf16 / fp32: the product
    is exact in float64, the sum's float64 rounding is made round-to-odd (its exact error
    from TwoSum), so the final rounding is that of the exact value; float64: exact
    arithmetic on Fractions."""
    ops = [_operand("fma", x, arg) for x, arg in zip((a, b, c), "abc")]
    kinds = [_kind(x) for x in ops]
    tiles = [k for k in kinds if k is not None and not isinstance(k, tuple)]
    if not tiles:
        raise WSUsageError("ws.fma(): needs a tile operand")
    name = tiles[0]
    for k in tiles[1:]:
        name = promote(name, k)
    if name not in _FLOATS or None in kinds or any(
            isinstance(k, tuple) and k[1] == "bool" for k in kinds):
        raise WSUsageError(f"ws.fma(): operands must be float tiles or scalars, got "
                           f"{[getattr(x, 'dtype', type(x).__name__) for x in ops]}")
    dtype = wsdt.from_name(name).dtype
    x, y, z = (np.asarray(_cast(np.asarray(v), dtype), np.float64) for v in ops)
    x, y, z = np.broadcast_arrays(x, y, z)
    with _quiet():
        if name == "float64":
            return _fma_exact(x, y, z)
        p = x * y                                  # exact: at most 2 x 24 bits
        s = p + z
        bb = s - p
        err = (p - (s - bb)) + (z - bb)            # TwoSum: s + err == p + z exactly
        return _cast(_round_to_odd(s, np.where(np.isfinite(s), err, 0.0)), dtype)


def reduce_min(x, axis=None, keepdims=False):
    """``ws.min``: minimum along ``axis`` (a NaN gives NaN); shapes as :func:`reduce_max`."""
    axis, keepdims = _reduce_args("min", x, axis, keepdims)
    return _reduced(np.min(_plain(x), axis=axis, keepdims=keepdims))


def _arg_reduce(op, fn):
    def rule(x, axis=None, keepdims=False):
        if axis is None:
            raise WSUsageError(f"ws.{op}(): give an axis (axis=None, a flat index, is not "
                               "supported)")
        axis, keepdims = _reduce_args(op, x, axis, keepdims)
        if x.dtype.kind not in "iuf" and x.dtype != _BF16:
            raise WSUsageError(f"ws.{op}(): expected a tile of numbers, got {_dtype_name(x)}")
        return _reduced(np.asarray(fn(_plain(x), axis=axis, keepdims=keepdims))
                        .astype(np.int32))
    rule.__name__ = op
    rule.__doc__ = (f"``ws.{op}``: int32 index along ``axis``, the axis dropped unless "
                    "``keepdims``; ties give the smallest index, the first NaN wins (NumPy).")
    return rule


argmax = _arg_reduce("argmax", np.argmax)
argmin = _arg_reduce("argmin", np.argmin)


def _reduce_args(op, x, axis, keepdims=False):
    """(axis or None, keepdims) of a reduction, checked (NumPy's semantics: ``axis``
    dropped unless ``keepdims``; None reduces every axis)."""
    if not isinstance(x, np.ndarray) or x.ndim == 0:
        raise WSUsageError(f"ws.{op}(): x must be a 1-D or 2-D tile, got {type(x).__name__}")
    if axis is not None and (not _is_int(axis) or not 0 <= axis < x.ndim):
        raise WSUsageError(f"ws.{op}(): axis must be None or an int in [0, {x.ndim}), got "
                           f"{axis!r}")
    if not isinstance(keepdims, (bool, np.bool_)):
        raise WSUsageError(f"ws.{op}(): keepdims must be True or False, got {keepdims!r}")
    return (None if axis is None else int(axis)), bool(keepdims)


def _reduced(out):
    """A reduction's result: a tile, or a scalar (Python number) when every axis went."""
    out = np.asarray(out)
    return out.item() if out.ndim == 0 else as_tile(out)


def reduce_max(x, axis=None, keepdims=False):
    """``ws.max``: maximum along ``axis``, the axis dropped unless ``keepdims`` (None: every
    axis; a scalar when nothing is left)."""
    axis, keepdims = _reduce_args("max", x, axis, keepdims)
    return _reduced(np.max(_plain(x), axis=axis, keepdims=keepdims))


def reduce_sum(x, axis=None, keepdims=False):
    """``ws.sum``: sum along ``axis`` (shapes as :func:`reduce_max`); fp16/bf16 sum in
    float32."""
    axis, keepdims = _reduce_args("sum", x, axis, keepdims)
    x = _plain(x)
    with _quiet():
        if _dtype_name(x) in _LOW_PRECISION:
            return _reduced(np.sum(x.astype(np.float32), axis=axis, keepdims=keepdims))
        return _reduced(np.sum(x, axis=axis, dtype=x.dtype, keepdims=keepdims))


def squeeze(x, axis):
    """``ws.squeeze``: ``x`` without its size-1 ``axis``; a (1,) tile gives its element."""
    if not isinstance(x, np.ndarray) or not _is_int(axis) or not 0 <= axis < x.ndim \
            or x.shape[axis] != 1:
        raise WSUsageError(f"ws.squeeze(): axis {axis!r} of a "
                           f"{getattr(x, 'shape', type(x).__name__)} tile is not of size 1")
    return _reduced(np.squeeze(_plain(x), axis=int(axis)))


def trans(x):
    if not isinstance(x, np.ndarray) or x.ndim != 2:
        raise WSUsageError(f"ws.trans(): x must be a 2-D tile, got {getattr(x, 'shape', x)!r}")
    return np.ascontiguousarray(x.T)


def map_elementwise(fn, *args):
    """``fn``'s Python function on every element (NumPy broadcasting; scalar functions
    compute in Python floats). The result dtype is the compiled one: Numba's return type
    of ``fn`` for the tiles' element types, a float result in the tiles' float dtype
    (``language.typing.map_result_dtype``: ``0.01 * x`` of a float32 tile is float32, of
    an int tile float32), the Python float value rounded once to it. A function Numba
    cannot type gets the dtype of its first result's Python kind by the same rule."""
    py = getattr(fn, "py_func", fn)
    tiles = [a for a in args if isinstance(a, np.ndarray)]
    if not tiles:
        return py(*args)
    operands = [_plain(_operand("map", a, "arg")) for a in args]
    out = np.vectorize(py, otypes=[object])(*operands)
    return _cast(out.astype(np.float64) if out.dtype == object and out.size and
                 isinstance(out.reshape(-1)[0], float) else out, _map_dtype(py, args, out))


def _map_dtype(py, args, out):
    from numba.cuda import types as nbtypes
    from numba.cuda.typing.typeof import typeof
    from ..language.typing import _scalar_return_type, map_result_dtype
    tile_types = [wsdt.from_numpy(a.dtype) for a in args if isinstance(a, np.ndarray)]
    if None in tile_types:
        return np.float64
    tile_types = [d.numba for d in tile_types]
    try:
        from numba.cuda.descriptor import cuda_target
        argtys = tuple(wsdt.from_numpy(a.dtype).numba if isinstance(a, np.ndarray)
                       else typeof(a) for a in args)
        ret = _scalar_return_type(cuda_target.typing_context, py, argtys)
    except Exception:                      # not typable by Numba: the first value's kind
        first = out.reshape(-1)[0] if out.size else 0.0
        ret = nbtypes.boolean if isinstance(first, (bool, np.bool_)) else \
            nbtypes.int64 if _is_int(first) else nbtypes.float64
    d = wsdt.from_numba(map_result_dtype(ret, tile_types))
    return d.dtype if d is not None else np.float64


#: op name -> NumPy rule; keys are exactly ``OP_NAMES``.
INTERPRET = {
    "program_id": program_id, "num_programs": num_programs, "cdiv": cdiv,
    "zeros": zeros, "full": full, "load": load, "store": store, "dot": dot,
    "astype": astype, "exp": exp, "exp2": exp2, "log": log, "maximum": maximum,
    "where": where, "max": reduce_max, "sum": reduce_sum, "trans": trans,
    "add": add, "sub": sub, "mul": mul, "truediv": truediv, "neg": neg,
    "map": map_elementwise,
    # issue 15 items 1-2
    "arange": arange, "expand_dims": expand_dims, "broadcast_to": broadcast_to,
    "lt": lt, "le": le, "eq": eq, "ne": ne, "gt": gt, "ge": ge,
    "and_": and_, "or_": or_, "xor": xor, "invert": invert,
    # issue 15 item 3
    "sqrt": sqrt, "rsqrt": rsqrt, "abs": abs_, "minimum": minimum, "sigmoid": sigmoid,
    "tanh": tanh, "gelu": gelu, "fma": fma, "min": reduce_min, "argmax": argmax,
    "argmin": argmin, "squeeze": squeeze, "floordiv": floordiv, "mod": mod,
    "lshift": lshift, "rshift": rshift,
    # issue 16 item 2
    "atomic_add": atomic_add,
}


def _tile_results(rule):
    """``rule`` returning its arrays as :class:`Tile` (the language's promotion)."""
    @functools.wraps(rule)
    def wrapped(*args, **kwargs):
        return as_tile(rule(*args, **kwargs))
    return wrapped


INTERPRET = {name: _tile_results(rule) for name, rule in INTERPRET.items()}
