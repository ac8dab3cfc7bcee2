"""The tile language's typing registered with numba-cuda: one ``AbstractTemplate`` per
op stub and per Python operator on tiles (each calling its rule in
:data:`numba_ws.language.typing.TYPING`), tile attributes (``shape``, ``dtype``,
``astype``) and tile indexing (``x[:, None]`` views; any other index is an error).
Importing this module registers them (numba_ws.compiler does, before any compile).
"""
import inspect
import operator

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.typing.templates import (AbstractTemplate, AttributeTemplate,
                                         bound_function, infer, infer_getattr,
                                         infer_global, signature)

from .dtypes import from_numba
from .types import DTypeType, TileType
from .typing import OPERATORS, STUBS, TYPING, _astype, view_shape

#: operators without an in-place form
_NO_INPLACE = ("neg", "invert", "lt", "le", "eq", "ne", "gt", "ge")


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
    if _name not in _NO_INPLACE:
        _iop = getattr(operator, "i" + _name.rstrip("_"))
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


@infer
class TileStaticGetItem(AbstractTemplate):
    """``x[:, None]`` / ``x[None, :]`` of a 1-D tile (issue 15): the anchors pass rewrites
    them into ``ws.expand_dims`` before any other pass sees them."""
    key = "static_getitem"

    def generic(self, args, kws):
        tile, index = args
        if not isinstance(tile, TileType):
            return None
        shape = view_shape(tile, index)
        if shape is None:
            return None     # numba falls back to operator.getitem: TileIndex says why
        return signature(TileType(tile.dtype, shape), *args)


@infer_global(operator.getitem)
class TileIndex(AbstractTemplate):
    """Any other index of a tile is an error naming the supported views."""

    def generic(self, args, kws):
        if len(args) == 2 and isinstance(args[0], TileType):
            raise TypingError(f"a tile can only be indexed as x[:, None] or x[None, :] (x "
                              f"1-D: a (N, 1) or (1, N) view), got {args[0]}[{args[1]}]; "
                              "tiles hold no addressable elements (reduce them, or store "
                              "them and index the array)")
        return None
