"""Numba typing of the tile language: ``TYPING`` maps each op name to its rule.

A rule takes the Numba types of the op's arguments (keywords bound by the stub's
signature, missing optionals as ``types.none``) and returns the result type, or raises
:class:`TypingError` with a message naming the argument. Tile shapes must be tuples of
integer literals (constexprs or literal ints): anything else is refused here, before any
pass runs, so every later pass can read shapes off the typemap. numba_ws.language.templates
registers the rules with numba-cuda.
"""
import operator

import numpy as np

from numba.cuda import types
from numba.cuda.core.errors import TypingError

from . import core
from .promotion import SYMBOL, binary_result, is_float_name, is_int_name, promote
from .dtypes import DOT_INPUTS, from_name, from_numba, from_numpy
from .types import TileType, DTypeType

_INT = types.int64


def literal_shape(ty, what):
    """Shape tuple from a tuple type of positive integer literals. The error starts
    with what a shape must be (naming ``what``), then says which dimension is wrong."""
    rule = (f"{what} must be a tuple of 1 or 2 positive compile-time constants "
            "(ws.constexpr parameters or literal ints)")
    if not isinstance(ty, types.BaseTuple):
        raise TypingError(f"{rule}, got {ty}")
    dims = list(ty.types) if hasattr(ty, "types") else [ty.dtype] * ty.count
    if not 1 <= len(dims) <= 2:
        raise TypingError(f"{rule}: got {len(dims)} dimensions, {ty}; a tile is 1-D or 2-D")
    vals = []
    for i, t in enumerate(dims):
        if isinstance(t, types.IntegerLiteral):
            if t.literal_value <= 0:
                raise TypingError(f"{rule}: dimension {i} is {t.literal_value}; a block "
                                  "size must be at least 1")
            vals.append(t.literal_value)
        elif isinstance(t, types.Integer):
            raise TypingError(
                f"{rule}: dimension {i} is a runtime {t}, not known at compile time; make "
                "the block size a ws.constexpr parameter (arithmetic such as BM * 2 "
                "gives a runtime int: pass the product as its own constexpr)")
        else:
            raise TypingError(f"{rule}: dimension {i} is {t}, not an int")
    return tuple(vals)


def literal_int(ty, what):
    if isinstance(ty, types.IntegerLiteral):
        return ty.literal_value
    raise TypingError(f"{what} must be a compile-time constant int (a literal or a "
                      f"ws.constexpr), got a runtime {ty}")


def _dtype(ty, what):
    """The Numba scalar type of a dtype argument: ``ws.float16``-like, or an array's
    ``.dtype`` (``acc.astype(c.dtype)``) of a supported dtype."""
    if isinstance(ty, DTypeType):
        return ty.dtype
    if isinstance(ty, types.DType) and from_numba(ty.dtype) is not None:
        return ty.dtype
    raise TypingError(f"{what} must be a numba_ws dtype such as ws.float16 (or an array's "
                      f".dtype), got {ty}")


def _is_scalar(ty):
    return isinstance(ty, (types.Number, types.Boolean))


# -- dtype promotion: language/promotion.py; here its view of Numba types ------------------

def operand_kind(ty):
    """:func:`promote`'s description of a Numba operand type: a tile's (TileType or
    FragType) dtype name, ``("scalar", kind)`` for a scalar, or None for anything else."""
    dtype = getattr(ty, "dtype", None)
    if isinstance(ty, types.Type) and hasattr(ty, "shape") and dtype is not None \
            and not isinstance(ty, (types.Array, types.BaseTuple)):
        d = from_numba(dtype)
        return d.name if d is not None else None
    if isinstance(ty, types.Boolean):
        return ("scalar", "bool")
    if isinstance(ty, types.Integer):
        return ("scalar", "int")
    if isinstance(ty, types.Float):
        return ("scalar", "float")
    return None


def _unify_dtype(a, b, op="add"):
    """Numba dtype of ``op`` on tile / scalar types ``a`` and ``b`` (:func:`binary_result`);
    a TypingError names the operator."""
    try:
        name = binary_result(op, operand_kind(a), operand_kind(b))
    except ValueError as e:
        raise TypingError(f"{SYMBOL.get(op, op)}: {e}") from None
    return None if name is None else from_name(name).numba


def _broadcast(sa, sb, what):
    """NumPy broadcasting: shapes aligned on the right, size-1 dims stretch."""
    rank = max(len(sa), len(sb))
    pa = (1,) * (rank - len(sa)) + tuple(sa)
    pb = (1,) * (rank - len(sb)) + tuple(sb)
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise TypingError(f"{what}: cannot broadcast shapes {sa} and {sb}")
        out.append(max(x, y))
    return tuple(out)


def _elementwise(name):
    def rule(a, b):
        if not isinstance(a, TileType) and not isinstance(b, TileType):
            return None  # not ours: leave scalar arithmetic to Numba
        if not all(isinstance(t, TileType) or _is_scalar(t) for t in (a, b)):
            return None
        sa = a.shape if isinstance(a, TileType) else None
        sb = b.shape if isinstance(b, TileType) else None
        shape = _broadcast(sa, sb, name) if sa and sb else (sa or sb)
        return TileType(_unify_dtype(a, b, name), shape)
    return rule


def _unary_float(name):
    def rule(x):
        if not isinstance(x, TileType):
            raise TypingError(f"ws.{name}(x): x must be a tile, got {x}")
        if not is_float_name(operand_kind(x)):
            raise TypingError(f"ws.{name}(x): x must be a floating-point tile, got {x} "
                              "(convert it first: x.astype(ws.float32))")
        return x
    return rule


def _grid_axis(name):
    def rule(axis):
        ax = literal_int(axis, f"{name}(axis)")
        if ax not in (0, 1, 2):
            raise TypingError(f"{name}(axis): axis must be 0, 1 or 2 (a grid has three "
                              f"axes), got {ax}")
        return _INT
    return rule


def _cdiv(a, b):
    if isinstance(a, types.Integer) and isinstance(b, types.Integer):
        return _INT
    raise TypingError(f"cdiv(a, b) takes two ints, got {a}, {b}")


def _zeros(shape, dtype):
    return TileType(_dtype(dtype, "zeros(dtype)"), literal_shape(shape, "zeros(shape)"))


def _full(shape, value, dtype):
    if not _is_scalar(value):
        raise TypingError(f"full(value) must be a scalar, got {value}")
    return TileType(_dtype(dtype, "full(dtype)"), literal_shape(shape, "full(shape)"))


def _check_offsets(op, array, offsets):
    """One offset per array dimension (checked before the shape: a wrong offsets tuple
    is the offsets' fault, whatever the shape)."""
    n = array.ndim
    example = "(o,)" if n == 1 else "(" + ", ".join(f"o{i}" for i in range(n)) + ")"
    if not isinstance(offsets, types.BaseTuple):
        raise TypingError(f"{op}(offsets) must be a tuple of {n} ints, one per dimension of "
                          f"the {n}-D array, got {offsets}: write {example}")
    if len(offsets) != n:
        entries = "1 entry" if len(offsets) == 1 else f"{len(offsets)} entries"
        raise TypingError(f"{op}(offsets) has {entries} but the array is "
                          f"{n}-D: expected a tuple of {n} ints {example}, got {offsets}")


def _load(array, offsets, shape, mask=types.none, other=types.none):
    if not isinstance(array, types.Array):
        raise TypingError(f"load(array): expected an array argument, got {array}")
    _check_offsets("load", array, offsets)
    tile_shape = literal_shape(shape, "load(shape)")
    if len(tile_shape) != array.ndim:
        raise TypingError(f"load(shape) has {len(tile_shape)} dims but the array has {array.ndim}")
    check_mask("load", mask, tile_shape)
    if not _absent(other) and not _is_scalar(other):
        raise TypingError(f"load(other) must be a scalar (such as -math.inf, math.nan or "
                          f"0.5) that fills the masked and out-of-bounds elements, got {other}")
    return TileType(array.dtype, tile_shape)


def _check_write(op, array, offsets, tile, mask):
    """The checks ``store`` and ``atomic_add`` share (``array`` already an array)."""
    _check_offsets(op, array, offsets)
    if not isinstance(tile, TileType):
        raise TypingError(f"{op}(tile): expected a tile, got {tile}")
    if tile.ndim != array.ndim:
        raise TypingError(f"{op}(tile) is {tile.ndim}-D but the array is {array.ndim}-D")
    check_mask(op, mask, tile.shape)
    return types.none


def _store(array, offsets, tile, mask=types.none):
    if not isinstance(array, types.Array):
        raise TypingError(f"store(array): expected an array argument, got {array}")
    return _check_write("store", array, offsets, tile, mask)


#: Element types ``atomic_add`` accepts (what ``red.global.add`` adds).
ATOMIC_ADD_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")


def _atomic_add(array, offsets, tile, mask=types.none):
    if not isinstance(array, types.Array):
        raise TypingError(f"atomic_add(array): expected an array argument, got {array}")
    d = from_numba(array.dtype)
    if d is None or d.name not in ATOMIC_ADD_DTYPES:
        raise TypingError(f"atomic_add(array) of {array.dtype}: expected one of "
                          f"{', '.join(ATOMIC_ADD_DTYPES)}")
    return _check_write("atomic_add", array, offsets, tile, mask)


def _dot(a, b, acc):
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, TileType) or t.ndim != 2:
            raise TypingError(f"dot({name}) must be a 2-D tile, got {t}")
        d = from_numba(t.dtype)
        if d is None or d.name not in DOT_INPUTS:
            raise TypingError(f"dot({name}) dtype must be one of {DOT_INPUTS}, got {t.dtype}")
    if a.dtype != b.dtype:
        raise TypingError(f"dot(a, b) need the same dtype, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise TypingError(f"dot(a, b): inner dimensions differ, {a.shape} @ {b.shape}")
    out = TileType(types.float32, (a.shape[0], b.shape[1]))
    if acc not in (types.none, None) and not isinstance(acc, types.Omitted):
        if not isinstance(acc, TileType) or acc.shape != out.shape or acc.dtype != types.float32:
            raise TypingError(f"dot(acc) must be a float32 tile of shape {out.shape}, got {acc}")
    return out


def _astype(tile, dtype):
    if not isinstance(tile, TileType):
        raise TypingError(f"astype(tile) expects a tile, got {tile}")
    return TileType(_dtype(dtype, "astype(dtype)"), tile.shape)


def _maximum(a, b):
    out = _elementwise("maximum")(a, b)
    if out is None:
        raise TypingError(f"maximum(a, b) needs a tile operand, got {a}, {b}")
    return out


def _where(cond, a, b):
    if not isinstance(cond, TileType) or cond.dtype != types.boolean:
        raise TypingError(f"where(cond, a, b): cond must be a boolean tile (a comparison "
                          f"such as x > 0), got {cond}")
    for name, t in (("a", a), ("b", b)):
        if not (isinstance(t, TileType) or _is_scalar(t)):
            raise TypingError(f"where({name}) must be a tile or a scalar, got {t}")
    if isinstance(a, TileType) or isinstance(b, TileType):
        out = _elementwise("where")(a, b)
        dtype, shape = out.dtype, out.shape
    else:
        dtype, shape = _promote(types.unliteral(a), types.unliteral(b)), cond.shape
    return TileType(dtype, _broadcast(cond.shape, shape, "where"))


def keepdims_flag(keepdims, what):
    """The Python bool of a reduction's ``keepdims`` (omitted: False); a TypingError
    unless it is a compile-time constant."""
    if keepdims in (None, types.none) or isinstance(keepdims, (types.NoneType, types.Omitted)):
        return False
    if isinstance(keepdims, types.BooleanLiteral):
        return keepdims.literal_value
    if isinstance(keepdims, types.IntegerLiteral) and keepdims.literal_value in (0, 1):
        return bool(keepdims.literal_value)
    raise TypingError(f"{what}(keepdims) must be a compile-time constant True or False, "
                      f"got {keepdims}")


def reduction_axis(x, axis, what, allow_none=True):
    """The int axis of a reduction of tile ``x``, or None for ``axis=None`` (every
    element)."""
    if axis in (None, types.none) or isinstance(axis, (types.NoneType, types.Omitted)):
        if not allow_none:
            raise TypingError(f"{what}(axis): give an axis (axis=None, a flat index, is not "
                              "supported)")
        return None
    ax = literal_int(axis, f"{what}(axis)")
    if ax not in range(x.ndim):
        raise TypingError(f"{what}(axis) must be {' or '.join(map(str, range(x.ndim)))} "
                          f"(x is {x.ndim}-D), got {ax}")
    return ax


def reduced_shape(shape, axis, keepdims):
    """The shape of a reduction's result (NumPy's): ``axis`` dropped, or kept with size 1
    with ``keepdims``; ``axis`` None reduces every axis; () means a scalar."""
    axes = range(len(shape)) if axis is None else (axis,)
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _reduce(name, allow_none=True):
    def rule(x, axis, keepdims=None):
        if not isinstance(x, TileType):
            raise TypingError(f"{name}(x) must be a 1-D or 2-D tile, got {x}")
        ax = reduction_axis(x, axis, name, allow_none)
        shape = reduced_shape(x.shape, ax, keepdims_flag(keepdims, name))
        dtype = types.float32 if x.dtype in (types.float16, types.bfloat16) and name == "sum" else x.dtype
        return TileType(dtype, shape) if shape else dtype
    return rule


def _squeeze(x, axis):
    if not isinstance(x, TileType):
        raise TypingError(f"squeeze(x) must be a tile, got {x}")
    ax = literal_int(axis, "squeeze(axis)")
    if ax not in range(x.ndim) or x.shape[ax] != 1:
        raise TypingError(f"squeeze(x, {ax}): axis {ax} of a {x.shape} tile is not of size 1")
    shape = tuple(n for d, n in enumerate(x.shape) if d != ax)
    return TileType(x.dtype, shape) if shape else x.dtype


# -- issue 15 item 3: more math, min / argmax / argmin, integer operators ---------------

def _numeric_tile(op, x, arg="x"):
    """``x`` must be a tile of a number dtype (not bool)."""
    if not isinstance(x, TileType):
        raise TypingError(f"ws.{op}({arg}) must be a tile, got {x}")
    kind = operand_kind(x)
    if not (is_float_name(kind) or is_int_name(kind)):
        raise TypingError(f"ws.{op}({arg}) must be a tile of numbers, got {x}")
    return x


def _abs(x):
    return _numeric_tile("abs", x)


def _minimum(a, b):
    out = _elementwise("minimum")(a, b)
    if out is None:
        raise TypingError(f"minimum(a, b) needs a tile operand, got {a}, {b}")
    return out


def _fma(a, b, c):
    """fma(a, b, c): float tiles / scalars broadcast together; at least one tile."""
    args = (a, b, c)
    if not any(isinstance(t, TileType) for t in args):
        raise TypingError(f"fma(a, b, c) needs a tile operand, got {a}, {b}, {c}")
    kinds = []
    for name, t in zip("abc", args):
        kind = operand_kind(t) if isinstance(t, TileType) or _is_scalar(t) else None
        if kind is None or kind == "bool" or is_int_name(kind):
            raise TypingError(f"fma({name}) must be a float tile or a scalar, got {t} (fma "
                              "rounds once: convert int tiles with astype first)")
        kinds.append(kind)
    tiles = [k for k in kinds if not isinstance(k, tuple)]
    name = tiles[0]
    for k in tiles[1:]:
        name = promote(name, k)
    shape = None
    for t in args:
        if isinstance(t, TileType):
            shape = t.shape if shape is None else _broadcast(shape, t.shape, "fma")
    return TileType(from_name(name).numba, shape)


def _min_reduce(x, axis, keepdims=None):
    _numeric_tile("min", x)
    return _reduce("min")(x, axis, keepdims)


def _arg_reduce(name):
    def rule(x, axis, keepdims=None):
        _numeric_tile(name, x)
        out = _reduce(name, allow_none=False)(x, axis, keepdims)
        return TileType(types.int32, out.shape) if isinstance(out, TileType) else types.int32
    return rule


def _int_operator(name):
    """``// % << >>`` on tiles: the promoted dtype (floats too for ``//`` and ``%``, with
    NumPy's floor semantics); shifts need integer operands."""
    symbol = SYMBOL[name]

    def rule(a, b):
        out = _elementwise(name)(a, b)
        if out is not None and operand_kind(out) == "bool":
            raise TypingError(f"{symbol} of boolean tiles: convert them first "
                              "(x.astype(ws.int32))")
        return out
    rule.__name__ = name
    return rule


def _trans(x):
    if not isinstance(x, TileType) or x.ndim != 2:
        raise TypingError(f"trans(x) must be a 2-D tile, got {x}")
    return TileType(x.dtype, x.shape[::-1])


def _neg(x):
    return x if isinstance(x, TileType) else None


# -- issue 15 items 1-2: index tiles, views, comparisons, boolean tiles, masks -----------

def _absent(ty):
    return ty is None or isinstance(ty, (types.NoneType, types.Omitted))


def _promote(da, db):
    """NumPy's promotion of two element types (bool < ints < floats); ``da`` when
    either has no ws dtype or the promotion does not."""
    pa, pb = from_numba(da), from_numba(db)
    if pa is None or pb is None:
        return da
    d = from_numpy(np.promote_types(pa.dtype, pb.dtype))
    return d.numba if d is not None else da


def _operand_dtype(t):
    return t.dtype if isinstance(t, TileType) else types.unliteral(t)


def compare_dtype(a, b):
    """The element type a comparison of ``a`` and ``b`` (tiles or scalars) is made in,
    NumPy 2's (the interpreter compares NumPy arrays), so comparisons are exact: two
    tiles by ``np.promote_types`` (int32 with float32: float64); a float tile and a
    scalar in the tile's dtype (the scalar converted: a weak scalar); an int tile and
    an int scalar in the wider type (``rows < n`` with an int64 ``n``); an int tile
    and a float scalar in float64."""
    da, db = _operand_dtype(a), _operand_dtype(b)
    ta, tb = isinstance(a, TileType), isinstance(b, TileType)
    if ta and tb:
        return _promote(da, db)
    tile, scalar = (da, db) if ta else (db, da)
    float_tile = tile in (types.float16, types.bfloat16) or isinstance(tile, types.Float)
    if isinstance(scalar, types.Float) and not float_tile:
        return types.float64
    if float_tile:
        return tile
    return _promote(tile, scalar)


def _compare(name, symbol):
    def rule(a, b):
        if not isinstance(a, TileType) and not isinstance(b, TileType):
            return None
        for t in (a, b):
            if not (isinstance(t, TileType) or _is_scalar(t)):
                raise TypingError(f"tile comparison {symbol}: cannot compare a tile with {t}")
        sa = a.shape if isinstance(a, TileType) else None
        sb = b.shape if isinstance(b, TileType) else None
        shape = _broadcast(sa, sb, f"comparison {symbol}") if sa and sb else (sa or sb)
        compare_dtype(a, b)
        return TileType(types.boolean, shape)
    rule.__name__ = name
    return rule


def _is_bits(ty):
    return isinstance(ty, (types.Integer, types.Boolean))


def bitwise_dtype(a, b, op="and_"):
    """Result type of ``& | ^`` (:func:`promote`: booleans stay boolean, integers
    promote, a scalar takes the tile's type); None if an operand is not boolean or
    integer."""
    if not (_is_bits(_operand_dtype(a)) and _is_bits(_operand_dtype(b))):
        return None
    return _unify_dtype(a, b, op)


def _bitwise(name, symbol):
    def rule(a, b):
        if not isinstance(a, TileType) and not isinstance(b, TileType):
            return None
        dtype = bitwise_dtype(a, b, name)
        if dtype is None:
            raise TypingError(f"{symbol} needs boolean or integer tiles (and scalars), got "
                              f"{a} {symbol} {b}; combine comparisons: (x > 0) {symbol} "
                              "(x < 1)")
        sa = a.shape if isinstance(a, TileType) else None
        sb = b.shape if isinstance(b, TileType) else None
        shape = _broadcast(sa, sb, symbol) if sa and sb else (sa or sb)
        return TileType(dtype, shape)
    rule.__name__ = name
    return rule


def _invert(x):
    if not isinstance(x, TileType):
        return None
    if not _is_bits(x.dtype):
        raise TypingError(f"~ needs a boolean or integer tile, got {x}")
    return x


def _arange(start, end):
    lo = literal_int(start, "arange(start)")
    hi = literal_int(end, "arange(end)")
    if hi <= lo:
        raise TypingError(f"arange(start, end) needs end > start (a tile has at least one "
                          f"element), got arange({lo}, {hi})")
    if lo < -2 ** 31 or hi > 2 ** 31:
        raise TypingError(f"arange({lo}, {hi}): the values must fit int32")
    return TileType(types.int32, (hi - lo,))


def view_shape(x, index):
    """Shape of ``x[index]`` for the views a tile supports: ``x[:, None]`` and
    ``x[None, :]`` (or ``x[None]``) of a 1-D tile; None for any other index."""
    full = slice(None, None, None)
    if x.ndim != 1:
        return None
    if index == (full, None):
        return (x.shape[0], 1)
    if index in ((None, full), None, (None,)):
        return (1, x.shape[0])
    return None


def _expand_dims(x, axis):
    if not isinstance(x, TileType) or x.ndim != 1:
        raise TypingError(f"expand_dims(x) must be a 1-D tile (a tile has at most 2 "
                          f"dims), got {x}")
    ax = literal_int(axis, "expand_dims(axis)")
    if ax not in (0, 1, -1):
        raise TypingError(f"expand_dims(axis) must be 0, 1 or -1 for a 1-D tile, got {ax}")
    return TileType(x.dtype, (1, x.shape[0]) if ax == 0 else (x.shape[0], 1))


def _broadcast_to(x, shape):
    if not isinstance(x, TileType):
        raise TypingError(f"broadcast_to(x) must be a tile, got {x} (ws.full(shape, value, "
                          "dtype) makes a tile of one scalar)")
    dims = literal_shape(shape, "broadcast_to(shape)")
    padded = (1,) * (len(dims) - x.ndim) + x.shape
    if len(dims) < x.ndim or any(a not in (1, b) for a, b in zip(padded, dims)):
        raise TypingError(f"broadcast_to: a {x.shape} tile does not broadcast to {dims} "
                          "(each dim of x must be 1 or the target's, aligned on the right)")
    return TileType(x.dtype, dims)


def check_mask(op, mask, shape):
    """``mask`` of ``ws.load`` / ``ws.store``: absent, or a boolean tile broadcastable to
    the tile ``shape``."""
    if _absent(mask):
        return
    if not isinstance(mask, TileType) or mask.dtype != types.boolean:
        raise TypingError(f"{op}(mask) must be a boolean tile (a comparison such as "
                          f"cols[None, :] < N), got {mask}")
    if len(mask.shape) > len(shape) or _broadcast(mask.shape, shape, f"{op}(mask)") != tuple(shape):
        raise TypingError(f"{op}(mask) has shape {mask.shape}, which does not broadcast to "
                          f"the tile's shape {tuple(shape)}")


_MAP_RETURN = {}


def _scalar_return_type(context, py_func, argtys):
    """Return type of ``py_func`` for scalar ``argtys``, by Numba's type inference on its
    Python code (typing the CUDA dispatcher would compile it for the current device, and
    CPU-only compiles have none)."""
    key = (py_func, argtys)
    if key not in _MAP_RETURN:
        from numba.cuda.compiler import run_frontend
        from numba.cuda.core.typed_passes import type_inference_stage
        from numba.cuda.descriptor import cuda_target
        _, restype, _, _ = type_inference_stage(
            context, cuda_target.target_context, run_frontend(py_func), argtys, None)
        _MAP_RETURN[key] = restype
    return _MAP_RETURN[key]


def map_result_dtype(ret, tile_dtypes):
    """The element type of ``ws.map(fn, tiles...)`` whose scalar function returns ``ret``
    (Numba's type of it for the tiles' element types): a float result takes the tiles'
    float dtype, as a float scalar combines with them (:func:`promote`; int tiles give
    float32), so ``0.01 * x`` in a device function keeps a float32 tile float32 although
    Numba computes it in float64 (the float64 value is rounded once to the tile's dtype).
    Other results (int, bool) are Numba's type."""
    if not tile_dtypes or not (isinstance(ret, types.Float) or ret == types.bfloat16):
        return ret
    name = ("scalar", "float")
    for dtype in tile_dtypes:
        d = from_numba(dtype)
        if d is None:
            return ret
        name = promote(name, d.name)
    return from_name(name).numba


def _map(context, fn, *args):
    """ws.map(f, *args): f's scalar signature on the element types, applied over tiles."""
    from .types import FragType
    if not isinstance(fn, types.Dispatcher):
        raise TypingError(f"ws.map(fn): fn must be a @numba.cuda.jit(device=True) "
                          f"function, got {fn}")
    tiles = [a for a in args if isinstance(a, (TileType, FragType))]
    scalars = [a.dtype if isinstance(a, (TileType, FragType)) else a for a in args]
    ret = _scalar_return_type(context, fn.dispatcher.py_func, tuple(scalars))
    if not tiles:
        return ret
    ret = map_result_dtype(ret, [t.dtype for t in tiles])
    if any(isinstance(t, FragType) for t in tiles):
        from ..codegen.frag_math import broadcast_type
        full = tiles[0]
        for t in tiles[1:]:
            full = broadcast_type(FragType(ret, full.shape, full.layout),
                                  FragType(ret, t.shape, t.layout))
            if full is None:
                raise TypingError(f"ws.map on the GPU: tiles {[str(x) for x in tiles]} do not "
                                  "share a layout (a layouts pass bug)")
        return FragType(ret, full.shape, full.layout)
    shape = tiles[0].shape
    for t in tiles[1:]:
        shape = _broadcast(shape, t.shape, "ws.map")
    return TileType(ret, shape)


_map.needs_context = True


TYPING = {
    "program_id": _grid_axis("program_id"),
    "num_programs": _grid_axis("num_programs"),
    "cdiv": _cdiv,
    "zeros": _zeros,
    "full": _full,
    "load": _load,
    "store": _store,
    "atomic_add": _atomic_add,
    "dot": _dot,
    "astype": _astype,
    "exp": _unary_float("exp"),
    "exp2": _unary_float("exp2"),
    "log": _unary_float("log"),
    "maximum": _maximum,
    "where": _where,
    "max": _reduce("max"),
    "sum": _reduce("sum"),
    "trans": _trans,
    "add": _elementwise("add"),
    "sub": _elementwise("sub"),
    "mul": _elementwise("mul"),
    "truediv": _elementwise("truediv"),
    "neg": _neg,
    "map": _map,
    # issue 15 items 1-2
    "arange": _arange,
    "expand_dims": _expand_dims,
    "broadcast_to": _broadcast_to,
    "lt": _compare("lt", "<"), "le": _compare("le", "<="), "eq": _compare("eq", "=="),
    "ne": _compare("ne", "!="), "gt": _compare("gt", ">"), "ge": _compare("ge", ">="),
    "and_": _bitwise("and_", "&"), "or_": _bitwise("or_", "|"),
    "xor": _bitwise("xor", "^"), "invert": _invert,
    # issue 15 item 3
    "sqrt": _unary_float("sqrt"), "rsqrt": _unary_float("rsqrt"), "abs": _abs,
    "minimum": _minimum, "sigmoid": _unary_float("sigmoid"), "tanh": _unary_float("tanh"),
    "gelu": _unary_float("gelu"), "fma": _fma, "min": _min_reduce,
    "argmax": _arg_reduce("argmax"), "argmin": _arg_reduce("argmin"),
    # issue 15 item 4
    "squeeze": _squeeze,
    "floordiv": _int_operator("floordiv"), "mod": _int_operator("mod"),
    "lshift": _int_operator("lshift"), "rshift": _int_operator("rshift"),
}

#: Python operators that act on tiles, by op name.
OPERATORS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
             "truediv": operator.truediv, "neg": operator.neg}
#: issue 15 items 1-2: comparisons and bitwise operators on tiles
OPERATORS.update({name: getattr(operator, name) for name in (
    "lt", "le", "eq", "ne", "gt", "ge", "and_", "or_", "xor", "invert")})
#: issue 15 item 3: floor division, remainder and shifts of tiles
OPERATORS.update({"floordiv": operator.floordiv, "mod": operator.mod,
                  "lshift": operator.lshift, "rshift": operator.rshift})
#: The stub functions of ops that are called by name (everything but operators/methods).
STUBS = {name: getattr(core, name) for name in core.OP_NAMES if name not in OPERATORS}
