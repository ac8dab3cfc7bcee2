"""Pass 5 — load lowering: TMA, cp.async or ld.global per load, and the shared-memory layout.

Each channel member (one ``ws.load``) takes the first path that can read its array
(``plan.array_info`` from the launch: ``runtime.specialize.array_info``):
- TMA: sm_90, one contiguous dimension, a 16-byte aligned base, the other stride a
  positive multiple of 16 bytes (never a negative stride);
- cp.async (``codegen.cp_async_ops``): pieces of 16, 8 or 4 bytes along a contiguous
  dimension (``vec`` >= 4: base and row pitch 4-byte aligned, any sign), elements of 2, 4
  or 8 bytes, and for a ``ws.dot`` operand the 128-byte swizzle (the only one it writes);
- ld.global (``codegen.ldg_ops``): any 1-D or 2-D array (odd fp16 pitch, int8 / bool
  arrays, no contiguous dimension, negative strides), in pieces as wide as the alignment
  allows, any layout below.
A channel's members share one full barrier, so TMA serves a channel only when it can read
every member; otherwise each member takes cp.async or ld.global (both: 128 producer
threads arrive). ``ch.lowering`` is ``'tma'``, ``'cp.async'``, ``'ld.global'`` or
``'cp.async+ld.global'``; ``member["path"]`` is the member's and ``member["why"]`` says
why (``kernel.explain`` prints it). A 1-D load is stored as one row: ``phys`` (1, B),
read through the array viewed as (1, N).

Layout of one slot part (what ``codegen.swizzle.part_offset(row, col, rows, box_cols,
itemsize, xor)`` addresses; rows = ``phys[0]``), the same whichever path copies it:
- a member read by ``ws.dot`` (an operand, directly or through ``ws.trans``) keeps the
  tensor cores' layout: the widest of the 128 / 64 / 32-byte swizzles dividing its row
  bytes, boxes of ``swizzle / itemsize`` columns (rows whose bytes are no multiple of
  32 are an error; below sm_90 mma.sync reads the 128-byte swizzle only);
- any other member is stored in rows of ``phys_cols`` elements (its columns rounded up
  to 16 bytes: a (128, 1) fp32 tile has 16-byte rows, its extra columns read from the
  array or zero-filled, unused), swizzled the same way when those rows span a multiple
  of 32 bytes and it has a multiple of 8 rows (so that every box is a whole number of
  swizzle periods), else in plain rows (``xor`` False, TMA ``SWIZZLE_NONE``) in boxes of
  ``min(phys_cols, 256)`` columns (TMA's box limit), one after another.
Swizzled parts start on 1024 bytes (the 128-byte swizzle's period), plain ones on 128
(TMA's shared-memory alignment).

Sets, per channel: ``lowering``, ``slot_bytes``, ``smem_offset``, ``bar_offset``; per
member ``transposed`` (a column-major array, ``plan.array_info[...]["transposed"]``, is
read through its transposed view: ``phys`` is the tile's shape reversed and consumers
see a ``trans`` view), ``dot``, ``vec``, ``path``, ``why``; per part ``phys``,
``phys_cols``, ``box_cols``, ``xor``, ``swizzle`` (bytes, 0 for none), ``boxes``,
``bytes`` (what the copies bring, extra columns included), ``slot_offset``;
``plan.smem_bytes``. Dynamic shared memory: the slots of every channel, then per channel
``num_slots`` full and ``num_slots`` empty barriers (8 bytes each); with ping-pong
consumers, G turn barriers then G 8-byte tokens at ``plan.turn_offset``. Rewrites
``ws_copy`` into ``ws_tma_copy`` (TMA channels) or ``ws_cp_async_copy`` (the others:
lower_tiles picks cp.async or ld.global per member).
"""
from numba.cuda.core import ir

from ..codegen.swizzle import CHUNK_BYTES, SWIZZLE_BYTES, TMA_SWIZZLES, swizzle_for
from ..language import stage_ops as so
from .base import WSPass, ws_pass
from .ir_build import retype_call, set_type
from .ir_tools import tile_op
from .offset_align import lowbit, offset_alignment

ATOM = 1024          # alignment of swizzled parts (and of the dynamic shared memory)
PLAIN_ALIGN = 128    # alignment of plain-row parts (TMA destinations)
MAX_BOX = 256        # elements per TMA box dimension
SWIZZLE_ROWS = 8     # rows of one swizzle period


def _align(x, a):
    return (x + a - 1) // a * a


def layout_part(shape, itemsize):
    """(bytes, boxes, box_cols, swizzle) of one 2-D part in the tensor cores' swizzled
    layout (rows of ``swizzle`` bytes per box, see ``codegen.swizzle.swizzle_for``), or
    None when its rows span no multiple of 32 bytes."""
    rows = shape[0] if len(shape) == 2 else 1
    cols = shape[-1]
    swizzle = swizzle_for(cols * itemsize)
    if swizzle is None:
        return None
    box_cols = swizzle // itemsize
    return rows * cols * itemsize, cols // box_cols, box_cols, swizzle


def element_layout(phys, itemsize):
    """Layout of a part that only element-wise code reads, as a dict of the part fields
    ``phys_cols``, ``box_cols``, ``xor``, ``swizzle``, ``boxes``, ``bytes``."""
    rows, cols = phys
    phys_cols = _align(cols, CHUNK_BYTES // itemsize)
    swizzle = swizzle_for(phys_cols * itemsize)
    if swizzle is not None and rows % SWIZZLE_ROWS == 0:
        box_cols, xor = swizzle // itemsize, True
    else:
        box_cols, xor, swizzle = min(phys_cols, MAX_BOX), False, 0
        phys_cols = _align(phys_cols, box_cols)
    return {"phys_cols": phys_cols, "box_cols": box_cols, "xor": xor, "swizzle": swizzle,
            "boxes": phys_cols // box_cols, "bytes": rows * phys_cols * itemsize}


#: Element sizes the cp.async copy handles (its element fallback stores 2, 4, 8 bytes).
CP_ASYNC_ITEMSIZES = (2, 4, 8)


def tma_allowed(plan, array):
    info = plan.array_info.get(array)
    if plan.cc[0] < 9:
        return False, f"sm_{plan.cc[0]}{plan.cc[1]} has no TMA"
    if info is None:
        return True, "assumed (no launch arguments seen)"
    return info["tma_ok"], info["why"]


def cp_async_refusal(member):
    """Why cp.async cannot copy ``member`` (laid out already), or None."""
    vec, itemsize = member["vec"], member["dtype"].itemsize
    if vec == 0:
        return "no contiguous dimension"
    if vec < 4:
        return f"rows only {vec}-byte aligned, its pieces are 4, 8 or 16 bytes"
    if itemsize not in CP_ASYNC_ITEMSIZES:
        return f"{itemsize}-byte elements"
    if member["dot"]:
        narrow = sorted({p["swizzle"] for p in member["parts"]} - {SWIZZLE_BYTES})
        if narrow:
            return (f"a ws.dot operand in the {narrow[0]}-byte swizzle; it writes the "
                    f"{SWIZZLE_BYTES}-byte one")
    return None


#: Smallest inner box (bytes) of an unswizzled part that TMA is asked to load. Measured on
#: the H200 (2026-12-03 08:48, tests/gpu/test_loads_gpu.py, one process per case,
#: compute-sanitizer): SWIZZLE_NONE boxes with 16- and 32-byte rows ((128, 4) / (64, 4)
#: fp32, (4, 16) fp16, (1, 8) fp16) stop the kernel with an illegal instruction at the
#: cp.async.bulk.tensor although cuTensorMapEncodeTiled accepts their maps; 256-byte and
#: wider rows load correctly. Such narrow parts go through cp.async instead.
MIN_PLAIN_TMA_BOX_BYTES = 128


def tma_box_refusal(member):
    """Why TMA must not load ``member`` although the array allows it, or None."""
    for part in member["parts"]:
        if not part.get("xor", True) and \
                part["box_cols"] * member["dtype"].itemsize < MIN_PLAIN_TMA_BOX_BYTES:
            return (f"its unswizzled {part['box_cols'] * member['dtype'].itemsize}-byte box "
                    f"rows are under {MIN_PLAIN_TMA_BOX_BYTES} bytes (an illegal "
                    "instruction on the H200)")
    return None


def _align_to_offsets(plan, member, load):
    """``member["offset_align"]``: the bytes the contiguous dimension's offset (the load's
    and each part's) is known to be a multiple of (passes/offset_align.py); ``vec``, the
    widest piece cp.async / ld.global may use, no wider than that."""
    itemsize = member["dtype"].itemsize
    dim = 0 if member["transposed"] else -1
    elements = offset_alignment(load, dim, plan.original_ir, plan.original_typemap)
    for part in member["parts"]:
        elements = min(elements, lowbit(part["offset"][dim]))
    member["offset_align"] = align = elements * itemsize
    if member["vec"] > align:
        member["vec"] = max(itemsize, min(16, align))


def tma_offset_refusal(member):
    """Why TMA must not load ``member`` because of its offsets, or None: a box whose
    innermost coordinate is not a multiple of 16 bytes faults (an illegal instruction on
    the H200, 2026-12-03: the GPU fuzzer's 1-D and 2-D loads at ``off + 1``, ``c0 - 2``)."""
    if member["offset_align"] % 16:
        return (f"its {'row' if member['transposed'] else 'column'} offset is only "
                f"{member['offset_align']}-byte aligned (TMA coordinates need 16 bytes)")
    return None


def member_paths(plan, members):
    """[(path, why)] per member of one channel: TMA for all when TMA reads every one,
    else cp.async where it can, ld.global for the rest."""
    tma = []
    for m in members:
        ok, why = tma_allowed(plan, m["array"])
        refusal = (tma_box_refusal(m) or tma_offset_refusal(m)) if ok else None
        tma.append((False, refusal) if refusal else (ok, why))
    if all(ok for ok, _ in tma):
        return [("tma", f"TMA: {why}") for _, why in tma]
    blocker = next(m["array"] for m, (ok, _) in zip(members, tma) if not ok)
    out = []
    for member, (ok, why) in zip(members, tma):
        no_tma = (f"TMA could read {member['array']!r}, but not {blocker!r} of the same "
                  "channel" if ok else f"no TMA: {why}")
        refusal = cp_async_refusal(member)
        if refusal is None:
            out.append(("cp.async", f"cp.async ({no_tma})"))
        else:
            out.append(("ld.global", f"ld.global ({no_tma}; no cp.async: {refusal})"))
    return out


def dot_operands(plan):
    """Names (original IR) of the variables read as an a / b operand of a ``ws.dot``."""
    names = set()
    for stmt, _ in plan.stmts.values():
        if tile_op(stmt, plan.original_typemap) == "dot":
            operands = list(stmt.value.args[:2]) + [v for k, v in stmt.value.kws
                                                    if k in ("a", "b")]
            names |= {v.name for v in operands}
    return names


@ws_pass
class LowerLoads(WSPass):
    _name = "ws_lower_loads"

    def run(self, state):
        plan = state.ws
        dot_read = dot_operands(plan)
        offset = 0
        for ch in plan.channels:
            slot, align = 0, PLAIN_ALIGN
            for m, member in enumerate(ch.members):
                info = plan.array_info.get(member["array"], {})
                member["vec"] = info.get("vec", 16)
                member["transposed"] = bool(info.get("transposed"))
                member["dot"] = bool(member["aliases"] & dot_read)
                _align_to_offsets(plan, member, ch.loads[m])
                for part in member["parts"]:
                    self._lay_out(member, part, ch.loads[m].loc)
                    part_align = ATOM if part["xor"] else PLAIN_ALIGN
                    part["slot_offset"] = slot = _align(slot, part_align)
                    slot += part["bytes"]
                    align = max(align, part_align)
            for member, (path, why) in zip(ch.members, member_paths(plan, ch.members)):
                member["path"], member["why"] = path, why
            paths = {member["path"] for member in ch.members}
            ch.lowering = "+".join(p for p in ("tma", "cp.async", "ld.global") if p in paths)
            for m, member in enumerate(ch.members):
                self._check_lowering(plan, member, ch.loads[m].loc)
            ch.slot_bytes = _align(slot, align)
            ch.smem_offset = offset = _align(offset, align)
            offset += ch.slot_bytes * ch.num_slots
        for ch in plan.channels:
            ch.bar_offset = offset
            offset += 16 * ch.num_slots
        if plan.turns:   # one turn barrier and one token per consumer group
            plan.turn_offset = offset
            offset += 16 * plan.num_consumers
        plan.smem_bytes = _align(offset, 16) + (ATOM if plan.channels else 0)  # + base alignment slack
        self._rewrite_copies(state)

    def _lay_out(self, member, part, loc):
        shape, itemsize = tuple(part["shape"]), member["dtype"].itemsize
        if len(shape) == 1:
            phys = (1,) + shape
        else:   # a column-major array's tile lands transposed (its rows are K)
            phys = shape[::-1] if member["transposed"] else shape
        part["phys"] = phys
        if not member["dot"]:
            part.update(element_layout(phys, itemsize))
            return
        lay = layout_part(phys, itemsize)
        if lay is None:
            raise self.error(
                f"tile {member['var']} part {phys} of {member['dtype']} (as stored in "
                "shared memory, read by ws.dot): its last dimension must span a multiple of "
                f"{min(TMA_SWIZZLES)} bytes ({min(TMA_SWIZZLES) // itemsize} elements) for "
                "the tensor cores' swizzled layout; use a larger block size", loc)
        part["bytes"], part["boxes"], part["box_cols"], part["swizzle"] = lay
        part["phys_cols"], part["xor"] = phys[1], True

    def _check_lowering(self, plan, member, loc):
        """What the chosen copy cannot do is an error naming the tile or the array."""
        ty = plan.original_typemap.get(member["array"])
        ndim = getattr(ty, "ndim", 2)
        if ndim not in (1, 2):
            raise self.error(
                f"tile {member['var']}: cannot load the {ndim}-D array {member['array']!r} "
                "on the GPU; it loads 1-D and 2-D arrays (pass a 2-D view)", loc)
        if member["path"] == "tma":
            for part in member["parts"]:
                if part["phys"][0] > MAX_BOX:
                    raise self.error(
                        f"tile {member['var']}: {part['phys'][0]} rows per part as stored in "
                        f"shared memory, a TMA box holds at most {MAX_BOX}", loc)
            return
        if member["dot"] and plan.cc[0] < 9:   # mma.sync reads the 128-byte swizzle
            for part in member["parts"]:
                if part["swizzle"] != SWIZZLE_BYTES:
                    n = SWIZZLE_BYTES // member["dtype"].itemsize
                    raise self.error(
                        f"tile {member['var']} part {part['phys']} of {member['dtype']}: "
                        f"rows of {part['phys'][-1]} elements need the {part['swizzle']}-byte "
                        f"swizzle, but sm_{plan.cc[0]}{plan.cc[1]}'s mma.sync reads ws.dot "
                        f"operands in the {SWIZZLE_BYTES}-byte one; use a block size whose "
                        f"last dimension is a multiple of {n} elements", loc)

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
