"""Non-bulk ``cp.async`` (PTX ISA 9.7.9.25.3) and ``cp.async.mbarrier.arrive`` (9.7.13.15.15).

The path for loads that TMA cannot do (unaligned strides, sm_80): each thread copies 16
bytes global -> shared; completion is tracked by async-groups or by an mbarrier.
"""
from numba.cuda import types
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import asm, check_ints, u32, u64


@intrinsic
def cp_async_16(typingctx, dst_smem, src_ptr, src_bytes):
    """cp_async_16(dst_smem, src_ptr, src_bytes):
    ``cp.async.cg.shared.global [dst], [src], 16, src_bytes;``

    Copies ``src_bytes`` (0..16) bytes from global ``src_ptr`` (uint64 generic/global
    address of global memory) to shared ``dst_smem`` (uint32) and fills the remaining
    ``16 - src_bytes`` destination bytes with zeros (src_bytes = 0 -> 16 zero bytes, the
    way to mask an out-of-bounds row; the source is then not read). ``.cg`` caches at L2
    only. Minimum sm_80. Invariants: any thread; both addresses 16-byte aligned.
    """
    check_ints("cp_async_16", dst_smem=dst_smem, src_ptr=src_ptr, src_bytes=src_bytes)
    sig = signature(types.none, dst_smem, src_ptr, src_bytes)

    def codegen(context, builder, sig, args):
        d = u32(context, builder, sig.args[0], args[0])
        s = u64(context, builder, sig.args[1], args[1])
        n = u32(context, builder, sig.args[2], args[2])
        asm(builder, "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r,~{memory}",
            [d, s, n])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def cp_async_mbarrier_arrive_noinc(typingctx, bar):
    """cp_async_mbarrier_arrive_noinc(bar): ``cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar];``

    When all prior cp.async of this thread complete, performs one arrive-on on the
    barrier. ``.noinc``: the pending count is NOT incremented first, so the barrier's init
    count must include one arrival per thread that executes this. Minimum sm_80.
    """
    check_ints("cp_async_mbarrier_arrive_noinc", bar=bar)
    sig = signature(types.none, bar)

    def codegen(context, builder, sig, args):
        b = u32(context, builder, sig.args[0], args[0])
        asm(builder, "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];", "r,~{memory}", [b])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def cp_async_commit(typingctx):
    """cp_async_commit(): ``cp.async.commit_group;`` -- close this thread's current
    cp.async group. Minimum sm_80. Any thread (per-thread groups)."""
    sig = signature(types.none)

    def codegen(context, builder, sig, args):
        asm(builder, "cp.async.commit_group;", "~{memory}")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def cp_async_wait_all(typingctx):
    """cp_async_wait_all(): ``cp.async.wait_all;`` -- wait for all of this thread's
    cp.async (committed or not). Minimum sm_80. Other threads' copies still need a barrier."""
    sig = signature(types.none)

    def codegen(context, builder, sig, args):
        asm(builder, "cp.async.wait_all;", "~{memory}")
        return context.get_dummy_value()

    return sig, codegen
