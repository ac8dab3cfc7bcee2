"""Where each accumulator register of ``wgmma.mma_async.m64nNk16`` (f32 D) lives.

PTX ISA 9.7.15.5.1.1.1, Figure 149 "WGMMA .m64nNk16 register fragment layout for
accumulator matrix D": warp w (0..3) of the warp group owns rows 16w..16w+15 of the 64xN
tile; inside that 16-row slab every 8-column block j (0 <= j < N/8) is laid out exactly like
the m16n8 C/D fragment of ``mma.m16n8k16`` (9.7.14.5.8: ``groupID = laneid >> 2``,
``threadID_in_group = laneid % 4``, ``row = groupID`` for c0,c1 and ``groupID + 8`` for
c2,c3, ``col = threadID_in_group*2 + (i & 1)``), and the thread's registers for block j are
d[4j .. 4j+3]. Hence, for register index i (0 <= i < N/2) of lane l in warp w::

    row = 16*w + l//4 + 8*((i >> 1) & 1)
    col = 8*(i >> 2) + 2*(l % 4) + (i & 1)

(the hopper-notes statement of the layout is correct.) Row reductions: combine registers
in-thread, then ``shfl.xor`` over lane masks 1 and 2 (the four lanes of a row).

The helpers are intrinsics (integer arithmetic only, no PTX of their own) so that a kernel
using them needs no device-function call, and constant-fold when ``i`` is a loop constant.
``warp`` is the warp index *inside the warp group* (``warp_id() % 4``).
"""
from llvmlite import ir

from numba.cuda import cgutils, types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import I32, I64, check_ints, sreg, u32, u64
from .wgmma import _acc_count


def row_of(i, lane, warp):
    """Host reference of :func:`frag_row`."""
    return 16 * warp + lane // 4 + 8 * ((i >> 1) & 1)


def col_of(i, lane):
    """Host reference of :func:`frag_col`."""
    return 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)


def _c(v):
    return ir.Constant(I32, v)


@intrinsic
def frag_row(typingctx, i, lane, warp):
    """frag_row(i, lane, warp) -> int32: row (0..63) of accumulator register ``i`` held by
    lane ``lane`` of warp ``warp`` (0..3 within the warp group). Any thread."""
    check_ints("frag_row", i=i, lane=lane, warp=warp)
    sig = signature(types.int32, i, lane, warp)

    def codegen(context, builder, sig, args):
        iv, lv, wv = (u32(context, builder, t, v) for t, v in zip(sig.args, args))
        half = builder.and_(builder.lshr(iv, _c(1)), _c(1))
        r = builder.add(builder.shl(wv, _c(4)), builder.lshr(lv, _c(2)))
        return builder.add(r, builder.shl(half, _c(3)))

    return sig, codegen


@intrinsic
def frag_col(typingctx, i, lane):
    """frag_col(i, lane) -> int32: column (0..N-1) of accumulator register ``i`` held by
    lane ``lane``. Any thread."""
    check_ints("frag_col", i=i, lane=lane)
    sig = signature(types.int32, i, lane)

    def codegen(context, builder, sig, args):
        iv, lv = (u32(context, builder, t, v) for t, v in zip(sig.args, args))
        c = builder.shl(builder.lshr(iv, _c(2)), _c(3))
        c = builder.add(c, builder.shl(builder.and_(lv, _c(3)), _c(1)))
        return builder.add(c, builder.and_(iv, _c(1)))

    return sig, codegen


_STORE_TYPES = {"f16": (ir.HalfType(), 2), "f32": (ir.FloatType(), 4)}


@intrinsic
def frag_store(typingctx, acc, ptr, ld, row0, col0, m, n, dtype):
    """frag_store(acc, ptr, ld, row0, col0, M, N, dtype): the epilogue store of a fragment.

    Writes fragment element (r, c) (r, c from :func:`frag_row` / :func:`frag_col` of this
    thread's lane and warp-in-group ``(tid.x // 32) % 4``) to element ``(row0 + r, col0 + c)``
    of a row-major global matrix at ``ptr`` (uint64) with leading dimension ``ld``
    elements, only where ``row0 + r < M`` and ``col0 + c < N``. ``dtype``: literal 'f16'
    (``cvt.rn.f16.f32``) or 'f32'. Fully unrolled over the N/2 registers in the IR (no
    run-time indexing of the tuple, so no local memory and no switch). Any sm.
    Invariants: the 128 threads of the warp group that owns ``acc``; call after
    ``wgmma_wait_group`` + ``wgmma_fence_operand``.
    """
    count = _acc_count("frag_store", acc)
    check_ints("frag_store", ptr=ptr, ld=ld, row0=row0, col0=col0, M=m, N=n)
    if not (isinstance(dtype, types.StringLiteral) and dtype.literal_value in _STORE_TYPES):
        raise TypingError(f"frag_store: dtype must be the literal 'f16' or 'f32', got {dtype}")
    llty, size = _STORE_TYPES[dtype.literal_value]
    sig = signature(types.none, acc, ptr, ld, row0, col0, m, n, dtype)

    def codegen(context, builder, sig, args):
        base = u64(context, builder, sig.args[1], args[1])
        ldv, r0, c0, mv, nv = (builder.sext(u32(context, builder, t, v), I64)
                               for t, v in zip(sig.args[2:7], args[2:7]))
        tid = sreg(builder, "tid.x")
        lane = builder.and_(tid, _c(31))
        warp = builder.and_(builder.lshr(tid, _c(5)), _c(3))
        row_t = builder.sext(builder.add(builder.shl(warp, _c(4)), builder.lshr(lane, _c(2))),
                             I64)
        col_t = builder.sext(builder.shl(builder.and_(lane, _c(3)), _c(1)), I64)
        row_t = builder.add(row_t, r0)
        col_t = builder.add(col_t, c0)
        ptrty = llty.as_pointer(1)
        for i in range(count):
            row = builder.add(row_t, ir.Constant(I64, 8 * ((i >> 1) & 1)))
            col = builder.add(col_t, ir.Constant(I64, 8 * (i >> 2) + (i & 1)))
            ok = builder.and_(builder.icmp_signed("<", row, mv), builder.icmp_signed("<", col, nv))
            with cgutils.if_likely(builder, ok):
                off = builder.mul(builder.add(builder.mul(row, ldv), col), ir.Constant(I64, size))
                addr = builder.inttoptr(builder.add(base, off), ptrty)
                val = builder.extract_value(args[0], i)
                if size == 2:
                    val = builder.fptrunc(val, llty)
                builder.store(val, addr)
        return context.get_dummy_value()

    return sig, codegen
