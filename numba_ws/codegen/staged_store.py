"""The staged epilogue (option ``tma_store=1``): an accumulator-layout fragment goes to a
2-D global array through a shared-memory staging buffer and TMA, so the consumer warp
group starts its next tile while the copy engine writes this one. Minimum sm_90
(``stmatrix``, bulk tensor stores).

One warp group runs it; its buffer is ``staging_off + (tid.x / 128 - first_group) *
staging_bytes`` (the ``staged_stores`` pass sizes and places it). Per chunk of
``chunk_cols`` columns (the whole fragment when shared memory allows):

1. thread 0 of the group waits until its earlier bulk stores have read the buffer
   (``cp.async.bulk.wait_group.read 0``); the group syncs (``bar.sync 1 + tid.x/128, 128``);
2. every warp writes its 8x8 blocks, four per ``stmatrix.sync.aligned.m8n8.x4.shared.b16``
   (register pair i of a thread is row ``lane/4``, columns ``2*(lane%4)`` + 0, 1 of one
   8x8 block: exactly stmatrix's fragment), in the layout a 128-byte-swizzled TMA box
   has: box b (64 two-byte columns) at ``b * rows * 128``, row r at ``r * 128``, 16-byte
   chunk q at ``(q ^ r % 8) * 16`` (so the 8 row addresses of a block hit 8 different
   bank groups); then ``fence.proxy.async.shared::cta`` (generic writes -> async proxy);
3. the group syncs; thread 0 issues one ``cp.async.bulk.tensor.2d.global.shared::cta.
   bulk_group [map, {col, row}], [box]`` per box and ``cp.async.bulk.commit_group``.

TMA writes only the box elements inside the array, so edge tiles (ragged M / N, negative
offsets) need no other path. Before the kernel returns every thread runs
``cp.async.bulk.wait_group.read 0`` (``lower_tiles``): a CTA must not end while a copy
still reads its shared memory.
"""
from llvmlite import ir

from numba.cuda import cgutils, types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ..language.types import FragType
from . import smem as sm
from . import wgmma
from .channel_ops import emit
from .convert import cast
from .epilogue import _check_frag_store, _emit_store, check_2d_store
from .regtile import group_sync
from .tma import emit_commit, emit_reduce_add_2d, emit_store_2d, emit_wait_read0
from ._util import I32, I64, asm, literal_int, sreg

#: Bytes of one row of a staging box: the 128-byte swizzle's span.
BOX_ROW_BYTES = 128
STMATRIX = "stmatrix.sync.aligned.m8n8.x4.shared.b16 [$0], {$1, $2, $3, $4};"


def box_columns(itemsize):
    """Columns of one staging box (128 bytes of row)."""
    return BOX_ROW_BYTES // itemsize


def _c(v):
    return ir.Constant(I32, v)


@intrinsic
def gpu_frag_store_staged(typingctx, array, offsets, frag, tmaps, tmap_index, staging_off,
                          staging_bytes, first_group, chunk_cols, reduce_add):
    """``ws.store(array, offsets, acc)`` through the staging buffer and the tensor map at
    ``tmaps + 128 * tmap_index`` (box: the fragment's rows x 64 columns, 128-byte swizzle).
    ``array`` gives the element type (2 bytes); the literals place the buffer.
    ``reduce_add`` 1: ``ws.atomic_add`` instead, the boxes added to the array
    (``cp.reduce.async.bulk.tensor ... .add``, in the array's element type)."""
    consts = _literals("gpu_frag_store_staged", tmap_index=tmap_index,
                       staging_off=staging_off, staging_bytes=staging_bytes,
                       first_group=first_group, chunk_cols=chunk_cols, reduce_add=reduce_add)
    _check_staged(array, frag, consts[4])
    sig = signature(types.none, array, offsets, frag, tmaps, tmap_index, staging_off,
                    staging_bytes, first_group, chunk_cols, reduce_add)

    def codegen(context, builder, sig, args):
        _emit(context, builder, sig, args, *consts)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def gpu_frag_store_edge_staged(typingctx, array, offsets, frag, wide, tmaps, tmap_index,
                               staging_off, staging_bytes, first_group, chunk_cols):
    """``ws.store`` with option ``tma_store=2``: the direct epilogue
    (``epilogue.gpu_frag_store``, ``wide`` as there) for tiles its fast path takes, the
    staged TMA store (as :func:`gpu_frag_store_staged`) for the others: edge tiles, which
    TMA clips, instead of one bounds-checked scalar store per element."""
    consts = _literals("gpu_frag_store_edge_staged", tmap_index=tmap_index,
                       staging_off=staging_off, staging_bytes=staging_bytes,
                       first_group=first_group, chunk_cols=chunk_cols)
    _check_staged(array, frag, consts[4])
    sig = signature(types.none, array, offsets, frag, wide, tmaps, tmap_index, staging_off,
                    staging_bytes, first_group, chunk_cols)

    _check_frag_store(array, frag, wide)

    def codegen(context, builder, sig, args):
        direct = signature(types.none, array, offsets, frag, wide)
        staged = signature(types.none, array, offsets, frag, tmaps)
        _emit_store(context, builder, direct, args[:4], None, edge=lambda: _emit(
            context, builder, staged, [args[0], args[1], args[2], args[4]], *consts, 0))
        return context.get_dummy_value()

    return sig, codegen


def _literals(name, **tys):
    """The Python ints of an intrinsic's literal arguments, in keyword order."""
    return [literal_int(name, arg, ty) for arg, ty in tys.items()]


def _check_staged(array, frag, chunk_cols):
    check_2d_store(array, frag, "staged store")
    if array.dtype.bitwidth != 16:
        raise TypingError(f"staged store: {array.dtype} elements (stmatrix writes 2-byte ones)")
    rows, cols = frag.shape
    if rows % 64 or rows > 256 or cols % chunk_cols or chunk_cols % box_columns(2):
        raise TypingError(f"staged store: a ({rows}, {cols}) fragment in chunks of "
                          f"{chunk_cols} columns (rows a multiple of 64 up to 256, chunks "
                          f"of whole 64-column boxes)")


def _emit(context, builder, sig, args, tmap_index, staging_off, staging_bytes, first_group,
          chunk_cols, reduce_add):
    array, frag = sig.args[0], sig.args[2]
    rows, cols = frag.shape
    per_block = cols // 2                       # registers per 64-row block
    vals = [cast(context, builder, v, frag.dtype, array.dtype)
            for v in wgmma._unpack(builder, args[2], frag.count)]
    pair_ty = ir.VectorType(context.get_value_type(array.dtype), 2)

    def packed(idx):
        vec = ir.Constant(pair_ty, ir.Undefined)
        vec = builder.insert_element(vec, vals[idx], _c(0))
        vec = builder.insert_element(vec, vals[idx + 1], _c(1))
        return builder.bitcast(vec, I32)

    o = cgutils.unpack_tuple(builder, args[1], 2)
    o = [builder.trunc(context.cast(builder, v, t, types.int64), I32)
         for v, t in zip(o, sig.args[1].types)]
    tmap = builder.add(context.cast(builder, args[3], sig.args[3], types.uint64),
                       ir.Constant(I64, 128 * tmap_index))
    tid = sreg(builder, "tid.x")
    region = builder.sub(builder.lshr(tid, _c(7)), _c(first_group))
    base = builder.add(emit(sm.smem_base, context, builder, (), ()),
                       builder.add(_c(staging_off), builder.mul(region, _c(staging_bytes))))
    lane = sreg(builder, "laneid")
    warp = builder.and_(builder.lshr(tid, _c(5)), _c(3))
    # lane l gives the address of row l % 8 of block l / 8 of each stmatrix.x4; block j
    # is rows +8 * (j & 1), columns +8 * (j >> 1) (register pairs i0 + 2j)
    q = builder.and_(lane, _c(7))
    j = builder.lshr(lane, _c(3))
    lane_row = builder.add(builder.add(builder.mul(warp, _c(16)), q),
                           builder.mul(builder.and_(j, _c(1)), _c(8)))
    swz = builder.xor(q, builder.lshr(j, _c(1)))       # chunk ^ row % 8, less the 2m part
    row_addr = builder.add(base, builder.mul(lane_row, _c(BOX_ROW_BYTES)))
    elected = builder.icmp_unsigned("==", builder.and_(tid, _c(127)), _c(0))
    box_cols = box_columns(2)
    for c0 in range(0, cols, chunk_cols):
        with builder.if_then(elected):
            emit_wait_read0(builder)            # the buffer's previous copies have read it
        group_sync(builder, tid)
        for mi in range(rows // 64):
            for k in range(c0 // 16, (c0 + chunk_cols) // 16):
                rel = 16 * k - c0               # chunk-relative column of blocks 0, 1
                box, m = rel // box_cols, (rel % box_cols) // 16
                const = box * rows * BOX_ROW_BYTES + 64 * mi * BOX_ROW_BYTES
                chunk = builder.shl(builder.xor(swz, _c(2 * m)), _c(4))
                addr = builder.add(builder.add(row_addr, chunk), _c(const))
                i0 = mi * per_block + 8 * k
                asm(builder, STMATRIX, "r,r,r,r,r,~{memory}",
                    [addr] + [packed(i0 + 2 * jj) for jj in range(4)])
        asm(builder, "fence.proxy.async.shared::cta;", "~{memory}")
        group_sync(builder, tid)
        with builder.if_then(elected):
            for b in range(chunk_cols // box_cols):
                src = builder.add(base, _c(b * rows * BOX_ROW_BYTES))
                col = builder.add(o[1], _c(c0 + b * box_cols))
                (emit_reduce_add_2d if reduce_add else emit_store_2d)(builder, tmap, src, col,
                                                                      o[0])
            emit_commit(builder)
