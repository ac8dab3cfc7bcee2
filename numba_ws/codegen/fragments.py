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

from numba.cuda import types
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import I32, check_ints, u32


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
