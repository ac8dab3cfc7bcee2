"""Pass 3 — data partitioning across consumer groups (seed: 数据分区).

With G = num_consumer_groups > 1, consumer g computes slice g of every dot result along M
(dim 0): rows [g*BM/G, (g+1)*BM/G). Which dims of which tiles follow is found by
union-find over (variable, dim) pairs linked by the ops (dot links out.0~a.0, out.1~b.1,
acc~out; element-wise ops link equal non-broadcast dims; trans swaps; reductions keep the
other dim). A class that also holds a dim that must stay whole (a dot's K, a reduced
axis) cannot be split. If BM/G < 64 (wgmma's native M) or M cannot be split, N (dim 1 of
the dot results) is tried, with slices that are multiples of 64 columns; if neither
works (or the split reaches an op whose row / column mapping is unknown), the kernel falls
back to one consumer group as below, the warning naming both reasons (before 2026-12-07:
an error, unlike the rule without a dot).

Without a ``ws.dot`` (element-wise / reduction work), the seed's cooperative split is
applied to rows: dim 0 of every *stored* tile (a 1-D tile's only dim) and every dim linked
to it is split into G slices of R/G rows (R: the tiles' row count, the same for all;
R % G == 0; no multiple of 64 needed: no wgmma). Loaded tiles whose rows are not linked
to a stored tile (a broadcast weight vector) are loaded whole by every consumer. When the
split cannot be made (rows reduced along axis 0, a stored row count that G does not
divide, tiles disagreeing on R, an op whose row mapping is unknown), the kernel falls back
to one consumer group — ``plan.options`` gets ``num_consumer_groups=1``, so the CTA has
256 threads — with a :class:`PartitionFallbackWarning` naming the reason, also kept in
``plan.notes``. (A warning, not an error: the G > 1 configs of an autotune list stay
usable for such kernels.)

With ``ping_pong=1`` nothing is split: each group computes whole tiles of its own.

Result: ``plan.split`` (var -> split dim), ``plan.partition_dim`` ('M' for rows),
``plan.slice_size``, ``plan.split_source`` ('dot' or 'rows') and every consumer
statement's task set {1} widened to {1..G}.
"""
import dataclasses
import operator
import warnings

from numba.cuda import types
from numba.cuda.core import ir, ir_utils

from ..language import stage_ops as so
from ..language.types import TileType
from .base import WSPass, ws_pass
from .ir_build import StmtBuilder
from .ir_tools import STORE_OPS, tile_op
from .tasks import CONSUMER


#: Ops whose output dims follow their tile inputs' (broadcasting). ``map`` applies a device
#: function element-wise, so its tile arguments link like any other element-wise op.
ELEMENTWISE = ("add", "sub", "mul", "truediv", "maximum", "where", "neg", "exp", "exp2",
               "log", "astype", "map")
# issue 15 items 1-2: comparisons and boolean operators link like any element-wise op;
# broadcast_to links its operand's dims that keep their size
ELEMENTWISE += ("lt", "le", "eq", "ne", "gt", "ge", "and_", "or_", "xor", "invert",
                "broadcast_to")
# issue 15 item 3: more math and the integer operators
ELEMENTWISE += ("sqrt", "rsqrt", "abs", "minimum", "sigmoid", "tanh", "gelu", "fma",
                "floordiv", "mod", "lshift", "rshift")
#: Reductions along one axis (the reduced axis kept with size 1).
REDUCTIONS = ("max", "sum", "min", "argmax", "argmin")


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


class PartitionFallbackWarning(UserWarning):
    """num_consumer_groups > 1 was asked for a kernel whose work cannot be split across
    the groups; it is compiled with one consumer group (the message names the reason)."""


class _NoSplit(Exception):
    """Why the row split cannot be made, and the kernel line that prevents it."""

    def __init__(self, reason, loc=None):
        super().__init__(reason)
        self.loc = loc


@dataclasses.dataclass
class Links:
    """What the ops say about tile dims: ``uf`` links (var, dim) pairs; ``whole`` maps a
    (var, dim) that must not be split to (why, loc); ``reduced`` maps a reduction's
    result (var, axis) — one row or column — to (why, loc); ``dots``: dot result names;
    ``stores``: (stored tile name, loc) per ``ws.store``; ``lines``: var -> the line
    that first assigns it (to name temporaries in messages)."""
    uf: _UnionFind
    whole: dict
    reduced: dict
    dots: list
    stores: list
    lines: dict

    def show(self, name):
        """``'x'`` for a named variable, ``the tile of line N`` for a temporary."""
        if not name.startswith("$"):
            return repr(name)
        line = self.lines.get(name)
        return f"the tile of line {line}" if line else "a tile"


def find_links(func_ir, typemap):
    """The :class:`Links` of a typed function."""
    uf, whole, reduced, dots, stores, lines = _UnionFind(), {}, {}, [], [], {}
    links = Links(uf, whole, reduced, dots, stores, lines)
    show = links.show

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
            lines.setdefault(out, stmt.loc.line)
            if isinstance(stmt.value, ir.Var) and tile(out):
                for d in range(tile(out).ndim):
                    uf.union((out, d), (stmt.value.name, d))
                continue
            if not isinstance(stmt.value, ir.Expr):
                continue
            op = tile_op(stmt, typemap)
            args = _args(stmt)
            line = stmt.loc.line
            if op == "dot":
                a, b = args[0], args[1]
                dots.append(out)
                uf.union((out, 0), (a, 0))
                uf.union((out, 1), (b, 1))
                k_dim = f"the K of ws.dot (line {line})"
                whole[(a, 1)] = (f"dim 1 of {show(a)} is {k_dim}", stmt.loc)
                whole[(b, 0)] = (f"dim 0 of {show(b)} is {k_dim}", stmt.loc)
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
            elif op in REDUCTIONS:
                x, axis = args[0], _const(func_ir, args[1], typemap)
                keep = 1 - axis
                uf.union((out, keep), (x, keep))
                what = f"ws.{op} along axis {axis} (line {line})"
                whole[(x, axis)] = (f"{what} reduces dim {axis} of {show(x)}", stmt.loc)
                reduced[(out, axis)] = (f"the result of {what}", stmt.loc)
            elif op == "trans":
                uf.union((out, 0), (args[0], 1))
                uf.union((out, 1), (args[0], 0))
            elif op == "expand_dims":     # (N,) -> (1, N) or (N, 1)
                axis = _const(func_ir, args[1], typemap)
                uf.union((out, 1 if axis == 0 else 0), (args[0], 0))
            elif op == "squeeze" and tile(out):     # (1, N) or (N, 1) -> (N,)
                axis = _const(func_ir, args[1], typemap)
                uf.union((out, 0), (args[0], 1 - axis))
            elif op in STORE_OPS and len(args) > 2 and tile(args[2]):
                stores.append((args[2], stmt.loc))
                if len(args) > 3:         # a store mask splits with the stored tile
                    link_broadcast(args[2], args[3])
    return links


def _const(func_ir, name, typemap):
    t = typemap.get(name)
    return getattr(t, "literal_value", None) if t is not None else func_ir.get_definition(name).value


def _bound_self(stmt, func_ir):
    """For ``tile.astype(d)``: the tile the bound method was taken from."""
    getattr_expr = func_ir.get_definition(stmt.value.func.name)
    return [getattr_expr.value.name] if isinstance(getattr_expr, ir.Expr) else []


class _NoDotSplit(ValueError):
    """Neither M nor N can be split; ``by_size``: some dim failed only for its size (so
    larger tiles could make it splittable)."""

    def __init__(self, reasons, by_size):
        super().__init__("; ".join(reasons))
        self.by_size = by_size


def choose_split(uf, whole, dots, typemap, groups):
    """Return (dim, slice, split_classes, label) or raise :class:`_NoDotSplit`."""
    reasons, by_size = [], False
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
            by_size = True
            continue
        both = _split_both_dims(uf, roots, typemap)
        if both:
            # each group would compute only its diagonal block of such a tile
            # (``t - ws.trans(t)``: fuzzer seed 54584132 under the schedule simulator,
            # wrong outputs, 2026-12-07)
            reasons.append(f"{label}: {both} would be split along both dims (its rows and "
                           "columns are linked, e.g. through ws.trans)")
            continue
        return dim, size // groups, roots, label
    raise _NoDotSplit(reasons, by_size)


def _split_both_dims(uf, roots, typemap):
    """The name of a 2-D tile whose two dims both fall in the split classes ``roots``,
    or None."""
    for name, t in typemap.items():
        if isinstance(t, TileType) and t.ndim > 1 and all(
                uf.find((name, d)) in roots for d in range(t.ndim)):
            return name
    return None


def choose_row_split(links, typemap, groups):
    """No dot: split dim 0 of the stored tiles (and every dim linked to it) into
    ``groups`` slices. Return (slice rows, split classes) or raise :class:`_NoSplit`."""
    uf = links.uf
    if not links.stores:
        raise _NoSplit("the kernel stores no tile, so there are no rows to split")
    roots = {uf.find((name, 0)) for name, _ in links.stores}
    for (var, dim), (why, loc) in links.whole.items():
        if uf.find((var, dim)) in roots:
            raise _NoSplit(f"{why}, and those are the rows that would be split", loc)
    for (var, dim), (why, loc) in links.reduced.items():
        if uf.find((var, dim)) in roots:
            raise _NoSplit(f"the rows of a stored tile come from {why}, which needs "
                           "every row of its input in one consumer group", loc)
    rows = {}
    for name, t in typemap.items():
        if not isinstance(t, TileType):
            continue
        dims = [d for d in range(t.ndim) if uf.find((name, d)) in roots]
        if len(dims) > 1:
            raise _NoSplit(f"{links.show(name)} {t.shape} would be split along both "
                           "dims (its rows and columns are linked, e.g. through ws.trans)")
        if dims:
            rows.setdefault(t.shape[dims[0]], name)
    if len(rows) != 1:
        found = ", ".join(f"{links.show(n)}: {r}" for r, n in sorted(rows.items()))
        raise _NoSplit(f"the tiles to split disagree on their number of rows ({found})")
    (size, name), = rows.items()
    if size % groups:
        raise _NoSplit(f"{links.show(name)} has {size} row(s), not divisible by "
                       f"num_consumer_groups={groups}")
    return size // groups, roots


@ws_pass
class PartitionData(WSPass):
    _name = "ws_data_partition"

    def run(self, state):
        plan = state.ws
        groups = plan.num_consumers
        links = find_links(state.func_ir, state.typemap)
        plan.split = {}
        if plan.ping_pong:
            # every group computes whole tiles; code partitioning deals out the tiles
            if not links.dots:
                raise self.error("ping_pong=1 needs a ws.dot in a persistent tile loop")
        elif groups > 1 and links.dots:
            try:
                dim, size, roots, label = choose_split(links.uf, set(links.whole),
                                                       links.dots, state.typemap, groups)
                split = _split_map(state.typemap, links.uf, roots)
                found = _unsplit_from_split(state, split)
                if found:
                    stmt, op, arg = found
                    raise _NoSplit(f"the input {links.show(arg)} of {op!r} (line "
                                   f"{stmt.loc.line}) would be split along {label}, and "
                                   "numba_ws does not know how the op maps rows and "
                                   "columns", stmt.loc)
            except (_NoDotSplit, _NoSplit) as e:
                self._fall_back_to_one_group(plan, groups, e)
            else:
                plan.partition_dim, plan.slice_size, plan.split_source = label, size, "dot"
                plan.split = split
        elif groups > 1:
            try:
                size, roots = choose_row_split(links, state.typemap, groups)
                split = _split_map(state.typemap, links.uf, roots)
                found = _unsplit_from_split(state, split)
                if found:
                    stmt, op, arg = found
                    raise _NoSplit(f"numba_ws does not know how {op!r} maps the rows of its "
                                   f"input {links.show(arg)} (line {stmt.loc.line})", stmt.loc)
            except _NoSplit as e:
                self._fall_back_to_one_group(plan, groups, e)
            else:
                plan.partition_dim, plan.slice_size, plan.split_source = "M", size, "rows"
                plan.split = split
        consumers = frozenset(plan.consumer_tasks)
        plan.tasks = {sid: (ts - {CONSUMER}) | consumers if CONSUMER in ts else ts
                      for sid, ts in plan.tasks.items()}
        if plan.split:
            split_index_sources(state, plan)

    def _fall_back_to_one_group(self, plan, groups, why):
        """One consumer group instead of ``groups``, with a :class:`PartitionFallbackWarning`
        and a plan note naming ``why`` (a :class:`_NoSplit` or :class:`_NoDotSplit`)."""
        hint = ("; larger tiles would let it split"
                if getattr(why, "by_size", False) else "")
        if plan.options.dot_turns:
            raise self.error(f"dot_turns=1 takes turns between >= 2 consumer groups, but "
                             f"the work cannot be split across {groups}: {why}{hint}",
                             getattr(why, "loc", None))
        message = (f"numba_ws: kernel {plan.kernel_name!r}: cannot split its work across "
                   f"num_consumer_groups={groups} consumer groups: {why}{hint}; compiling "
                   "it with num_consumer_groups=1 (one consumer warp group, 256 threads)")
        loc = getattr(why, "loc", None)
        warnings.warn_explicit(message, PartitionFallbackWarning,
                               getattr(loc, "filename", None) or "<numba_ws>",
                               getattr(loc, "line", None) or 0)
        plan.notes.append(message)
        plan.options = dataclasses.replace(plan.options, num_consumer_groups=1)


def split_index_sources(state, plan):
    """Give each consumer group its slice of the split tiles that are built from a shape
    (issue 15; code partitioning does zeros / full, loads and stores), in the shared IR:

    - ``r = ws.arange(s, e)`` split: ``r = ws.arange(s, s + slice) + (ws_warp_group() - 1)
      * slice`` -- consumer group g (0-based) is warp group g + 1 and holds elements
      ``g * slice ..`` of every split tile, as its stores' offsets say;
    - ``ws.broadcast_to(x, shape)`` split along dim d: ``shape[d]`` becomes the slice (the
      same for every group).

    The new statements get the rewritten statement's tasks; the original typemap keeps
    the block-wide types (code partitioning retypes each clone)."""
    fir, typemap, size = state.func_ir, state.typemap, plan.slice_size
    for label, block in fir.blocks.items():
        body = []
        for stmt in block.body:
            op = tile_op(stmt, typemap)
            dim = plan.split.get(stmt.target.name) if op in ("arange", "broadcast_to") \
                else None
            if dim is None:
                body.append(stmt)
                continue
            b = StmtBuilder(block.scope, stmt.loc, "split")
            call = stmt.value
            after = []
            if op == "broadcast_to":
                shape = list(typemap[stmt.target.name].shape)
                shape[dim] = size
                call.args[1] = b.tuple([b.const(n) for n in shape])
            else:
                start = _const(fir, call.args[0].name, typemap)
                call.args[:] = [b.const(start), b.const(start + size)]
                final, raw = stmt.target, b.fresh("arange")
                stmt.target = raw
                typemap[raw.name] = TileType(types.int32, (size,))
                a = StmtBuilder(block.scope, stmt.loc, "split")
                group = a.binop(operator.sub, a.call(so.ws_warp_group, []), a.const(1))
                offset = a.binop(operator.mul, group, a.const(size))
                a.binop(operator.add, raw, offset, target=final)
                after = a.body
            for new in b.body + after:
                plan.tasks[id(new)] = plan.tasks[id(stmt)]
                plan.stmts[id(new)] = (new, label)
            body.extend(b.body + [stmt] + after)
        block.body = body
    fir._definitions = ir_utils.build_definitions(fir.blocks)


def _split_map(typemap, uf, roots):
    """var -> the dim of the tile in a split class (None: every consumer needs it whole)."""
    split = {}
    for name, t in typemap.items():
        if isinstance(t, TileType):
            dims = [d for d in range(t.ndim) if uf.find((name, d)) in roots]
            split[name] = dims[0] if dims else None
    return split


def _unsplit_from_split(state, split):
    """A tile computed from a split tile must be split too: otherwise every consumer
    group would compute, and store, the same rows (a silent wrong answer). The first
    (stmt, op, split input) that breaks this, or None."""
    for block in state.func_ir.blocks.values():
        for stmt in block.body:
            if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr)
                    and isinstance(state.typemap.get(stmt.target.name), TileType)):
                continue
            if split.get(stmt.target.name) is not None:
                continue
            from_split = [a for a in _args(stmt) if split.get(a) is not None]
            if from_split:
                return stmt, tile_op(stmt, state.typemap) or stmt.value.op, from_split[0]
    return None
