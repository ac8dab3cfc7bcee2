"""Numba typing of the tile language: ``TYPING`` maps each op name to its rule.

A rule takes the Numba types of the op's arguments (keywords bound by the stub's
signature, missing optionals as ``types.none``) and returns the result type, or raises
:class:`TypingError` with a message naming the argument. Tile shapes must be tuples of
integer literals (constexprs or literal ints): anything else is refused here, before any
pass runs, so every later pass can read shapes off the typemap.
"""
import inspect
import operator

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.typing.templates import AbstractTemplate, AttributeTemplate, infer, infer_getattr, infer_global, bound_function, signature

from . import core
from .dtypes import DOT_INPUTS, from_numba
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
    if isinstance(ty, DTypeType):
        return ty.dtype
    raise TypingError(f"{what} must be a numba_ws dtype such as ws.float16, got {ty}")


def _is_scalar(ty):
    return isinstance(ty, (types.Number, types.Boolean))


def _unify_dtype(a, b):
    da = a.dtype if isinstance(a, TileType) else a
    db = b.dtype if isinstance(b, TileType) else b
    if isinstance(a, TileType) and not isinstance(b, TileType):
        return da  # tile op scalar keeps the tile's dtype
    if isinstance(b, TileType) and not isinstance(a, TileType):
        return db
    return da if da == db else types.float32 if {da, db} <= {types.float16, types.bfloat16, types.float32} else da


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
        return TileType(_unify_dtype(a, b), shape)
    return rule


def _unary_float(name):
    def rule(x):
        if not isinstance(x, TileType):
            raise TypingError(f"ws.{name}(x): x must be a tile, got {x}")
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


def _load(array, offsets, shape):
    if not isinstance(array, types.Array):
        raise TypingError(f"load(array): expected an array argument, got {array}")
    _check_offsets("load", array, offsets)
    tile_shape = literal_shape(shape, "load(shape)")
    if len(tile_shape) != array.ndim:
        raise TypingError(f"load(shape) has {len(tile_shape)} dims but the array has {array.ndim}")
    return TileType(array.dtype, tile_shape)


def _store(array, offsets, tile):
    if not isinstance(array, types.Array):
        raise TypingError(f"store(array): expected an array argument, got {array}")
    _check_offsets("store", array, offsets)
    if not isinstance(tile, TileType):
        raise TypingError(f"store(tile): expected a tile, got {tile}")
    if tile.ndim != array.ndim:
        raise TypingError(f"store(tile) is {tile.ndim}-D but the array is {array.ndim}-D")
    return types.none


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
    out = _elementwise("where")(a, b)
    if out is None or not isinstance(cond, TileType):
        raise TypingError(f"where(cond, a, b): cond must be a tile, got {cond}")
    return TileType(out.dtype, _broadcast(cond.shape, out.shape, "where"))


def _reduce(name):
    def rule(x, axis):
        if not isinstance(x, TileType):
            raise TypingError(f"{name}(x) must be a 1-D or 2-D tile, got {x}")
        ax = literal_int(axis, f"{name}(axis)")
        if ax not in range(x.ndim):
            raise TypingError(f"{name}(axis) must be {' or '.join(map(str, range(x.ndim)))} "
                              f"(x is {x.ndim}-D), got {ax}")
        shape = list(x.shape)
        shape[ax] = 1
        dtype = types.float32 if x.dtype in (types.float16, types.bfloat16) and name == "sum" else x.dtype
        return TileType(dtype, tuple(shape))
    return rule


def _trans(x):
    if not isinstance(x, TileType) or x.ndim != 2:
        raise TypingError(f"trans(x) must be a 2-D tile, got {x}")
    return TileType(x.dtype, x.shape[::-1])


def _neg(x):
    return x if isinstance(x, TileType) else None


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
}

#: Python operators that act on tiles, by op name.
OPERATORS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
             "truediv": operator.truediv, "neg": operator.neg}
#: The stub functions of ops that are called by name (everything but operators/methods).
STUBS = {name: getattr(core, name) for name in core.OP_NAMES if name not in OPERATORS}


def _template_for(stub, rule):
    params = list(inspect.signature(stub).parameters.values())

    class Template(AbstractTemplate):
        key = stub

        def generic(self, args, kws):
            names = [p.name for p in params if p.kind is not p.VAR_POSITIONAL]
            star = len(names) < len(params)
            call = f"ws.{stub.__name__}{inspect.signature(stub)}"
            unknown = sorted(set(kws) - set(names))
            if unknown:
                raise TypingError(f"{call} got an unexpected keyword argument "
                                  f"{unknown[0]!r}")
            twice = sorted(set(kws) & set(names[:len(args)]))
            if twice:
                raise TypingError(f"{call} got multiple values for argument {twice[0]!r}")
            if len(args) > len(names) and not star:
                raise TypingError(f"{call} takes {len(names)} argument"
                                  f"{'' if len(names) == 1 else 's'}, got {len(args)}")
            bound = list(args)
            for p in params[len(args):]:
                if p.name in kws:
                    bound.append(kws[p.name])
                elif p.default is not inspect.Parameter.empty:
                    bound.append(types.none)
                else:
                    raise TypingError(f"ws.{stub.__name__}() missing argument {p.name!r}")
            ret = rule(self.context, *bound) if getattr(rule, "needs_context", False) \
                else rule(*bound)
            if ret is None:
                return None
            return signature(ret, *bound)

    Template.__name__ = f"WS_{stub.__name__}_Template"
    return Template


def _operator_template(op, rule):
    class Template(AbstractTemplate):
        key = op

        def generic(self, args, kws):
            if not any(isinstance(a, TileType) for a in args):
                return None
            ret = rule(*args)
            return None if ret is None else signature(ret, *args)

    return Template


for _name, _stub in STUBS.items():
    infer_global(_stub, types.Function(_template_for(_stub, TYPING[_name])))
for _name, _op in OPERATORS.items():
    infer_global(_op)(_operator_template(_op, TYPING[_name]))
    if _name != "neg":
        _iop = getattr(operator, "i" + _name)
        infer_global(_iop)(_operator_template(_iop, TYPING[_name]))


@infer_getattr
class TileAttributes(AttributeTemplate):
    key = TileType

    def resolve_shape(self, tile):
        return types.UniTuple(types.int64, tile.ndim)

    def resolve_dtype(self, tile):
        return DTypeType(from_numba(tile.dtype).name)

    @bound_function("tile.astype")
    def resolve_astype(self, tile, args, kws):
        dtype = args[0] if args else kws.get("dtype")
        return signature(_astype(tile, dtype), dtype)
