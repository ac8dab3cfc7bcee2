"""Pass 5 — load lowering: TMA or cp.async per channel, and the shared-memory layout.

TMA needs sm_90 and an array whose last dimension is contiguous with a 16-byte aligned
base and 16-byte multiple strides (``plan.array_info`` from the launch says so per
array); otherwise cp.async. Every part of a slot is stored as in the 128-byte swizzle
that TMA writes and wgmma reads: rows of 128 bytes in boxes of ``128 / itemsize``
columns, each box ``rows * 128`` bytes, every part aligned to 1024 bytes; a TMA-loaded
part whose rows are 64 or 32 bytes (e.g. an fp16 A tile with BK=32) uses that swizzle
width instead (``part["swizzle"]``). Layout of the
dynamic shared memory: the slots of every channel, then per channel ``num_slots`` full
barriers and ``num_slots`` empty barriers (8 bytes each); with ping-pong consumers, G
turn barriers then G 8-byte tokens at ``plan.turn_offset``.

A column-major array (``plan.array_info[...]["transposed"]``) is read (TMA or cp.async)
through its transposed view: the part is stored as ``phys`` = its shape reversed (K contiguous) and
consumers see it as a ``trans`` view. Sets, per channel: ``lowering``, ``slot_bytes``,
``smem_offset``, ``bar_offset``; per member ``transposed``; per part its ``phys`` shape,
``offset`` in the slot and ``boxes``; ``plan.smem_bytes``; rewrites
``ws_copy`` into ``ws_tma_copy`` / ``ws_cp_async_copy``.
"""
from numba.cuda.core import ir

from ..codegen.swizzle import SWIZZLE_BYTES, TMA_SWIZZLES, swizzle_for
from ..language import stage_ops as so
from .base import WSPass, ws_pass
from .ir_build import retype_call, set_type

ATOM = 1024


def _align(x, a):
    return (x + a - 1) // a * a


def layout_part(shape, itemsize):
    """(bytes, boxes, box_cols, swizzle) of one 2-D part in the swizzled layout (rows of
    ``swizzle`` bytes per box, see ``codegen.swizzle.swizzle_for``), or None."""
    rows = shape[0] if len(shape) == 2 else 1
    cols = shape[-1]
    swizzle = swizzle_for(cols * itemsize)
    if swizzle is None:
        return None
    box_cols = swizzle // itemsize
    return rows * cols * itemsize, cols // box_cols, box_cols, swizzle


def tma_allowed(plan, array):
    info = plan.array_info.get(array)
    if plan.cc[0] < 9:
        return False, f"sm_{plan.cc[0]}{plan.cc[1]} has no TMA"
    if info is None:
        return True, "assumed (no launch arguments seen)"
    return info["tma_ok"], info["why"]


@ws_pass
class LowerLoads(WSPass):
    _name = "ws_lower_loads"

    def run(self, state):
        plan = state.ws
        offset = 0
        for ch in plan.channels:
            slot = 0
            kinds = set()
            for member in ch.members:
                ok, why = tma_allowed(plan, member["array"])
                kinds.add("tma" if ok else "cp.async")
                member["why"] = why
                info = plan.array_info.get(member["array"], {})
                member["vec"] = info.get("vec", 16)
                member["transposed"] = bool(info.get("transposed"))
                for part in member["parts"]:
                    # a column-major array's tile lands transposed (its rows are K)
                    part["phys"] = tuple(part["shape"][::-1]) if member["transposed"] \
                        else tuple(part["shape"])
                    lay = layout_part(part["phys"], member["dtype"].itemsize)
                    if lay is None:
                        raise self.error(
                            f"tile {member['var']} part {part['phys']} of {member['dtype']} "
                            "(as stored in shared memory): its last dimension must span a "
                            f"multiple of {min(TMA_SWIZZLES)} bytes "
                            f"({min(TMA_SWIZZLES) // member['dtype'].itemsize} elements) "
                            "for the swizzled shared-memory layout; use a larger block size",
                            ch.loads[0].loc)
                    part["bytes"], part["boxes"], part["box_cols"], part["swizzle"] = lay
                    part["slot_offset"] = slot
                    slot = _align(slot + part["bytes"], ATOM)
            ch.lowering = "tma" if kinds == {"tma"} else "cp.async"
            if ch.lowering == "cp.async":
                self._check_cp_async_layout(ch)
            ch.slot_bytes = slot
            ch.smem_offset = offset
            offset += slot * ch.num_slots
        for ch in plan.channels:
            ch.bar_offset = offset
            offset += 16 * ch.num_slots
        if plan.ping_pong:   # one turn barrier and one token per consumer group
            plan.turn_offset = offset
            offset += 16 * plan.num_consumers
        plan.smem_bytes = _align(offset, 16) + (ATOM if plan.channels else 0)  # + base alignment slack
        self._rewrite_copies(state)

    def _check_cp_async_layout(self, ch):
        """cp.async (and mma.sync) address the 128-byte swizzle only."""
        for member in ch.members:
            for part in member["parts"]:
                if part["swizzle"] != SWIZZLE_BYTES:
                    n = SWIZZLE_BYTES // member["dtype"].itemsize
                    raise self.error(
                        f"tile {member['var']} part {part['phys']} of {member['dtype']}: "
                        f"rows of {part['phys'][-1]} elements need the "
                        f"{part['swizzle']}-byte swizzle, which only TMA writes, but this "
                        f"channel loads with cp.async ({member['why']}); use a block "
                        f"size whose last dimension is a multiple of {n} elements",
                        ch.loads[0].loc)

    def _rewrite_copies(self, state):
        plan = state.ws
        fir = state.func_ir
        for block in fir.blocks.values():
            for stmt in block.body:
                if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr)
                        and stmt.value.op == "call"):
                    continue
                fn = fir.get_definition(stmt.value.func)
                if isinstance(fn, ir.Global) and fn.value is so.ws_copy:
                    ch = plan.channels[fir.get_definition(stmt.value.args[0]).value]
                    new = so.ws_tma_copy if ch.lowering == "tma" else so.ws_cp_async_copy
                    fn.value, fn.name = new, new.__name__
                    set_type(state.typemap, stmt.value.func.name,
                             state.typingctx.resolve_value_type(new))
                    set_type(state.typemap, stmt.target.name, retype_call(state, stmt.value))
