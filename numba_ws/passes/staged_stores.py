"""Pass 7b — staged stores (option ``tma_store``): which accumulator stores go through a
shared-memory staging buffer and TMA (``codegen/staged_store.py``), and where the buffer
lives.

``tma_store=1``: every tile of a staged ``ws.store`` goes that way, and a staged
``ws.atomic_add`` becomes bulk reduce-adds. ``tma_store=2``: only the tiles
that the direct epilogue's fast path cannot take (edge tiles: ragged M / N, negative
offsets) go through TMA, which clips them, instead of one bounds-checked scalar store per
element: interior tiles run the same code as with 0, the PTX loses the unrolled checked
path (the 128x256 GEMM's PTX 87 -> 80 KB, ptxas 0.30 -> 0.18 s on the CPU VM), and the
buffer is reserved only where it costs no CTA per SM. ``tma_store=3`` ("where safe"): every
tile of a ``ws.store`` outside loops, like 1, but only when the buffer costs no CTA per SM
and the kernel neither loads nor stores the same array elsewhere (a bulk store completes
asynchronously, so a later read of the array in the kernel could see old values); atomic
adds and stores in loops stay direct (in a persistent tile loop the staged code made
ptxas spill a 40-register producer, 16-40 B, 2026-12-06); the default.
``tma_store=0``: direct stores only.

A ``ws.store(array, offsets, tile)`` (or, with 1, ``ws.atomic_add(...)``) is staged when:
sm_90; no mask; ``tile`` is in the accumulator layout (rows a multiple of 64 up to 256
per consumer group, columns a multiple of 64); its column offset is known to be a
multiple of 16 bytes (``passes/offset_align.py``: TMA faults otherwise); the array is a
2-byte-element kernel parameter that TMA can write (``plan.array_info``: row-major,
16-byte aligned base and row pitch). Every other store keeps the direct path
(``codegen/epilogue.py``); ``plan.notes`` says why, for each one.

The buffer: one region per consumer group (one when fused) of ``staging_bytes`` at
``staging_offset`` (1024-aligned, after everything else in dynamic shared memory). A
store writes its tile in chunks of ``chunk_cols`` columns: the whole tile when the
regions fit under the shared-memory limit, else the widest half / quarter / ... of it
(whole 64-column boxes) that fits; a store for which not even one box fits stays direct.
The bulk stores complete asynchronously (only their reads of shared memory are waited
for): a kernel that loads what it stored through TMA may read the old values.
Sets ``plan.staged`` (target variable name of each staged store -> its chunk columns),
``plan.staging_offset``, ``plan.staging_bytes`` (per region: ``plan.group_regions``,
the first at warp group ``plan.first_consumer_group``), and grows ``plan.smem_bytes``.
"""
from collections import Counter

from .base import WSPass, ws_pass
from numba.cuda.core.analysis import compute_cfg_from_blocks

from .channels import _loop_blocks, parameter_name
from .ir_tools import STORE_OPS, tile_op
from .layouts import smem_end
from .lower_loads import ATOM, tma_allowed
from .offset_align import offset_alignment
from .verify import smem_limit
from ..codegen import layouts as lay
from ..codegen.staged_store import box_columns
from ..runtime.options import (REGISTER_FILE, TMA_STORE_ALL, TMA_STORE_DIRECT,
                               TMA_STORE_EDGES, TMA_STORE_WHERE_SAFE)


#: Shared memory per SM on sm_90 and what the system reserves per CTA (bytes).
SM_SMEM = 228 * 1024
CTA_RESERVED = 1024


def _align(x, a):
    return (x + a - 1) // a * a


def _refusal(plan, state, stmt):
    """Why ``stmt`` (a ws.store) cannot be staged, or None; and (array, rows, cols)."""
    array, _, tile, *mask = stmt.value.args
    if mask:
        return "a masked store", None
    ty, arr_ty = state.typemap[tile.name], state.typemap[array.name]
    layout = plan.layouts.get(tile.name)
    shape = getattr(ty, "shape", ())
    if len(shape) != 2 or not lay.fits_acc(shape) or layout != lay.acc(*shape):
        return "not an accumulator-layout tile", None
    rows, cols = shape
    if getattr(arr_ty, "ndim", 0) != 2 or arr_ty.dtype.bitwidth != 16:
        return f"{arr_ty}: stmatrix writes 2-D arrays of 2-byte elements", None
    if rows > 256 or cols % box_columns(2):
        return f"a ({rows}, {cols}) tile: a TMA box holds <= 256 rows of 64 columns", None
    col_bytes = (offset_alignment(stmt, -1, state.func_ir, state.typemap)
                 * (arr_ty.dtype.bitwidth // 8))
    if col_bytes % 16:
        # a TMA box whose innermost coordinate is not a multiple of 16 bytes faults (an
        # illegal instruction: the GPU fuzzer's store at ``c0 + 1``, H100, 2026-12-07)
        return (f"its column offset is only {col_bytes}-byte aligned (TMA coordinates "
                "need 16 bytes)"), None
    name = parameter_name(state.func_ir, array)
    ok, why = tma_allowed(plan, name)
    if not ok:
        return f"TMA cannot write {name!r} ({why})", None
    if plan.array_info.get(name, {}).get("transposed"):
        return f"{name!r} is column-major", None
    return None, (name, rows, cols)


def stores(func_ir, typemap):
    """(statement, inside a loop) of every ws.store / ws.atomic_add of the partitioned IR."""
    loops = _loop_blocks(compute_cfg_from_blocks(func_ir.blocks))
    for label, block in func_ir.blocks.items():
        for stmt in block.body:
            if tile_op(stmt, typemap) in STORE_OPS:
                yield stmt, label in loops


@ws_pass
class StageStores(WSPass):
    _name = "ws_staged_stores"

    def run(self, state):
        plan = state.ws
        plan.staged = {}
        mode = plan.options.tma_store
        if mode == TMA_STORE_DIRECT:
            return
        if plan.cc[0] < 9:
            if mode == TMA_STORE_ALL:
                plan.notes.append(f"tma_store=1: sm_{plan.cc[0]}{plan.cc[1]} has no TMA "
                                  "store; every store is direct")
            return
        regions = plan.group_regions
        plan.staging_offset = _align(smem_end(plan), ATOM)
        room = smem_limit(plan.cc) - ATOM - plan.staging_offset   # ATOM: base slack
        if mode != TMA_STORE_ALL:
            room = min(room, _room_keeping_occupancy(plan))
        per_region = max(0, room // regions)
        need = 0
        found = list(stores(state.func_ir, state.typemap))
        touched = _arrays_touched(plan, state, [stmt for stmt, _ in found])
        for stmt, in_loop in found:
            line = f"line {stmt.loc.line}: " if stmt.loc else ""
            why, what = _refusal(plan, state, stmt)
            if not why and mode != TMA_STORE_ALL:
                why = _refusal_where_safe(mode, in_loop, tile_op(stmt, state.typemap),
                                          what[0], touched[what[0]])
            if why:
                plan.notes.append(f"tma_store: {line}direct store ({why})")
                continue
            name, rows, cols = what
            chunk = cols
            while chunk % (2 * box_columns(2)) == 0 and rows * chunk * 2 > per_region:
                chunk //= 2
            if rows * chunk * 2 > per_region:
                keep = "" if mode == TMA_STORE_ALL else " without losing a CTA per SM"
                plan.notes.append(f"tma_store: {line}direct store (no shared memory left "
                                  f"for one {rows}x{box_columns(2)} staging box{keep})")
                continue
            plan.staged[stmt.target.name] = chunk
            need = max(need, rows * chunk * 2)
            how = "TMA reduce-adds" if tile_op(stmt, state.typemap) == "atomic_add" else "TMA"
            which = "edge tiles" if mode == TMA_STORE_EDGES else f"{name!r}"
            plan.notes.append(f"tma_store: {line}{which} through shared memory + {how} "
                              f"({cols // chunk} chunk(s) of {rows}x{chunk})")
        if need:
            plan.staging_bytes = need
            plan.smem_bytes = max(plan.smem_bytes,
                                  plan.staging_offset + regions * need + ATOM)


def _refusal_where_safe(mode, in_loop, op, name, uses):
    """Why modes 2 and 3 leave a store that TMA could write direct, or None. ``uses``:
    how many loads and stores name its array ``name``."""
    if op != "store":
        return "an atomic add: only tma_store=1 stages it"
    if in_loop:
        # in a (persistent tile) loop the staged code made ptxas spill a 40-register
        # producer (16-40 B, 2026-12-06), so there only tma_store=1 stages
        return "inside a loop: only tma_store=1 stages it"
    if mode == TMA_STORE_WHERE_SAFE and uses > 1:
        return f"the kernel also loads or stores {name!r} elsewhere"
    return None


def _arrays_touched(plan, state, store_stmts):
    """{kernel parameter: how many loads and stores name it}: the loads of the original
    typed IR (``plan.stmts``; by now they are channel copies) and ``store_stmts``."""
    loads = [parameter_name(plan.original_ir, stmt.value.args[0])
             for stmt, _ in plan.stmts.values()
             if tile_op(stmt, plan.original_typemap) == "load"]
    return Counter(loads + [parameter_name(state.func_ir, stmt.value.args[0])
                            for stmt in store_stmts])


def _room_keeping_occupancy(plan):
    """Bytes the buffer may take without lowering the CTAs per SM that shared memory and
    registers allow now (``SM_SMEM`` per SM, ``CTA_RESERVED`` per CTA, 64K registers)."""
    regs = max(plan.entry_registers, 1) * plan.num_threads
    by_regs = max(1, REGISTER_FILE // regs)
    now = plan.smem_bytes + CTA_RESERVED
    by_smem = SM_SMEM // now if plan.smem_bytes else by_regs
    ctas = max(1, min(by_regs, by_smem))    # 0: does not fit at all (verify says so)
    return SM_SMEM // ctas - CTA_RESERVED - ATOM - plan.staging_offset
