"""NumPy rules of the tile language: the semantic reference for the compiled kernels.

:data:`INTERPRET` maps every name of :data:`numba_ws.language.core.OP_NAMES` to a function
taking the same arguments as the op's stub. Tiles are plain ``numpy.ndarray`` values
(always fresh arrays, never views of a kernel argument); scalars are Python numbers.

Semantics decided here (the compiled path must match them):

- ``load`` reads 0 outside the array (negative offsets included); ``store`` drops
  out-of-bounds elements and casts with round-to-nearest-even (bf16 through ml_dtypes).
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
import numbers

import numpy as np

from ..errors import WSUsageError
from ..language import core
from ..language import dtypes as wsdt

_FLOATS = ("float16", "bfloat16", "float32", "float64")
_LOW_PRECISION = ("float16", "bfloat16")


def _quiet():
    """Floating-point exceptions give inf/NaN silently, as on the GPU."""
    return np.errstate(all="ignore")



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
            f"ws.{op}(): offsets has {len(offsets)} entries but the array is {ndim}-D")
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
        array[win[0]] = tile[win[1]].astype(array.dtype)


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
    return _tile("astype", tile, "tile").astype(_dtype("astype", dtype).dtype)


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
                return fn(x.astype(np.float32)).astype(x.dtype)
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


def _binary(op, fn):
    def rule(a, b):
        a, b = _operand(op, a, "a"), _operand(op, b, "b")
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
    return np.where(cond, _operand("where", a, "a"), _operand("where", b, "b"))


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
    return out.astype(tiles[0].dtype)


#: op name -> NumPy rule; keys are exactly ``OP_NAMES``.
INTERPRET = {
    "program_id": program_id, "num_programs": num_programs, "cdiv": cdiv,
    "zeros": zeros, "full": full, "load": load, "store": store, "dot": dot,
    "astype": astype, "exp": exp, "exp2": exp2, "log": log, "maximum": maximum,
    "where": where, "max": reduce_max, "sum": reduce_sum, "trans": trans,
    "add": add, "sub": sub, "mul": mul, "truediv": truediv, "neg": neg,
    "map": map_elementwise,
}
