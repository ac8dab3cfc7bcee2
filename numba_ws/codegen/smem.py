"""Thread-index helpers, the dynamic shared-memory base, named barriers and the async-proxy fence.

All of these are Numba ``@intrinsic`` s usable inside ``@cuda.jit`` code.
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda import extending as _extending
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import I32, I64, asm, check_ints, sreg, shfl_idx0, u32

# An intrinsic whose typing sees literal argument types first (so literal ints can become
# PTX immediates); numba-cuda's public ``intrinsic`` takes no options, the factory does.
_factory = getattr(_extending, "_intrinsic", None)
_literal_intrinsic = (_factory(target="cuda", prefer_literal=True) if _factory is not None
                      else intrinsic)

#: Name of the dynamic shared-memory symbol declared by :func:`smem_base`.
DSMEM_SYMBOL = "__numba_ws_dsmem"
#: Alignment (bytes) of :func:`smem_base`; what the 128-byte swizzle of TMA and wgmma needs.
DSMEM_ALIGN = 1024


def _dsmem_global(module):
    gv = module.globals.get(DSMEM_SYMBOL)
    if gv is None:
        gv = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), 0), DSMEM_SYMBOL,
                               addrspace=3)
        gv.linkage = "external"
        gv.align = DSMEM_ALIGN
    return gv


@intrinsic
def smem_base(typingctx):
    """smem_base() -> uint32: shared-window address of the kernel's dynamic shared memory.

    Declares ``.extern .shared .align 1024 .b8 __numba_ws_dsmem[];`` in the module and
    returns its address (``mov.u64 %rd, __numba_ws_dsmem;`` truncated to 32 bits).
    Minimum sm: any (sm_90 for the consumers of the 1024-byte alignment).

    Invariants: every ``extern .shared`` array of a kernel, including the one behind
    ``cuda.shared.array(0, ...)``, starts at the same address, the start of dynamic shared
    memory; ptxas places it after the static shared memory rounded up to the largest
    declared alignment (checked on the cubin: static 100 B -> the dynamic start moves to
    2048, a multiple of 1024). Measured on an H200: 0x400 with no static shared memory (the
    first 1 KB of the CTA's window is reserved by the system). Any thread may call it; the
    value is a link-time constant.
    The launch must pass ``sharedmem=`` bytes covering everything used above this base.
    """
    sig = signature(types.uint32)

    def codegen(context, builder, sig, args):
        gv = _dsmem_global(builder.module)
        return builder.trunc(builder.ptrtoint(gv, I64), I32)

    return sig, codegen


@intrinsic
def thread_in_group(typingctx):
    """thread_in_group() -> int32: ``tid.x % 128``, the thread's index in its warp group.

    PTX: ``mov.u32 %r, %tid.x;`` then ``and.b32 %r, %r, 127``. Any sm. Assumes a 1-D block.
    """
    sig = signature(types.int32)

    def codegen(context, builder, sig, args):
        return builder.and_(sreg(builder, "tid.x"), ir.Constant(I32, 127))

    return sig, codegen


@intrinsic
def warp_group_id(typingctx):
    """warp_group_id() -> int32: ``tid.x // 128``, made warp-uniform.

    PTX: ``shr.u32`` of ``%tid.x`` by 7, then ``shfl.sync.idx.b32 r, r, 0, 31, -1`` so that
    the compiler can prove the value is uniform over the warp (needed for role branches that
    contain ``.aligned`` instructions such as wgmma and setmaxnreg). Minimum sm_70 (shfl.sync).
    Invariants: the whole warp must call it (full-mask shuffle); assumes a 1-D block.
    """
    sig = signature(types.int32)

    def codegen(context, builder, sig, args):
        wg = builder.lshr(sreg(builder, "tid.x"), ir.Constant(I32, 7))
        return shfl_idx0(builder, wg)

    return sig, codegen


@intrinsic
def warp_id(typingctx):
    """warp_id() -> int32: ``tid.x // 32`` broadcast from lane 0 (warp-uniform).

    PTX: ``shr.u32`` of ``%tid.x`` by 5 and ``shfl.sync.idx.b32 ..., 0, 31, -1``. This is the
    logical warp index in the block, not ``%warpid`` (which may change at run time).
    Minimum sm_70. Invariants: the whole warp must call it; assumes a 1-D block.
    """
    sig = signature(types.int32)

    def codegen(context, builder, sig, args):
        w = builder.lshr(sreg(builder, "tid.x"), ir.Constant(I32, 5))
        return shfl_idx0(builder, w)

    return sig, codegen


@intrinsic
def lane_id(typingctx):
    """lane_id() -> int32: ``%laneid`` (0..31). PTX: ``mov.u32 %r, %laneid;``. Any sm."""
    sig = signature(types.int32)

    def codegen(context, builder, sig, args):
        return sreg(builder, "laneid")

    return sig, codegen


@_literal_intrinsic
def named_barrier_sync(typingctx, barrier_id, nthreads):
    """named_barrier_sync(id, nthreads): ``bar.sync id, nthreads;``

    Waits until ``nthreads`` threads (a multiple of 32) have arrived at hardware barrier
    ``id`` (0..15; 0 is the one ``cuda.syncthreads()`` uses). Both arguments may be literal
    ints (emitted as immediates) or run-time ints (registers). Any sm.
    Invariants: every participating warp executes it with the same id and count; it also
    orders shared-memory accesses of the participants (memory clobber).
    """
    check_ints("named_barrier_sync", id=barrier_id, nthreads=nthreads)
    sig = signature(types.none, barrier_id, nthreads)

    def codegen(context, builder, sig, args):
        ops, cons, vals = [], [], []
        for ty, val in zip(sig.args, args):
            if isinstance(ty, types.IntegerLiteral):
                ops.append(str(int(ty.literal_value)))
            else:
                ops.append(f"${len(vals)}")
                cons.append("r")
                vals.append(u32(context, builder, ty, val))
        cons.append("~{memory}")
        asm(builder, f"bar.sync {ops[0]}, {ops[1]};", ",".join(cons), vals)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def fence_proxy_async_shared(typingctx):
    """fence_proxy_async_shared(): ``fence.proxy.async.shared::cta;``

    Orders this thread's prior generic-proxy shared-memory accesses (``st.shared``) with
    later async-proxy accesses (TMA store reading SMEM, wgmma reading SMEM) and vice versa
    (PTX ISA 9.7.13.4, proxy fences). Minimum sm_90.
    Invariants: each thread that wrote the shared memory executes it before the barrier
    that publishes the data to the thread issuing the async operation.
    """
    sig = signature(types.none)

    def codegen(context, builder, sig, args):
        asm(builder, "fence.proxy.async.shared::cta;", "~{memory}")
        return context.get_dummy_value()

    return sig, codegen
