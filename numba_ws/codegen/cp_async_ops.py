"""GPU lowering of a channel whose loads TMA cannot do: cp.async into the swizzled layout.

The 128 producer threads copy the tile part in ``vec``-byte pieces (16, 8 or 4: what the
array's base and row stride allow) straight into the layout TMA would have written, so
the consumers' wgmma descriptors do not change: box ``b`` of 64 (fp16) columns at
``b * rows * 128``, row ``r`` at ``r * 128``, and inside a row the 16-byte chunk ``c``
stored at chunk ``c ^ (r % 8)`` (the 128-byte swizzle; the slot is 1024-byte aligned).
Elements past the array's edge are zero-filled (``src_bytes`` < ``vec``).

Protocol: every producer thread waits for empty[slot] (parity phase ^ 1), issues its
copies, then ``cp.async.wait_all``, ``fence.proxy.async.shared::cta`` (sm_90 only: the
copies were made through the generic proxy and wgmma reads through the async proxy;
the sm_80 consumers read with ldmatrix, generic proxy too) and arrives on full[slot],
which therefore expects 128 arrivals. The offsets come from
:func:`numba_ws.codegen.swizzle.swizzled_offset`. PTX: ``cp.async.cg.shared.global
[dst], [src], 16, n;`` or ``cp.async.ca.shared.global [dst], [src], {8|4}, n;`` (sm_80).
"""
from llvmlite import ir

from numba.cuda import cgutils, types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from . import mbarrier as mb
from . import smem as sm
from .channel_ops import _bar, _need_literals, emit
from ._util import I32, I64, IRInt, asm
from .swizzle import swizzled_offset

PRODUCER_THREADS = 128


def _c32(v):
    return ir.Constant(I32, v)


def _c64(v):
    return ir.Constant(I64, v)


@intrinsic
def gpu_cp_async_acquire(typingctx, empty_off, slot, phase, arch):
    """Every producer thread waits for empty[slot] with parity ``phase ^ 1``
    (``arch``: literal 10 * major + minor, picks try_wait or test_wait)."""
    k = _need_literals("gpu_cp_async_acquire", empty_off=empty_off, arch=arch)
    sig = signature(types.none, empty_off, slot, phase, arch)

    def codegen(context, builder, sig, args):
        empty = _bar(context, builder, k["empty_off"], sig.args[1], args[1])
        ph = builder.xor(context.cast(builder, args[2], sig.args[2], types.uint32), _c32(1))
        emit(mb.wait_for(k["arch"]), context, builder, (types.uint32, types.uint32),
             (empty, ph))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def gpu_cp_async_copy(typingctx, dst_off, slot_bytes, slot, array, row, col, shape, vec,
                      transposed):
    """The producer group copies the (rows, cols) part at (row, col) of a 2-D array; with
    ``transposed`` (literal bool) of the array's transposed view (a column-major array
    read row by row along its contiguous first dimension)."""
    k = _need_literals("gpu_cp_async_copy", dst_off=dst_off, slot_bytes=slot_bytes, vec=vec,
                       transposed=transposed)
    if not isinstance(array, types.Array) or array.ndim != 2:
        raise TypingError(f"cp.async lowering takes a 2-D array, got {array}")
    rows, cols = (t.literal_value for t in shape.types)
    itemsize = array.dtype.bitwidth // 8
    nvec = rows * cols * itemsize // k["vec"]
    per_row = cols * itemsize // k["vec"]
    if nvec % PRODUCER_THREADS:
        raise TypingError(f"cp.async part {rows}x{cols} is not a multiple of "
                          f"{PRODUCER_THREADS} x {k['vec']} bytes")
    sig = signature(types.none, dst_off, slot_bytes, slot, array, row, col, shape, vec,
                    transposed)
    view = (1, 0) if k["transposed"] else (0, 1)
    op = "cg" if k["vec"] == 16 else "ca"
    text = f"cp.async.{op}.shared.global [$0], [$1], {k['vec']}, $2;"

    def codegen(context, builder, sig, args):
        ary = context.make_array(array)(context, builder, args[3])
        dims = [cgutils.unpack_tuple(builder, ary.shape, 2)[d] for d in view]
        stride0 = cgutils.unpack_tuple(builder, ary.strides, 2)[view[0]]
        r0 = context.cast(builder, args[4], sig.args[4], types.int64)
        c0 = context.cast(builder, args[5], sig.args[5], types.int64)
        tid = builder.zext(emit(sm.thread_in_group, context, builder, (), ()), I64)
        s = context.cast(builder, args[2], sig.args[2], types.uint32)
        base = builder.add(builder.add(emit(sm.smem_base, context, builder, (), ()),
                                       _c32(k["dst_off"])), builder.mul(s, _c32(k["slot_bytes"])))
        data = builder.ptrtoint(ary.data, I64)
        epv = k["vec"] // itemsize
        for i in range(nvec // PRODUCER_THREADS):
            v = builder.add(tid, _c64(i * PRODUCER_THREADS))
            r = builder.udiv(v, _c64(per_row))
            col = builder.mul(builder.urem(v, _c64(per_row)), _c64(epv))
            grow, gcol = builder.add(r0, r), builder.add(c0, col)
            left = builder.mul(builder.sub(dims[1], gcol), _c64(itemsize))
            nbytes = builder.select(builder.icmp_signed("<", left, _c64(k["vec"])), left,
                                    _c64(k["vec"]))
            nbytes = builder.select(builder.icmp_signed("<", nbytes, _c64(0)), _c64(0), nbytes)
            inside = builder.icmp_signed("<", grow, dims[0])
            nbytes = builder.select(inside, nbytes, _c64(0))
            src = builder.add(data, builder.add(builder.mul(grow, stride0),
                                                builder.mul(gcol, _c64(itemsize))))
            src = builder.select(builder.icmp_signed(">", nbytes, _c64(0)), src, data)
            off = swizzled_offset(IRInt(builder, r), IRInt(builder, col), rows, itemsize)
            dst = builder.add(base, builder.trunc(off.value, I32))
            asm(builder, text, "r,l,r,~{memory}", [dst, src, builder.trunc(nbytes, I32)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def gpu_cp_async_commit(typingctx, full_off, slot, arch):
    """ProducerCommit (cp.async): wait for this thread's copies, fence them for the async
    proxy (sm_90 and up: wgmma reads the slot; below, ldmatrix reads it through the
    generic proxy and no fence is needed or exists) and arrive on full[slot] (128
    arrivals complete the phase). ``arch``: literal 10 * major + minor."""
    k = _need_literals("gpu_cp_async_commit", full_off=full_off, arch=arch)
    sig = signature(types.none, full_off, slot, arch)

    def codegen(context, builder, sig, args):
        asm(builder, "cp.async.wait_all;", "~{memory}")
        if k["arch"] >= 90:
            emit(sm.fence_proxy_async_shared, context, builder, (), ())
        full = _bar(context, builder, k["full_off"], sig.args[1], args[1])
        emit(mb.mbarrier_arrive, context, builder, (types.uint32,), (full,))
        return context.get_dummy_value()

    return sig, codegen
