"""A dot's B operand held in registers, written to shared memory for the tensor cores.

wgmma (sm_90a) and the ldmatrix path of mma.sync (sm_80) read B from shared memory in
the swizzled box layout TMA writes (``codegen.swizzle.part_offset`` with ``xor``). A B
tile that is a register tile -- a masked load (``mask=ks[:, None] < K``, as Triton's
tutorial matmul writes it), a dequantized weight (``w.astype(f16) * scale``) -- goes
through the warp group's *operand buffer* (``stage_off + region * stage_bytes``, one
1024-aligned region per consumer group, placed by the layouts pass):

1. sm_90: ``wgmma.wait_group.sync.aligned 0`` (no dot of this group still reads the
   buffer); ``bar.sync 1 + tid.x / 128, 128`` (every warp of the group is past its reads);
2. each thread stores its elements (``st.shared``, 16-byte vectors where its registers
   hold consecutive columns; replicas do not store) at the element's swizzled offset;
3. sm_90: ``fence.proxy.async.shared::cta`` (generic writes -> the async proxy wgmma
   reads through); ``bar.sync`` again; the result is the buffer as a shared-memory tile.

Stored N-major (K rows of N columns, as a row-major B tile lands) when the rows span a
multiple of 32 bytes (128 on sm_80, whose mma.sync path reads only the 128-byte swizzle),
else K-major (N rows of K columns, the result a ``trans`` view). float32 (a tf32 dot's
B, which wgmma reads K-major only): always K-major; a register tile one ``st.shared.b32``
per element, a row-major B's slot part copied from the slot without registers
(:func:`_transposed_copy`, one buffer for all groups that split M). Minimum sm_80
(tf32: sm_90a).
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ..language.types import FragType, SmemTileType
from .channel_ops import _need_literals
from .layouts import itemsize as itemsize_of
from .regtile import (_coords, _elements, group_region_base, group_sync, ld_shared,
                      owner_predicate, st_shared, thread_ids, thread_offset)
from .swizzle import part_offset, swizzle_for
from .tile_ops import part_layout
from ._util import IRInt, asm

_DTYPES = (types.float16, types.bfloat16, types.float32)
#: named barrier of the consumer groups that share one operand buffer (1..5: warp groups)
SHARED_STAGE_BARRIER = 6


def staged_layout(shape, dtype, arch):
    """(phys rows, phys cols, transposed) of a (K, N) B tile in the operand buffer, or
    None when neither orientation has rows of a width the dot's reads allow."""
    k, n = shape
    itemsize = itemsize_of(dtype)

    def fits(cols):
        swz = swizzle_for(cols * itemsize)
        return swz is not None and (arch >= 90 or swz == 128)

    if fits(n) and dtype != types.float32:    # tf32: wgmma reads K-major only
        return k, n, False
    if fits(k):
        return n, k, True
    return None


@intrinsic
def gpu_tile_stage(typingctx, frag, stage_off, stage_bytes, first_group, arch, shared):
    """``ws_tile_stage(b)``: register tile ``frag`` (K, N) of fp16 / bf16 / float32, in any
    layout, written to this warp group's operand buffer; returns it as a shared-memory
    tile in the swizzled layout (see the module docstring for the barriers around it).
    A float32 slot part is copied K-major instead; with ``shared`` (literal) G > 1 the G
    consumer groups write one buffer together (:func:`_transposed_copy`)."""
    k = _need_literals("gpu_tile_stage", stage_off=stage_off, stage_bytes=stage_bytes,
                       first_group=first_group, arch=arch, shared=shared)
    if isinstance(frag, SmemTileType):
        return _transposed_copy(frag, k, sig=signature(
            SmemTileType(frag.dtype, frag.shape, (frag.shape[1], frag.shape[0], True), None),
            frag, stage_off, stage_bytes, first_group, arch, shared))
    if k["shared"] > 1:
        raise TypingError("gpu_tile_stage: a register tile has no shared buffer (layouts "
                          "pass bug)")
    if not isinstance(frag, FragType) or len(frag.shape) != 2 or frag.dtype not in _DTYPES:
        raise TypingError(f"ws.dot(a, b) on the GPU: b must be a 2-D fp16 / bf16 / float32 "
                          f"tile, got {frag}")
    itemsize = itemsize_of(frag.dtype)
    if frag.shape[0] * frag.shape[1] * itemsize > k["stage_bytes"]:
        raise TypingError(f"gpu_tile_stage: {frag.shape} needs more than the "
                          f"{k['stage_bytes']} bytes reserved (layouts pass bug)")
    phys = staged_layout(frag.shape, frag.dtype, k["arch"])
    if phys is None:
        need = "128" if k["arch"] < 90 else "32"
        raise TypingError(f"ws.dot(a, b) with b in registers {frag.shape}: b goes to shared "
                          f"memory, whose swizzled rows need K or N x {itemsize} bytes to "
                          f"be a multiple of {need}")
    rows_p, cols_p, transposed = phys
    box_cols = swizzle_for(cols_p * itemsize) // itemsize
    resty = SmemTileType(frag.dtype, frag.shape, phys, None)
    ly = frag.layout
    sig = signature(resty, frag, stage_off, stage_bytes, first_group, arch, shared)

    def codegen(context, builder, sig, args):
        tid, lane, warp = thread_ids(builder)
        base = group_region_base(context, builder, tid, k["stage_off"], k["stage_bytes"],
                             k["first_group"])
        if k["arch"] >= 90:
            asm(builder, "wgmma.wait_group.sync.aligned 0;", "~{memory}")
        group_sync(builder, tid)
        vals = _elements(builder, args[0], ly.count)
        tr, tc = thread_offset(builder, ly, lane, warp)
        owner = owner_predicate(builder, ly, lane, warp)
        for i, n in ly.runs(1 if transposed else 16 // itemsize):
            r, c = _coords(builder, ly, i, tr, tc)
            pr, pc = (c, r) if transposed else (r, c)
            off = part_offset(IRInt(builder, pr), IRInt(builder, pc), rows_p, box_cols,
                              itemsize, True)
            st_shared(builder, builder.add(base, off.value), vals[i:i + n], owner)
        if k["arch"] >= 90:
            asm(builder, "fence.proxy.async.shared::cta;", "~{memory}")
        group_sync(builder, tid)
        return base

    return sig, codegen


def _transposed_copy(view, k, sig):
    """(sig, codegen) of ``ws_tile_stage`` of a float32 slot part stored N-major (a
    row-major B tile of a tf32 dot): copied K-major into the operand buffer, shared
    memory to shared memory, without a register tile. The copying threads take units
    of 4 K rows x 1 column (thread ``t``, unit ``t + threads i``; consecutive threads
    read consecutive columns of a K row): four ``ld.shared.b32`` from the slot, one
    ``st.shared.v4.b32`` into the buffer (row n, 16-byte chunk k / 4 of the 128-byte
    swizzle: 8 consecutive rows fill all 32 banks). Barriers and fence as for a register
    tile. With ``k["shared"]`` = G > 1 (the layouts pass: G groups split M, so they read
    the same B in step) the buffer is one for all, the 128 G threads of the groups share
    the units, and the barriers are ``bar.sync 6, 128 G`` (named barrier 6: ids 1..5
    are the warp groups'), so every group's earlier dots are done before any write and
    every write is done before any group's dot. sm_90a (the tf32 wgmma)."""
    kdim, n = view.shape
    rows_s, _, box_s, xor_s = part_layout(view)
    if view.dtype != types.float32 or view.layout[2] or kdim % 4:
        raise TypingError(f"gpu_tile_stage: a slot part is copied only as an N-major float32 "
                          f"(K % 4 == 0) tile, got {view} (layouts pass bug)")
    if kdim * n * 4 > k["stage_bytes"] or swizzle_for(kdim * 4) is None:
        raise TypingError(f"ws.dot(a, b) of float32 tiles: b {view.shape} goes K-major to "
                          f"shared memory, which needs K x 4 bytes a multiple of 32")
    box_d = swizzle_for(kdim * 4) // 4
    units = kdim // 4 * n
    groups = max(1, k["shared"])
    threads = 128 * groups

    def sync(builder, tid):
        if groups > 1:
            asm(builder, f"bar.sync {SHARED_STAGE_BARRIER}, {threads};", "~{memory}")
        else:
            group_sync(builder, tid)

    def codegen(context, builder, sig, args):
        tid, _, _ = thread_ids(builder)
        # shared: one region (stride 0) and t numbers the threads of all consumer groups
        base = group_region_base(context, builder, tid, k["stage_off"],
                                 0 if groups > 1 else k["stage_bytes"], k["first_group"])
        t = IRInt(builder, builder.sub(tid, ir.Constant(tid.type, 128 * k["first_group"]))
                  if groups > 1 else builder.and_(tid, ir.Constant(tid.type, 127)))
        asm(builder, "wgmma.wait_group.sync.aligned 0;", "~{memory}")
        sync(builder, tid)
        f32 = context.get_value_type(types.float32)
        for i in range(0, units, threads):
            u = t + i
            if i + threads > units:    # the last round: extra threads repeat the last unit
                last = ir.Constant(tid.type, units - 1)
                u = IRInt(builder, builder.select(
                    builder.icmp_unsigned("<", u.value, last), u.value, last))
            col, k0 = u % n, (u // n) * 4
            vals = []
            for j in range(4):
                src = part_offset(k0 + j, col, rows_s, box_s, 4, xor_s)
                vals += ld_shared(builder, builder.add(args[0], src.value), f32, 1)
            dst = part_offset(col, k0, n, box_d, 4, True)
            st_shared(builder, builder.add(base, dst.value), vals)
        asm(builder, "fence.proxy.async.shared::cta;", "~{memory}")
        sync(builder, tid)
        return base

    return sig, codegen
