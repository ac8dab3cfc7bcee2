"""Pass — register layouts (design.md §6; codegen/layouts.py has the layouts themselves).

Runs on the partitioned IR (tiles still abstract ``TileType``, one clone per warp group)
and decides where every tile that lives in registers is held, so that each op's lowering
finds its operands in one layout and conversions are few and visible in dumps:

1. *Shared-memory tiles* (a ``ws_view`` of a slot part, its copies, ``ws.trans`` of it)
   stay in shared memory where ``ws.dot`` reads them; every other use reads them into
   registers first: ``x_r = ws_tile_read(x)`` is inserted just before that use (the
   slot's release, placed by code partitioning after the last use, still follows it).
2. *Classes*: a union-find over register tiles puts an element-wise op's result and its
   same-shape tile operands (``astype``, ``ws.map``, copies, a dot's ``acc``: same) in
   one class, which gets one layout. *Relations* between classes: a reduction's result is
   ``slice_of(x, axis)``; a broadcast operand is ``slice_of(result, axis)``; ``trans``
   transposes. *Seeds*: a dot's result and a register A operand are in the accumulator
   layout.
3. *Solving*: seeds first, then relations are followed (slices forward, broadcast
   operands backward from the result, ``trans`` both ways, and a reduced tile backward
   from its result when that result broadcasts onto a tile of the reduced tile's shape:
   ``acc / ws.sum(t, 1)`` reads ``t`` in ``acc``'s layout); a class nothing decides gets
   the blocked layout for its narrowest dtype, in program order, and solving goes on.
4. A relation the layouts do not satisfy gets a ``ws_tile_convert`` at that edge (before
   a broadcast operand; after a reduction or trans); an element-wise op whose result
   shape no operand has (``(R, 1) + (1, C)``) gets its first operand expanded to the
   result (a register selection when it is the result's slice).
5. ``plan.scratch_bytes``: the most shared memory one warp group's conversion or
   cross-warp reduction exchanges; one region per consumer group from
   ``plan.scratch_offset`` (after the barriers); ``plan.smem_bytes`` grows by them.
   A dot's B operand that lives in registers (a masked load, a dequantized weight) is
   written to shared memory first (``ws_tile_stage`` before the dot), and a float32 B
   stored N-major is copied K-major (tf32): ``plan.stage_bytes`` per consumer group
   (1024-aligned; one for all with ``shared_operand_buffer=1``) from ``plan.stage_offset``.

Records ``plan.layouts`` (register tile name -> Layout); lower_tiles lowers with it and
checks that the retyped IR agrees.
"""
from numba.cuda import types
from numba.cuda.core import ir

from ..codegen import layouts as lay
from ..codegen.reduce_ops import layout_axis, reduce_scratch_bytes
from ..codegen.regtile import convert_needs_scratch, exchange_bytes
from ..language import core, stage_ops as so
from ..language.types import TileType
from .base import WSPass, ws_pass
from .ir_build import StmtBuilder
from .ir_tools import STORE_OPS, callee_object, tile_op

#: Element-wise ops: result and same-shape tile operands share a layout.
ELEMENTWISE = ("add", "sub", "mul", "truediv", "maximum", "where", "neg", "exp", "exp2",
               "log", "astype", "map")
# issue 15 items 1-2: comparisons, boolean operators; broadcast_to (its operand is
# expanded to the result like any broadcast operand). ws.arange is a free source (no
# operand, like zeros); expand_dims is a relation (same layout, or transposed).
ELEMENTWISE += ("lt", "le", "eq", "ne", "gt", "ge", "and_", "or_", "xor", "invert",
                "broadcast_to")
# issue 15 item 3: more math and the integer operators
ELEMENTWISE += ("sqrt", "rsqrt", "abs", "minimum", "sigmoid", "tanh", "gelu", "fma",
                "floordiv", "mod", "lshift", "rshift")
#: Reductions along one axis (the reduced axis kept with size 1: passes/anchors.py writes
#: NumPy's forms as these and ``ws.squeeze``, a relation like expand_dims).
REDUCTIONS = ("max", "sum", "min", "argmax", "argmin")
ATOM = 1024


def _align(x, a):
    return (x + a - 1) // a * a


class _Operand:
    """One tile operand of a statement: reads ``var``; ``replace(new)`` rewrites it."""

    def __init__(self, var, setter):
        self.var, self._set = var, setter

    def replace(self, new):
        self._set(new)
        self.var = new


def _call_operands(expr):
    out = []
    for k, v in enumerate(expr.args):
        out.append(_Operand(v, lambda new, k=k: expr.args.__setitem__(k, new)))
    for k, (name, v) in enumerate(expr.kws):
        out.append(_Operand(v, lambda new, k=k, name=name: expr.kws.__setitem__(k, (name, new))))
    return out


def operands(stmt):
    """The variable operands of an assignment's expression, rewritable."""
    v = stmt.value
    if isinstance(v, ir.Var):
        return [_Operand(v, lambda new: setattr(stmt, "value", new))]
    if not isinstance(v, ir.Expr):
        return []
    if v.op == "call":
        return _call_operands(v)
    if v.op in ("binop", "inplace_binop"):
        return [_Operand(v.lhs, lambda new: setattr(v, "lhs", new)),
                _Operand(v.rhs, lambda new: setattr(v, "rhs", new))]
    if v.op in ("unary", "getattr", "cast"):
        return [_Operand(v.value, lambda new: setattr(v, "value", new))]
    return []


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
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


class _Layouts:
    def __init__(self, pass_, state):
        self.p, self.state, self.plan = pass_, state, state.ws
        self.fir, self.typemap = state.func_ir, state.typemap
        self.uf = _UnionFind()
        self.seeds = {}            # var -> Layout
        self.relations = []        # (kind, src var, dst var, axis, stmt, operand)
        self.order = []            # register tile vars in program order
        self.fixed = {}            # var -> Layout decided by a rewrite (conversions)
        self.new_types = {}        # var -> TileType of statements this pass adds
        self.scratch = 0
        self.stage = 0              # bytes of the largest staged dot B operand
        self.stage_copies = []      # per staged B: copied from its slot (True) or registers

    # -- helpers -------------------------------------------------------------------
    def tile(self, name):
        t = self.new_types.get(name) or self.typemap.get(name)
        return t if isinstance(t, TileType) else None

    def callee(self, expr):
        return callee_object(expr, self.typemap) if expr.op == "call" else None

    def error(self, message, loc):
        return self.p.error(message, loc)

    # -- 1. shared-memory tiles -----------------------------------------------------
    def smem_vars(self):
        smem, changed = set(), True
        while changed:
            changed = False
            for block in self.fir.blocks.values():
                for stmt in block.body:
                    if not isinstance(stmt, ir.Assign) or stmt.target.name in smem:
                        continue
                    v = stmt.value
                    src = None
                    if isinstance(v, ir.Var):
                        src = v.name
                    elif isinstance(v, ir.Expr) and v.op == "call":
                        fn = self.callee(v)
                        if fn is so.ws_view:
                            smem.add(stmt.target.name)
                            changed = True
                            continue
                        if fn is core.trans and v.args:
                            src = v.args[0].name
                    if src in smem:
                        smem.add(stmt.target.name)
                        changed = True
        return smem

    def _reads_smem(self, stmt, position):
        """Whether operand ``position`` of ``stmt`` may stay a shared-memory tile."""
        v = stmt.value
        if isinstance(v, ir.Var):
            return True
        if isinstance(v, ir.Expr) and v.op == "call":
            fn = self.callee(v)
            if fn is core.dot:
                return position in (0, 1)
            if fn is core.trans:
                return True
        return False

    def insert_reads(self, smem):
        for block in self.fir.blocks.values():
            body = []
            for stmt in block.body:
                if isinstance(stmt, ir.Assign):
                    for k, operand in enumerate(operands(stmt)):
                        if operand.var.name in smem and not self._reads_smem(stmt, k):
                            b = StmtBuilder(block.scope, stmt.loc, "layout")
                            reg = b.call(so.ws_tile_read, [operand.var])
                            self.new_types[reg.name] = self.tile(operand.var.name)
                            body.extend(b.body)
                            operand.replace(reg)
                body.append(stmt)
            block.body = body

    # -- 2. classes, relations, seeds ------------------------------------------------
    def _axis(self, small, full):
        """Broadcast axis of a tile of shape ``small`` onto ``full`` (layout shapes)."""
        s, f = lay.shape2d(small), lay.shape2d(full)
        if s == f:
            return None
        if s == (f[0], 1):
            return 1
        if s == (1, f[1]):
            return 0
        return "both"

    def build(self, smem):
        for label in sorted(self.fir.blocks):
            block = self.fir.blocks[label]
            body = []
            for stmt in block.body:
                body.extend(self._edges(block, stmt, smem))
            block.body = body

    def _register(self, name):
        if name not in self.uf.parent:
            self.uf.find(name)
            self.order.append(name)

    def _edges(self, block, stmt, smem):
        """Record the statement's edges; return it (and any expansion it needs)."""
        if not isinstance(stmt, ir.Assign):
            return [stmt]
        target = stmt.target.name
        if tile_op(stmt, self.typemap) in STORE_OPS and len(stmt.value.args) > 3:
            self._store_mask(stmt)
            return [stmt]
        out_tile = self.tile(target)
        if out_tile is None or target in smem:
            return [stmt]
        self._register(target)
        v = stmt.value
        if isinstance(v, ir.Var):
            if self.tile(v.name) is not None:
                self._register(v.name)
                self.uf.union(v.name, target)
            return [stmt]
        op = tile_op(stmt, self.typemap)
        if op is None and isinstance(v, ir.Expr) and v.op == "call":
            fn = self.callee(v)
            if fn is so.ws_dot_fence:
                self._register(v.args[0].name)
                self.uf.union(v.args[0].name, target)
            return [stmt]
        args = [o for o in operands(stmt) if self.tile(o.var.name) is not None]
        if op == "astype" and isinstance(self.typemap.get(v.func.name), types.BoundFunction):
            method = self.fir.get_definition(v.func)
            args = [o for o in operands_of_getattr(method) if self.tile(o.var.name) is not None]
        if op == "dot":
            self.seeds[target] = self._acc(out_tile.shape, stmt)
            a = v.args[0]
            if a.name not in smem:
                self._register(a.name)
                self.seeds[a.name] = self._acc(self.tile(a.name).shape, stmt)
            if len(v.args) > 2 and self.tile(v.args[2].name) is not None:
                self._register(v.args[2].name)
                self.uf.union(v.args[2].name, target)
            return self._stage_b(block, stmt, smem) + [stmt]
        if op in REDUCTIONS:
            x = v.args[0].name
            self._register(x)
            axis = layout_axis(self.tile(x).shape, self._literal(v.args[1]))
            self.relations.append(("slice", x, target, axis, stmt, None))
            return [stmt]
        if op == "trans":
            x = v.args[0].name
            self._register(x)
            self.relations.append(("trans", x, target, None, stmt, None))
            return [stmt]
        if op in ("expand_dims", "squeeze"):
            # (N,) <-> (1, N): the same layout; (N,) <-> (N, 1): transposed
            x = v.args[0].name
            self._register(x)
            if self._literal(v.args[1]) == 0:
                self.uf.union(x, target)
            else:
                self.relations.append(("trans", x, target, None, stmt, None))
            return [stmt]
        if op not in ELEMENTWISE:
            return [stmt]
        pre = []
        same = [o for o in args if lay.shape2d(self.tile(o.var.name).shape)
                == lay.shape2d(out_tile.shape)]
        if args and not same:       # (R, 1) + (1, C): expand the first operand
            b = StmtBuilder(block.scope, stmt.loc, "layout")
            first = args[0]
            shape = b.tuple([b.const(n) for n in out_tile.shape])
            full = b.call(so.ws_tile_convert, [first.var, shape])
            self.new_types[full.name] = TileType(self.tile(first.var.name).dtype, out_tile.shape)
            self._register(first.var.name)
            self._register(full.name)
            self.relations.append(("bcast", first.var.name, full.name,
                                   self._axis(self.tile(first.var.name).shape, out_tile.shape),
                                   None, None))
            first.replace(full)
            pre = b.body
        for o in args:
            name = o.var.name
            self._register(name)
            axis = self._axis(self.tile(name).shape, out_tile.shape)
            if axis is None:
                self.uf.union(name, target)
            else:
                self.relations.append(("bcast", name, target, axis, stmt, o))
        return pre + [stmt]

    def _stage_b(self, block, stmt, smem):
        """A dot's B operand held in registers (a masked load, a computed tile such as a
        dequantized weight) goes to the warp group's operand buffer first:
        ``b_s = ws_tile_stage(b)`` before the dot, which then reads ``b_s`` (the tensor
        cores read B from shared memory). So does a tf32 B stored N-major (a row-major
        float32 b), copied from its slot K-major (wgmma reads tf32 K-major only).
        Returns the statements to insert."""
        a_var, b_var = stmt.value.args[0], stmt.value.args[1]
        tile = self.tile(b_var.name)
        if tile is None:
            return []
        b = StmtBuilder(block.scope, stmt.loc, "layout")
        if tile.dtype == types.float32:
            if a_var.name in smem and self._smem_transposed(a_var) is not False:
                raise self.error("ws.dot of float32 (tf32) tiles: a must have K contiguous "
                                 "(a row-major a, not ws.trans or a column-major array; "
                                 "wgmma has no transpose for tf32)", stmt.loc)
            copy = b_var.name in smem and self._smem_transposed(b_var) is False
        else:
            copy = False
        if b_var.name in smem and not copy:
            return []
        self.stage_copies.append(copy)
        if not copy:
            self._register(b_var.name)
        staged = b.call(so.ws_tile_stage, [b_var])
        self.new_types[staged.name] = tile
        stmt.value.args[1] = staged
        self.stage = max(self.stage, tile.shape[0] * tile.shape[1] * lay.itemsize(tile.dtype))
        line = f"line {stmt.loc.line}: " if stmt.loc else ""
        what = ("a float32 tile stored N-major: copied K-major (tf32 reads K-major only)"
                if copy else "a register tile: written")
        self.plan.notes.append(f"{line}ws.dot's b is {what} to shared memory before the "
                               f"dot ({tile.shape[0]}x{tile.shape[1]})")
        return b.body

    def _store_mask(self, stmt):
        """``ws.store(array, offsets, tile, mask)``: the mask is held in the stored tile's
        layout, or as a vector in its slice (a broadcast mask)."""
        tile, mask = stmt.value.args[2].name, stmt.value.args[3].name
        if self.tile(tile) is None or self.tile(mask) is None:
            return
        self._register(tile)
        self._register(mask)
        axis = self._axis(self.tile(mask).shape, self.tile(tile).shape)
        if axis is None:
            self.uf.union(mask, tile)
        else:
            self.relations.append(("bcast", mask, tile, axis, stmt,
                                   operands(stmt)[3]))

    def _smem_transposed(self, var):
        """Whether the shared-memory tile ``var`` is a transposed view of what its slot
        holds (a column-major array's part, an odd number of ``ws.trans``), or None when
        its definition is not one chain of copies and ``trans`` back to a ``ws_view``."""
        flipped = False
        for _ in range(32):
            try:
                d = self.fir.get_definition(var)
            except KeyError:
                return None
            if isinstance(d, ir.Var):
                var = d
                continue
            fn = self.callee(d) if isinstance(d, ir.Expr) else None
            if fn is core.trans:
                flipped, var = not flipped, d.args[0]
                continue
            if fn is not so.ws_view:
                return None
            part = self.fir.get_definition(d.args[2])
            if isinstance(part, ir.Expr) and part.op == "binop":   # $ws_group + first
                part = self.fir.get_definition(part.rhs)
            ch = self.plan.channels[self._literal(d.args[0])]
            member, _ = ch.part(part.value)
            return flipped != bool(member["transposed"])
        return None

    def _literal(self, var):
        ty = self.typemap.get(var.name)
        value = getattr(ty, "literal_value", None)
        if value is None:
            value = getattr(self.fir.get_definition(var), "value", None)
        return value

    def _acc(self, shape, stmt):
        try:
            return lay.acc(*lay.shape2d(shape))
        except ValueError as e:
            raise self.error(f"ws.dot on the GPU: {e}", stmt.loc) from None

    # -- 3. solving ------------------------------------------------------------------
    def _itemsize(self, root):
        sizes = [lay.itemsize(self.tile(n).dtype) for n in self.order
                 if self.uf.find(n) == root]
        return min(sizes) if sizes else 4

    def solve(self):
        find = self.uf.find
        assigned = {}
        for name, layout in self.seeds.items():
            root = find(name)
            if root not in assigned:
                assigned[root] = layout
        pending = list(self.order)
        parents = {}      # class -> (layout, axis) it is the slice of (from a broadcast)
        while True:
            progress = True
            while progress:
                progress = False
                for kind, src, dst, axis, _, _ in self.relations:
                    rs, rd = find(src), find(dst)
                    if kind == "slice" and rs in assigned and rd not in assigned:
                        assigned[rd] = lay.slice_of(assigned[rs], axis)
                        progress = True
                    elif kind == "slice" and rd in assigned and rs not in assigned \
                            and parents.get(rd, (None,))[1:] == (axis,) \
                            and parents[rd][0].shape == lay.shape2d(self.tile(src).shape):
                        # backward through a reduction: the reduced tile takes the layout
                        # its result broadcasts onto (acc / ws.sum(t, 1): t read in acc, no conversion)
                        assigned[rs] = parents[rd][0]
                        progress = True
                    elif kind == "bcast" and rd in assigned and rs not in assigned \
                            and axis in (0, 1):
                        assigned[rs] = lay.slice_of(assigned[rd], axis)
                        parents[rs] = (assigned[rd], axis)
                        progress = True
                    elif kind == "trans" and (rs in assigned) != (rd in assigned):
                        known, other = (rs, rd) if rs in assigned else (rd, rs)
                        assigned[other] = lay.transposed(assigned[known])
                        if known in parents:    # m[:, None] of m = ws.sum(t, 1): t in
                            layout, ax = parents[known]     # the layout m[:, None] meets
                            parents[other] = (lay.transposed(layout), 1 - ax)
                        progress = True
            rest = [n for n in pending if find(n) not in assigned]
            if not rest:
                break
            waiting = self._waiting(assigned)
            first = next((n for n in rest if find(n) not in waiting), rest[0])
            root = find(first)
            shape = self.tile(first).shape
            try:
                assigned[root] = lay.default_for(shape, self._itemsize(root))
            except ValueError as e:
                loc = self._loc_of(first)
                name = first.split('__t')[0]
                shown = f"of line {loc.line}" if name.startswith("$") and loc else name
                raise self.error(f"tile {shown} {shape}: {e}", loc) from None
            pending = rest
        return {name: assigned[find(name)] for name in self.order}

    def _waiting(self, assigned):
        """Classes that should not get a default layout yet (issue 15): broadcast operands
        whose broadcast result is undecided, and classes tied to those by ``trans`` /
        ``expand_dims`` (``rows[:, None] < M``, ``cols[None, :]``: index vectors made
        before the tile they mask). They take their layout from that tile instead."""
        find = self.uf.find
        waiting = {find(src) for kind, src, dst, axis, _, _ in self.relations
                   if kind == "bcast" and axis in (0, 1) and find(dst) not in assigned}
        grew = True
        while grew:
            grew = False
            for kind, src, dst, _, _, _ in self.relations:
                ends = {find(src), find(dst)}
                if kind == "trans" and ends & waiting and not ends <= waiting:
                    waiting |= ends
                    grew = True
        return waiting

    def _loc_of(self, name):
        for block in self.fir.blocks.values():
            for stmt in block.body:
                if isinstance(stmt, ir.Assign) and stmt.target.name == name:
                    return stmt.loc
        return None

    # -- 4. conversions --------------------------------------------------------------
    def convert(self, layouts):
        inserts = {}   # id(stmt) -> (before, after)
        for kind, src, dst, axis, stmt, operand in self.relations:
            ls, ld = layouts[src], layouts[dst]
            if kind == "bcast":
                want = lay.slice_of(ld, axis) if axis in (0, 1) else None
                if axis in (0, 1) and ls == want or ls.shape == (1, 1):
                    continue        # a (1, 1) tile: every thread holds its element
                if stmt is None:        # an expansion this pass made: converts itself
                    self._need(convert_needs_scratch(ls, ld), src)
                    continue
                b = StmtBuilder(stmt.target.scope, stmt.loc, "layout")
                shape = b.tuple([b.const(n) for n in self.tile(src).shape])
                conv = b.call(so.ws_tile_convert, [operand.var, shape])
                self.new_types[conv.name] = self.tile(src)
                layouts[conv.name] = want
                self._need(convert_needs_scratch(ls, want), src)
                operand.replace(conv)
                inserts.setdefault(id(stmt), ([], []))[0].extend(b.body)
            else:
                made = lay.slice_of(ls, axis) if kind == "slice" else lay.transposed(ls)
                if kind == "slice":
                    self.scratch = max(self.scratch, reduce_scratch_bytes(ls, axis) * max(
                        4, lay.itemsize(self.tile(src).dtype)))
                if made == ld:
                    continue
                b = StmtBuilder(stmt.target.scope, stmt.loc, "layout")
                raw = b.fresh("raw")
                self.new_types[raw.name] = self.tile(dst)
                layouts[raw.name] = made
                final = stmt.target
                stmt.target = raw
                shape = b.tuple([b.const(n) for n in self.tile(dst).shape])
                b.call(so.ws_tile_convert, [raw, shape], target=final)
                self._need(convert_needs_scratch(made, ld), dst)
                inserts.setdefault(id(stmt), ([], []))[1].extend(b.body)
        for block in self.fir.blocks.values():
            body = []
            for stmt in block.body:
                before, after = inserts.get(id(stmt), ((), ()))
                body.extend(before)
                body.append(stmt)
                body.extend(after)
            block.body = body
        return layouts

    def _need(self, elements, name):
        t = self.tile(name)
        self.scratch = max(self.scratch, elements * exchange_bytes(t.dtype))

    # -- 5. shared memory ------------------------------------------------------------
    def place_scratch(self):
        plan = self.plan
        plan.stage_bytes = 0
        end = smem_end(plan)          # slots, barriers, turns: what precedes the scratch
        plan.scratch_bytes = _align(self.scratch, 16)
        plan.scratch_regions = plan.group_regions
        plan.scratch_first_group = plan.first_consumer_group
        plan.scratch_offset = _align(end, 16)
        if plan.scratch_bytes:
            plan.smem_bytes = max(plan.smem_bytes,
                                  _align(smem_end(plan), 16) + (ATOM if plan.channels else 0))
        # the dots' staged B operands: one 1024-aligned region per warp group (swizzled),
        # or one that every group writes a part of (see _stage_shared)
        plan.stage_shared = self._stage_shared()
        plan.stage_offset = _align(smem_end(plan), ATOM)
        plan.stage_bytes = _align(self.stage, ATOM)
        if plan.stage_bytes:
            plan.smem_bytes = max(plan.smem_bytes, smem_end(plan) + ATOM)

    def _stage_shared(self):
        """The number of consumer groups that share one operand buffer (0: one each): when
        every staged B is a slot part copied K-major (tf32) and the groups split M, all
        of them read the same B in step, so each copies 1 / G of it into one buffer
        (``codegen/operand_stage.py``); only with the option ``shared_operand_buffer=1``,
        and not with turns (ping-pong, dot_turns)."""
        plan = self.plan
        if not self.stage_copies or not all(self.stage_copies) or plan.group_regions < 2 \
                or plan.turns or getattr(plan, "partition_dim", None) != "M" \
                or not plan.options.shared_operand_buffer:
            return 0
        return plan.num_consumers

    def run(self):
        smem = self.smem_vars()
        self.insert_reads(smem)
        self.build(smem)
        layouts = self.convert(self.solve())
        self.place_scratch()
        self.plan.layouts = layouts
        self._type_new_statements()

    def _type_new_statements(self):
        from .ir_build import retype
        retype(self.state, self.fir)


def smem_end(plan):
    """The end of what dynamic shared memory holds so far: channel slots and barriers,
    turn barriers, the layout scratch and the staged dot operands (once placed)."""
    end = 0
    for ch in plan.channels:
        end = max(end, ch.bar_offset + 16 * ch.num_slots)
    if plan.turns:
        end = max(end, plan.turn_offset + 16 * plan.num_consumers)
    if getattr(plan, "scratch_bytes", 0):
        end = max(end, plan.scratch_offset + plan.scratch_regions * plan.scratch_bytes)
    if getattr(plan, "stage_bytes", 0):
        end = max(end, plan.stage_offset + plan.stage_regions * plan.stage_bytes)
    return end


def operands_of_getattr(method):
    """The tile a bound ``x.astype`` was taken from, as an operand of the getattr."""
    if isinstance(method, ir.Expr) and method.op == "getattr":
        return [_Operand(method.value, lambda new: setattr(method, "value", new))]
    return []


@ws_pass
class AssignLayouts(WSPass):
    _name = "ws_layouts"

    def run(self, state):
        _Layouts(self, state).run()
