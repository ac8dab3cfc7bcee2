"""Pass 8 — lower tile and stage ops to the GPU intrinsics of :mod:`numba_ws.codegen`.

After this pass no abstract tile type is left: register tiles are :class:`FragType`,
loaded tiles :class:`SmemTileType`, and every stage op is a call of a ``gpu_*``
intrinsic with its layout constants (offsets, slot bytes, transaction bytes) as literal
ints read from the plan. The entry block initialises every channel's barriers (full:
1 arrival + TMA bytes; empty: 4 warps x ``arrivals`` consumer groups) before the warp-group dispatch,
and the kernel gets one more argument, ``__ws_tmaps``: the address of the TMA
descriptors (128 bytes each, ``plan.tmaps`` order) that the launcher encodes.

The lowering of each language op is :data:`numba_ws.codegen.lowering.LOWERING`.
Below sm_90 (``plan.cc``; every channel is cp.async or ld.global there) the barrier waits are
``mbarrier.test_wait`` loops, the producer commits without ``fence.proxy.async``, the
dot is ldmatrix + mma.sync and ``ws_dot_wait`` lowers to nothing. The intrinsics take
``arch = 10 * major + minor`` as a literal argument.
"""
import operator

from numba.cuda import types
from numba.cuda.core import ir

from ..codegen import channel_ops as cg
from ..codegen import cp_async_ops as ca
from ..codegen import debug as dbg
from ..codegen import ldg_ops as ldg
from ..codegen.setmaxnreg import setmaxnreg_dec, setmaxnreg_inc
from ..codegen.wgmma import wgmma_wait_group
from ..codegen.lowering import LOWERING
from ..codegen.operand_stage import gpu_tile_stage
from ..language import core, stage_ops as so
from ..language.types import TileType
from .base import WSPass, ws_pass
from .ir_build import retype
from .ir_build import StmtBuilder
from .ir_tools import tile_op

TMAPS_ARG = "__ws_tmaps"
_STUB_NAMES = {stub: name for name, stub in so.STAGE_STUBS.items()}


def _callee(fir, expr):
    d = fir.get_definition(expr.func)
    return d.value if isinstance(d, (ir.Global, ir.FreeVar)) else None


def _literal(fir, var):
    return fir.get_definition(var).value


class _Lowerer:
    def __init__(self, pass_, state):
        self.p, self.state, self.plan, self.fir = pass_, state, state.ws, state.func_ir
        self.tmaps_var = None
        self.arch = 10 * self.plan.cc[0] + self.plan.cc[1]

    def tmap_index(self, array, part, transposed):
        """Index in ``plan.tmaps`` of the map (array, (box rows, box cols), transposed,
        swizzle bytes) a part's boxes are read through; added when new."""
        key = (array, (part["phys"][0], part["box_cols"]), transposed, part["swizzle"])
        if key not in self.plan.tmaps:
            self.plan.tmaps.append(key)
        return self.plan.tmaps.index(key)

    def stage(self, stmt, b, name):
        """New statements for a stage-op call, or None to keep it."""
        fir, plan, args = self.fir, self.plan, stmt.value.args
        if name in ("ws_tile_read", "ws_tile_convert", "ws_tile_stage"):
            return self.register_tile(stmt, b, name)
        ch = plan.channels[_literal(fir, args[0])] if name not in (
            "ws_warp_group", "ws_dot_wait", "ws_dot_fence", "ws_reg_alloc",
            "ws_reg_dealloc", "ws_turn_wait", "ws_turn_pass") else None
        full_off = ch.bar_offset if ch else 0
        empty_off = full_off + 8 * ch.num_slots if ch else 0
        c = b.const
        target = stmt.target
        tma = ch is not None and ch.lowering == "tma"
        lanes = cg.release_lanes(ch.lowering) if ch else 1
        fence = int(tma and self.arch >= 90 and ch.id in self.generic_reads)
        if name == "ws_producer_commit":
            if tma:
                return []  # the transaction count completes the full barrier
            commit = ldg.gpu_ldg_commit if ch.lowering == "ld.global" else \
                ca.gpu_cp_async_commit   # cp.async copies in the channel: wait for them
            return b.call(commit, [c(full_off), args[1], c(self.arch)], target=target)
        if name in ("ws_turn_wait", "ws_turn_pass"):
            turns, tokens = plan.turn_offset, plan.turn_offset + 8 * plan.num_consumers
            if name == "ws_turn_wait":
                timeout = dbg.wait_timeout()    # NUMBA_WS_DEBUG_BARRIERS: bounded wait
                if timeout is not None:
                    return b.call(dbg.gpu_turn_wait_debug, [
                        c(turns), c(tokens), args[0], args[1], c(self.arch), c(timeout)],
                        target=target)
                return b.call(cg.gpu_turn_wait, [c(turns), c(tokens), args[0], args[1],
                                                 c(self.arch)], target=target)
            return b.call(cg.gpu_turn_pass, [c(turns), c(tokens), args[0], args[1]],
                          target=target)
        if name == "ws_warp_group":
            return b.call(cg.gpu_warp_group, [], target=target)
        timeout = dbg.wait_timeout() if name in (
            "ws_producer_acquire", "ws_consumer_wait") else None
        if name == "ws_producer_acquire":
            if timeout is not None and tma:
                return b.call(dbg.gpu_producer_acquire_debug, [
                    c(empty_off), c(full_off), args[1], args[2], c(ch.tx_bytes), c(ch.id),
                    c(timeout)], target=target)
            if timeout is not None:
                return b.call(dbg.gpu_cp_async_acquire_debug, [
                    c(empty_off), args[1], args[2], c(self.arch), c(ch.id), c(timeout)],
                    target=target)
            if not tma:
                return b.call(ca.gpu_cp_async_acquire, [c(empty_off), args[1], args[2],
                                                        c(self.arch)], target=target)
            return b.call(cg.gpu_producer_acquire, [c(empty_off), c(full_off), args[1], args[2],
                                                    c(ch.tx_bytes)], target=target)
        if name == "ws_consumer_wait":
            if timeout is not None:
                return b.call(dbg.gpu_consumer_wait_debug, [
                    c(full_off), args[1], args[2], c(self.arch), c(ch.id), c(timeout)],
                    target=target)
            return b.call(cg.gpu_consumer_wait, [c(full_off), args[1], args[2], c(self.arch)],
                          target=target)
        if name == "ws_consumer_release":
            return b.call(cg.gpu_consumer_release, [c(empty_off), args[1], c(lanes),
                                                    c(fence)], target=target)
        if name == "ws_consumer_release_prev":
            return b.call(cg.gpu_consumer_release_prev, [c(empty_off), args[1], c(lanes),
                                                         c(fence)], target=target)
        if name == "ws_dot_fence":
            from ..codegen.tile_ops import gpu_frag_fence
            return b.call(gpu_frag_fence, [args[0], c(_literal(fir, args[1]))],
                          target=target)
        if name == "ws_dot_wait":
            if self.arch < 90:
                return []  # mma.sync is synchronous: nothing in flight
            return b.call(wgmma_wait_group, [args[0]], target=target)   # literal n
        if name in ("ws_reg_alloc", "ws_reg_dealloc"):
            fn = setmaxnreg_inc if name == "ws_reg_alloc" else setmaxnreg_dec
            return b.call(fn, [args[0]], target=target)
        if name == "ws_view":
            from ..codegen.tile_ops import gpu_smem_trans, gpu_view
            member, part, dst = self.view_part(ch, args[2], b)
            stored_cols = part.get("phys_cols", part["phys"][-1])
            layout = [c(stored_cols), c(part["box_cols"]), c(int(part.get("xor", True)))]
            if not member["transposed"]:
                return b.call(gpu_view, [dst, c(ch.slot_bytes), args[1], args[3], args[4]]
                              + layout, target=target)
            stored = b.tuple([c(n) for n in part["phys"]])
            view = b.call(gpu_view, [dst, c(ch.slot_bytes), args[1], stored, args[4]]
                          + layout)
            return b.call(gpu_smem_trans, [view], target=target)
        member, part = ch.part(_literal(fir, args[2]))
        dst = ch.smem_offset + part["slot_offset"]
        if name in ("ws_tma_copy", "ws_cp_async_copy"):
            # (row, col) of the part as stored: a 1-D load is row 0 of a (1, N) view
            offs = fir.get_definition(args[4]).items
            tr = member["transposed"]
            row, col = (c(0), offs[0]) if len(offs) == 1 else (offs[::-1] if tr else offs)
        if name == "ws_tma_copy":
            idx = self.tmap_index(member["array"], part, tr)
            box_bytes = part["phys"][0] * part["box_cols"] * member["dtype"].itemsize
            return b.call(cg.gpu_tma_copy, [
                c(dst), c(ch.slot_bytes), args[1], self.tmaps_var, c(idx), c(full_off),
                row, col, c(part["boxes"]), c(part["box_cols"]), c(box_bytes)], target=target)
        if name == "ws_cp_async_copy":   # lower_loads chose the member's path
            shape = args[5] if len(offs) == 2 and not tr else \
                b.tuple([c(n) for n in part["phys"]])
            if member["path"] == "ld.global":
                return b.call(ldg.gpu_ldg_copy, [
                    c(dst), c(ch.slot_bytes), args[1], args[3], row, col, shape,
                    c(member["vec"]), c(int(tr)), c(part["phys_cols"]), c(part["box_cols"]),
                    c(int(part["xor"]))], target=target)
            return b.call(ca.gpu_cp_async_copy, [
                c(dst), c(ch.slot_bytes), args[1], args[3], row, col, shape,
                c(member["vec"]), c(int(tr)), c(part["phys_cols"]), c(part["box_cols"]),
                c(int(part["xor"])), c(int(member["dot"]))], target=target)
        raise self.p.error(f"no GPU lowering for stage op {name}", stmt.loc)

    def view_part(self, ch, part_var, b):
        """(member, part, byte offset var) of a ``ws_view``'s part: a literal part id, or
        in the shared consumer clone ``$ws_group + first`` (code_partition), whose
        offset is ``first``'s plus ``$ws_group`` times the parts' spacing."""
        d = self.fir.get_definition(part_var)
        if isinstance(d, ir.Const):
            member, part = ch.part(d.value)
            return member, part, b.const(ch.smem_offset + part["slot_offset"])
        if not (isinstance(d, ir.Expr) and d.op == "binop"):
            raise self.p.error(f"ws_view: part {part_var.name} is neither a constant nor "
                               "$ws_group + constant (code_partition writes one of them)")
        group, first = d.lhs, _literal(self.fir, d.rhs)
        member, part = ch.part(first)
        offsets = [p["slot_offset"] for p in member["parts"]]
        step = offsets[1] - offsets[0] if len(offsets) > 1 else 0
        if any(o != offsets[0] + i * step for i, o in enumerate(offsets)):
            raise self.p.error(f"the parts of {member['var']} are not evenly spaced in "
                               f"their slot ({offsets}): use shared_consumer_body=0")
        spacing = b.binop(operator.mul, group, b.const(step))
        return member, part, b.binop(operator.add, spacing,
                                     b.const(ch.smem_offset + offsets[0]))

    def tile(self, stmt, b, op):
        rule = LOWERING.get(op)
        if rule is None:
            return None
        return rule(self, stmt, b)

    def register_tile(self, stmt, b, name):
        """The layouts pass's ops: a slot part read into registers, a layout conversion,
        a dot's B operand written from registers to the operand buffer."""
        from ..codegen import regtile as rt
        from ..codegen.lowering import scratch_args
        args = stmt.value.args
        if name == "ws_tile_stage":
            plan, c = self.plan, b.const
            return b.call(gpu_tile_stage, [args[0], c(plan.stage_offset), c(plan.stage_bytes),
                                           c(plan.first_consumer_group), c(self.arch),
                                           c(plan.stage_shared)], target=stmt.target)
        layout = b.glob(self.plan.layouts[stmt.target.name], "layout")
        if name == "ws_tile_read":
            return b.call(rt.gpu_smem_load, [args[0], layout], target=stmt.target)
        return b.call(rt.gpu_tile_convert, [args[0], layout, args[1]] + scratch_args(self, b),
                      target=stmt.target)

    def check_layouts(self):
        """Every register tile has the layout the layouts pass chose (the intrinsics'
        typing derives result layouts from their operands: a mismatch is a pass bug)."""
        from ..language.types import FragType
        for name, layout in self.plan.layouts.items():
            ty = self.state.typemap.get(name)
            if isinstance(ty, FragType) and ty.layout != layout:
                raise self.p.error(f"register tile {name}: typed {ty.layout.name}, but the "
                                   f"layouts pass chose {layout.name}")

    def channels_read_into_registers(self):
        """Ids of the channels whose slot views are read with ``ld.shared``: by a
        ``ws_tile_read`` (the layouts pass's reads; a view reached through anything but
        ``ws_view`` and calls on it counts every channel) or by a ``ws_tile_stage`` whose
        operand is a view (a tf32 B copied K-major; a register operand reads no slot)."""
        fir, found = self.fir, set()
        every = {ch.id for ch in self.plan.channels}
        for block in fir.blocks.values():
            for stmt in block.body:
                if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr)
                        and stmt.value.op == "call"):
                    continue
                op = _STUB_NAMES.get(_callee(fir, stmt.value))
                if op == "ws_tile_read":
                    ch = self._view_channel(stmt.value.args[0])
                    if ch is None:
                        return every
                    found.add(ch)
                elif op == "ws_tile_stage":
                    ch = self._view_channel(stmt.value.args[0], direct=True)
                    if ch is not None:
                        found.add(ch)
        return found

    def _view_channel(self, var, direct=False):
        """The channel id of the ``ws_view`` that ``var`` is (through copies and, unless
        ``direct``, calls on it such as ``ws.trans``), or None."""
        fir = self.fir
        for _ in range(16):
            try:
                d = fir.get_definition(var)
            except KeyError:        # several definitions (a loop-carried view)
                return None
            if isinstance(d, ir.Var):
                var = d
                continue
            if isinstance(d, ir.Expr) and d.op == "call" and d.args:
                if _STUB_NAMES.get(_callee(fir, d)) == "ws_view":
                    return _literal(fir, d.args[0])
                if direct and _callee(fir, d) is not core.trans:
                    return None
                var = d.args[0]
                continue
            return None
        return None

    def run(self):
        fir = self.fir
        self.generic_reads = self.channels_read_into_registers()
        entry = min(fir.blocks)
        scope, loc = fir.blocks[entry].scope, fir.blocks[entry].loc
        self.tmaps_var = ir.Var(scope, TMAPS_ARG, loc)
        for block in fir.blocks.values():
            body = []
            for stmt in block.body:
                new = None
                if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr) \
                        and stmt.value.op == "call":
                    b = StmtBuilder(block.scope, stmt.loc, "gpu")
                    callee = _callee(fir, stmt.value)
                    if callee in _STUB_NAMES:
                        new = self.stage(stmt, b, _STUB_NAMES[callee])
                    else:
                        op = tile_op(stmt, self.state.typemap)
                        if op is not None:
                            new = self.tile(stmt, b, op)
                    if new is not None:
                        body.extend(b.body)
                        continue
                body.append(stmt)
            block.body = body
        self._prologue(fir.blocks[entry], scope, loc)
        if self.plan.staged:
            self._drain_bulk_stores()
        self._drop_dead_methods()

    def _drain_bulk_stores(self):
        """Staged stores (``codegen/staged_store.py``): before each return, every thread
        waits until its bulk stores have read shared memory (a no-op in threads that
        issued none)."""
        from ..codegen.tma import tma_store_wait_read0
        for block in self.fir.blocks.values():
            if isinstance(block.terminator, ir.Return):
                b = StmtBuilder(block.scope, block.terminator.loc, "drain")
                b.call(tma_store_wait_read0, [])
                block.body[-1:-1] = b.body

    def _drop_dead_methods(self):
        """Remove ``tile.astype`` method lookups whose call was replaced."""
        used = {v.name for blk in self.fir.blocks.values() for s in blk.body
                for v in s.list_vars() if not (isinstance(s, ir.Assign) and v is s.target)}
        for blk in self.fir.blocks.values():
            blk.body = [s for s in blk.body if not (
                isinstance(s, ir.Assign) and isinstance(s.value, ir.Expr)
                and s.value.op == "getattr" and s.value.attr == "astype"
                and s.target.name not in used)]

    def _prologue(self, block, scope, loc):
        b = StmtBuilder(scope, loc, "init")
        n_args = len(self.state.args)
        b.assign(ir.Arg(TMAPS_ARG, n_args, loc), target=self.tmaps_var)
        for ch in self.plan.channels:
            b.call(cg.gpu_init_channel, [b.const(ch.bar_offset),
                                         b.const(ch.bar_offset + 8 * ch.num_slots),
                                         b.const(ch.num_slots),
                                         b.const(1 if ch.lowering == "tma" else ca.PRODUCER_THREADS),
                                         b.const(cg.WARPS_PER_GROUP * ch.arrivals
                                                 * cg.release_lanes(ch.lowering))])
        if self.plan.turns:
            g = self.plan.num_consumers
            b.call(cg.gpu_init_turns, [b.const(self.plan.turn_offset),
                                       b.const(self.plan.turn_offset + 8 * g), b.const(g)])
        if dbg.wait_timeout() is not None:   # the text the launcher reports a timeout with
            b.call(dbg.gpu_debug_info, [b.const(dbg.info_text(self.plan))])
        b.call(cg.gpu_barriers_ready, [b.const(self.arch)])
        args = [s for s in block.body if isinstance(s, ir.Assign) and isinstance(s.value, ir.Arg)]
        rest = [s for s in block.body if s not in args]
        block.body = args + b.body + rest


@ws_pass
class LowerTiles(WSPass):
    _name = "ws_lower_tiles"

    def run(self, state):
        dbg.drop_releases(state)   # NUMBA_WS_DEBUG_DROP_RELEASE only: a broken schedule
        lowerer = _Lowerer(self, state)
        lowerer.run()
        fir = state.func_ir
        fir.arg_names = tuple(fir.arg_names) + (TMAPS_ARG,)
        fir.arg_count += 1
        state.args = tuple(state.args) + (types.uint64,)
        retype(state, fir)
        lowerer.check_layouts()
        leftover = sorted({str(t) for t in state.typemap.values() if isinstance(t, TileType)})
        if leftover:
            raise self.error(f"tiles left without a GPU form after lowering: {leftover}")
