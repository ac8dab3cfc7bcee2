"""Pass 1 — anchors (seed: 异步任务).

Every ``ws.load`` is a producer anchor (task 0); every ``ws.dot`` and ``ws.store`` is a
consumer anchor (task 1 before data partitioning). Records ``plan.anchors`` and snapshots
the original IR so that ``explain()`` and later passes can refer to it.

First, the forms of the language the later passes do not model are written out as ops
(issue 15; the function is then typed again), so that masks cost nothing where they are
not used -- unmasked loads and stores are left exactly as they are:

- ``x[:, None]`` / ``x[None, :]`` of a tile -> ``ws.expand_dims(x, 1)`` / ``(x, 0)``;
- ``x.dtype`` / ``x.shape`` of a tile -> the ws dtype / the shape tuple, constants (the
  program's shape: data partitioning later gives each consumer group a part of it);
- ``x = ws.load(a, offs, shape, mask=m, other=v)`` -> ``raw = ws.load(a, offs, shape)``
  (the anchor: the producer copies the whole box, zero-filled past the edges) then, in
  the consumers, ``x = ws.where(keep, raw, v)`` with ``keep = in_bounds & m`` (``v``
  replaced by ``ws.full(shape, v, a.dtype)`` where the promotion of ``where`` would not
  give the array's dtype: an int array with ``other=-inf``);
  ``in_bounds`` is ``0 <= o_d + ws.arange(0, s_d) < a.shape[d]`` per dim (row and
  column vectors combined with ``&``). With ``other`` absent or the literal 0 (what the
  zero fill gives), ``keep = m`` and no bounds are computed;
- ``ws.store(a, offs, t, mask=m)`` -> ``ws.store(a, offs, t, m)`` (the mask as the 4th
  argument; the layouts pass holds it in t's layout, lowering predicates each store);
- reductions (NumPy's semantics, issue 15 item 4) -> reductions along one int axis that
  keep it, ``ws.max(x, axis, True)``, then ``ws.squeeze``: ``ws.max(x, 1)`` of a (M, N)
  tile -> ``ws.squeeze(ws.max(x, 1, True), 1)``; ``axis=None`` reduces axis 1 then axis
  0 (each keeping it) and squeezes to a scalar. Later passes see only that form.
"""
import math
import operator

from numba.cuda import types
from numba.cuda.core import ir

from ..language import core
from ..language.dtypes import from_numba
from ..language.types import TileType
from ..language.typing import _unify_dtype as unify_dtype, view_shape
from .base import WSPass, ws_pass
from .ir_build import StmtBuilder
from .ir_tools import ANCHOR_TASK, STORE_OPS, tile_op

_LOAD_PARAMS = ("array", "offsets", "shape", "mask", "other")
_STORE_PARAMS = ("array", "offsets", "tile", "mask")
_REDUCE_PARAMS = ("x", "axis", "keepdims")
#: reductions (their stubs take x, axis, keepdims)
_REDUCTIONS = ("max", "sum", "min", "argmax", "argmin")


class _Desugar:
    """The rewrites of the module docstring, on ``state.func_ir`` (typed)."""

    def __init__(self, pass_, state):
        self.p, self.fir, self.typemap = pass_, state.func_ir, state.typemap

    def run(self):
        changed = False
        for block in self.fir.blocks.values():
            body = []
            for stmt in block.body:
                new = self.rewrite(block, stmt)
                changed |= new is not None
                body.extend([stmt] if new is None else new)
            block.body = body
        return changed

    def rewrite(self, block, stmt):
        if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr)):
            return None
        v = stmt.value
        if v.op == "getattr" and v.attr in ("dtype", "shape") \
                and isinstance(self.typemap.get(v.value.name), TileType):
            tile = self.typemap[v.value.name]
            if v.attr == "shape":
                return [ir.Assign(ir.Const(tile.shape, stmt.loc), stmt.target, stmt.loc)]
            dtype = from_numba(tile.dtype)
            return [ir.Assign(ir.Global(dtype.name, dtype, stmt.loc), stmt.target, stmt.loc)]
        if v.op == "static_getitem" and isinstance(self.typemap.get(v.value.name), TileType):
            shape = view_shape(self.typemap[v.value.name], v.index)
            b = StmtBuilder(block.scope, stmt.loc, "view")
            b.call(core.expand_dims, [v.value, b.const(1 if shape[1] == 1 else 0)],
                   target=stmt.target)
            return b.body
        op = tile_op(stmt, self.typemap)
        if op in _REDUCTIONS:
            return self.reduction(block, stmt, op)
        if op not in ("load", *STORE_OPS) or not (v.kws or len(v.args) > 3):
            return None
        params = _LOAD_PARAMS if op == "load" else _STORE_PARAMS
        bound = dict(zip(params, v.args))
        bound.update(dict(v.kws))
        for name in list(bound):
            if isinstance(self.typemap.get(bound[name].name), (types.NoneType, types.Omitted)):
                del bound[name]
        v.args[:] = [bound[p] for p in params[:3]]
        v.kws = []
        if op in STORE_OPS:
            if "mask" in bound:
                v.args.append(bound["mask"])
            return [stmt]
        return self.masked_load(block, stmt, bound)

    def reduction(self, block, stmt, op):
        """``ws.op(x, axis=None, keepdims=False)`` -> keepdims reductions along int axes,
        then squeezes (None when already in that form)."""
        v = stmt.value
        bound = dict(zip(_REDUCE_PARAMS, v.args))
        bound.update(dict(v.kws))
        x = bound["x"]
        ndim = self.typemap[x.name].ndim
        axis = self._constant(bound.get("axis"))
        keep = bool(self._constant(bound.get("keepdims")))
        axes = list(range(ndim))[::-1] if axis is None else [axis]
        if not v.kws and len(v.args) == 3 and keep and len(axes) == 1:
            return None
        b = StmtBuilder(block.scope, stmt.loc, "reduce")
        stub = getattr(core, op)
        for k, ax in enumerate(axes):
            last = k == len(axes) - 1 and keep
            x = b.call(stub, [x, b.const(ax), b.const(True)],
                       target=stmt.target if last else None)
        if not keep:
            for k, ax in enumerate(sorted(axes, reverse=True)):
                last = k == len(axes) - 1
                x = b.call(core.squeeze, [x, b.const(ax)], target=stmt.target if last else None)
        return b.body

    def _constant(self, var):
        """The Python value of a compile-time argument (None when absent or None)."""
        if var is None:
            return None
        ty = self.typemap.get(var.name)
        if isinstance(ty, (types.NoneType, types.Omitted)):
            return None
        if isinstance(ty, types.Literal):
            return ty.literal_value
        return getattr(self.fir.get_definition(var), "value", None)

    def masked_load(self, block, stmt, bound):
        mask, other = bound.get("mask"), bound.get("other")
        fills_zero = other is None or self._is_zero(other)
        if mask is None and fills_zero:
            return [stmt]
        b = StmtBuilder(block.scope, stmt.loc, "mask")
        final = stmt.target
        raw = b.fresh("raw")
        stmt.target = raw
        keep = mask
        if not fills_zero:
            inside = self.in_bounds(b, bound["array"], bound["offsets"],
                                    self.typemap[final.name].shape)
            keep = inside if mask is None else b.binop(operator.and_, inside, mask)
        tile = self.typemap[final.name]
        fill = b.const(0) if other is None else other
        scalar = types.literal(0) if other is None else self.typemap[other.name]
        if unify_dtype(tile, scalar, "where") != tile.dtype:
            # e.g. an int array with other=-inf: other in the array's dtype, as astype
            dtype = from_numba(tile.dtype)
            fill = b.call(core.full, [b.tuple([b.const(n) for n in tile.shape]), fill,
                                      b.glob(dtype, dtype.attr)])
        b.call(core.where, [keep, raw, fill], target=final)
        return [stmt] + b.body

    def in_bounds(self, b, array, offsets, shape):
        """Boolean tile: element (i, j) of the box lies inside ``array``."""
        loc = b.loc
        items = self._offset_items(offsets)
        dims = b.assign(ir.Expr.getattr(array, "shape", loc), "shape")
        vectors = []
        for d, (o, n) in enumerate(zip(items, shape)):
            size = b.assign(ir.Expr.static_getitem(dims, d, None, loc), "size")
            index = b.binop(operator.add, b.call(core.arange, [b.const(0), b.const(n)]), o)
            vectors.append(b.binop(operator.and_, b.binop(operator.ge, index, b.const(0)),
                                   b.binop(operator.lt, index, size)))
        if len(vectors) == 1:
            return vectors[0]
        rows = b.call(core.expand_dims, [vectors[0], b.const(1)])
        cols = b.call(core.expand_dims, [vectors[1], b.const(0)])
        return b.binop(operator.and_, rows, cols)

    def _offset_items(self, var):
        d = self.fir.get_definition(var)
        if isinstance(d, ir.Expr) and d.op == "build_tuple":
            return d.items
        raise self.p.error("a masked ws.load needs its offsets as a literal tuple like "
                           "(i * BM, k * BK)", var.loc)

    def _is_zero(self, var):
        try:
            d = self.fir.get_definition(var)
        except KeyError:
            return False
        value = getattr(d, "value", None) if isinstance(d, (ir.Const, ir.Global)) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return value is False
        return value == 0 and math.copysign(1.0, value) > 0


@ws_pass
class FindAnchors(WSPass):
    _name = "ws_anchors"

    def run(self, state):
        plan = state.ws
        if _Desugar(self, state).run():
            from .ir_build import retype
            retype(state, state.func_ir)
        plan.original_ir = state.func_ir
        plan.original_typemap = dict(state.typemap)
        for label, block in state.func_ir.blocks.items():
            for stmt in block.body:
                plan.stmts[id(stmt)] = (stmt, label)
                op = tile_op(stmt, state.typemap)
                if op in ANCHOR_TASK:
                    plan.anchors[id(stmt)] = op
        if not any(op == "load" for op in plan.anchors.values()):
            plan.notes.append("no ws.load: nothing for a producer to do")
