"""Pass 3 — data partitioning across consumer groups (seed: 数据分区).

With G = num_consumer_groups > 1, consumer g computes slice g of every dot result along M
(dim 0): rows [g*BM/G, (g+1)*BM/G). Which dims of which tiles follow is found by
union-find over (variable, dim) pairs linked by the ops (dot links out.0~a.0, out.1~b.1,
acc~out; element-wise ops link equal non-broadcast dims; trans swaps; reductions keep the
other dim). A class that also holds a dim that must stay whole (a dot's K, a reduced
axis) cannot be split. If BM/G < 64 (wgmma's native M) or M cannot be split, N (dim 1 of
the dot results) is tried, with slices that are multiples of 64 columns; if neither
works, a clear error names both reasons.

With ``ping_pong=1`` nothing is split: each group computes whole tiles of its own.

Result: ``plan.split`` (var -> split dim), ``plan.partition_dim``, ``plan.slice_size`` and
every consumer statement's task set {1} widened to {1..G}.
"""
from numba.cuda import types
from numba.cuda.core import ir

from ..language.types import TileType
from .base import WSPass, ws_pass
from .ir_tools import tile_op
from .tasks import CONSUMER


#: Ops whose output dims follow their tile inputs' (broadcasting). ``map`` applies a device
#: function element-wise, so its tile arguments link like any other element-wise op.
ELEMENTWISE = ("add", "sub", "mul", "truediv", "maximum", "where", "neg", "exp", "exp2",
               "log", "astype", "map")


class _UnionFind:
    def __init__(self):
        self.parent = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)


def _args(stmt):
    v = stmt.value
    if v.op == "call":
        return [a.name for a in v.args]
    if v.op in ("binop", "inplace_binop"):
        return [v.lhs.name, v.rhs.name]
    if v.op == "unary":
        return [v.value.name]
    return []


def link_dims(func_ir, typemap):
    """Union-find of (var, dim) and the set of (var, dim) that must stay whole."""
    uf, whole, dots = _UnionFind(), set(), []

    def tile(name):
        t = typemap.get(name)
        return t if isinstance(t, TileType) else None

    def link_broadcast(out, src):
        to, ts = tile(out), tile(src)
        if to is None or ts is None:
            return
        off = to.ndim - ts.ndim
        for d in range(ts.ndim):
            if ts.shape[d] == to.shape[d + off]:
                uf.union((src, d), (out, d + off))

    for block in func_ir.blocks.values():
        for stmt in block.body:
            if not isinstance(stmt, ir.Assign):
                continue
            out = stmt.target.name
            if isinstance(stmt.value, ir.Var) and tile(out):
                for d in range(tile(out).ndim):
                    uf.union((out, d), (stmt.value.name, d))
                continue
            if not isinstance(stmt.value, ir.Expr):
                continue
            op = tile_op(stmt, typemap)
            args = _args(stmt)
            if op == "dot":
                a, b = args[0], args[1]
                dots.append(out)
                uf.union((out, 0), (a, 0))
                uf.union((out, 1), (b, 1))
                whole.update({(a, 1), (b, 0)})
                if len(args) > 2 and tile(args[2]):
                    uf.union((out, 0), (args[2], 0))
                    uf.union((out, 1), (args[2], 1))
            elif op in ELEMENTWISE:
                srcs = args
                if op == "astype":
                    bound = isinstance(typemap.get(stmt.value.func.name), types.BoundFunction)
                    srcs = _bound_self(stmt, func_ir) if bound else args[:1]
                for src in srcs:
                    link_broadcast(out, src)
            elif op in ("max", "sum"):
                x, axis = args[0], _const(func_ir, args[1], typemap)
                keep = 1 - axis
                uf.union((out, keep), (x, keep))
                whole.add((x, axis))
            elif op == "trans":
                uf.union((out, 0), (args[0], 1))
                uf.union((out, 1), (args[0], 0))
    return uf, whole, dots


def _const(func_ir, name, typemap):
    t = typemap.get(name)
    return getattr(t, "literal_value", None) if t is not None else func_ir.get_definition(name).value


def _bound_self(stmt, func_ir):
    """For ``tile.astype(d)``: the tile the bound method was taken from."""
    getattr_expr = func_ir.get_definition(stmt.value.func.name)
    return [getattr_expr.value.name] if isinstance(getattr_expr, ir.Expr) else []


def choose_split(uf, whole, dots, typemap, groups):
    """Return (dim, slice, split_classes) or raise ValueError with the reasons."""
    reasons = []
    for dim, label in ((0, "M"), (1, "N")):
        roots = {uf.find((d, dim)) for d in dots}
        sizes = {typemap[d].shape[dim] for d in dots}
        blocked = [w for w in whole if uf.find(w) in roots]
        if blocked:
            reasons.append(f"{label}: {blocked[0][0]} would need its dim {blocked[0][1]} "
                           "split but it must stay whole (a dot's K or a reduced axis)")
            continue
        if len(sizes) != 1:
            reasons.append(f"{label}: dot results disagree on {label} ({sorted(sizes)})")
            continue
        size = sizes.pop()
        if size % groups or size // groups < 64 or (size // groups) % 64:
            reasons.append(f"{label}: {label}={size} / num_consumer_groups={groups} "
                           f"gives {size / groups:g}, not a multiple of 64 (wgmma M / TMA box)")
            continue
        return dim, size // groups, roots, label
    raise ValueError("; ".join(reasons))


@ws_pass
class PartitionData(WSPass):
    _name = "ws_data_partition"

    def run(self, state):
        plan = state.ws
        groups = plan.num_consumers
        uf, whole, dots = link_dims(state.func_ir, state.typemap)
        plan.split = {}
        if plan.ping_pong:
            # every group computes whole tiles; code partitioning deals out the tiles
            if not dots:
                raise self.error("ping_pong=1 needs a ws.dot in a persistent tile loop")
        elif groups > 1:
            if not dots:
                raise self.error("num_consumer_groups > 1 needs a ws.dot to partition; "
                                 "use num_consumer_groups=1")
            try:
                dim, size, roots, label = choose_split(uf, whole, dots, state.typemap, groups)
            except ValueError as e:
                raise self.error(f"cannot partition the work across {groups} consumer "
                                 f"groups: {e}. Use num_consumer_groups=1 or larger tiles.")
            plan.partition_dim, plan.slice_size = label, size
            for name, t in state.typemap.items():
                if isinstance(t, TileType):
                    dims = [d for d in range(t.ndim) if uf.find((name, d)) in roots]
                    plan.split[name] = dims[0] if dims else None
            self._check_every_split_value_stays_split(state, plan.split)
        consumers = frozenset(plan.consumer_tasks)
        plan.tasks = {sid: (ts - {CONSUMER}) | consumers if CONSUMER in ts else ts
                      for sid, ts in plan.tasks.items()}

    def _check_every_split_value_stays_split(self, state, split):
        """A tile computed from a split tile must be split too: otherwise every consumer
        group would compute, and store, the same rows (a silent wrong answer)."""
        for block in state.func_ir.blocks.values():
            for stmt in block.body:
                if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr)
                        and isinstance(state.typemap.get(stmt.target.name), TileType)):
                    continue
                if split.get(stmt.target.name) is not None:
                    continue
                from_split = [a for a in _args(stmt) if split.get(a) is not None]
                if from_split:
                    op = tile_op(stmt, state.typemap) or stmt.value.op
                    raise self.error(f"cannot partition {op!r} across consumer groups: its "
                                     f"input {from_split[0]} is split along "
                                     f"{state.ws.partition_dim} but numba_ws does not know how "
                                     "the op maps rows and columns; use "
                                     "num_consumer_groups=1", stmt.loc)
