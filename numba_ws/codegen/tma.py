"""TMA: ``cp.async.bulk.tensor`` loads/stores, bulk async-groups, tensor-map prefetch.

Tensor maps (PTX ISA 5.5.8 "Tensor-map") are 128-byte opaque objects in ``.param``,
``.const`` or ``.global`` space. numba_ws passes the *generic address of a tensor map in
global memory* (``tmap``, uint64; e.g. a device array holding the bytes from
``numba_ws.runtime.tensormap.encode_tiled_2d``). cp.async.bulk.tensor reads the map through
the *tensormap proxy* (9.7.9.25.5.2: "The operand tensorMap is the generic address of the
opaque tensor-map object which resides in .param space or .const space or .global space
... accessed in tensormap proxy"). A ``fence.proxy.tensormap::generic.acquire`` (9.7.13.4)
is only needed to order *generic-proxy writes of the map made on the device* (st.global,
tensormap.replace) before the TMA's tensormap-proxy reads. Our maps are written by the
host (a H2D copy stream-ordered before the launch) and never modified by a kernel, so no
proxy fence is emitted. A kernel that patches a map in place must add that fence itself.

Coordinates are int32 element indices, innermost (contiguous) dimension first, and may be
negative or past the end: out-of-bound elements are zero-filled (5.5.3.3) and still count
toward the complete_tx bytes.
"""
from numba.cuda import types
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import asm, check_ints, u32, u64


def _load(ndim):
    coords = ", ".join(f"${i + 3}" for i in range(ndim))
    text = (f"cp.async.bulk.tensor.{ndim}d.shared::cluster.global.mbarrier::complete_tx::bytes"
            f" [$0], [$1, {{{coords}}}], [$2];")
    cons = ",".join(["r", "l", "r"] + ["r"] * ndim + ["~{memory}"])

    def codegen(context, builder, sig, args):
        d = u32(context, builder, sig.args[0], args[0])
        t = u64(context, builder, sig.args[1], args[1])
        b = u32(context, builder, sig.args[2], args[2])
        cs = [u32(context, builder, ty, v) for ty, v in zip(sig.args[3:], args[3:])]
        asm(builder, text, cons, [d, t, b] + cs)
        return context.get_dummy_value()

    return codegen


@intrinsic
def tma_load_2d(typingctx, dst_smem, tmap, bar, c0, c1):
    """tma_load_2d(dst_smem, tmap, bar, c0, c1): one TMA box, global -> shared.

    PTX: ``cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
    [dst], [tmap, {c0, c1}], [bar];`` (c0 innermost). The box (shape, swizzle) comes from
    the tensor map; its bytes complete_tx on the mbarrier ``bar``. Minimum sm_90.
    Invariants: one thread issues it (the producer's elected lane), after the matching
    ``mbarrier_arrive_expect_tx`` accounting for the box bytes in this phase (either order
    within the phase is allowed); ``dst_smem`` 128-byte aligned, 1024-byte aligned for the
    128-byte swizzle so that the pattern lines up with wgmma's; ``tmap`` see module doc.
    A non-cluster launch is an implicit 1-CTA cluster, so ``.shared::cluster`` with this
    CTA's shared::cta address is valid.
    """
    check_ints("tma_load_2d", dst_smem=dst_smem, tmap=tmap, bar=bar, c0=c0, c1=c1)
    return signature(types.none, dst_smem, tmap, bar, c0, c1), _load(2)


@intrinsic
def tma_load_3d(typingctx, dst_smem, tmap, bar, c0, c1, c2):
    """tma_load_3d(dst_smem, tmap, bar, c0, c1, c2): as :func:`tma_load_2d` for a 3-D map.

    PTX: ``cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes
    [dst], [tmap, {c0, c1, c2}], [bar];``. Minimum sm_90. Same invariants.
    """
    check_ints("tma_load_3d", dst_smem=dst_smem, tmap=tmap, bar=bar, c0=c0, c1=c1, c2=c2)
    return signature(types.none, dst_smem, tmap, bar, c0, c1, c2), _load(3)


@intrinsic
def tma_prefetch_descriptor(typingctx, tmap):
    """tma_prefetch_descriptor(tmap): ``prefetch.tensormap [tmap];``

    Brings the tensor map's cache line in ahead of the first TMA (generic addressing,
    9.7.9.15). A hint only. Minimum sm_90. Any thread; typically the producer's elected one.
    """
    check_ints("tma_prefetch_descriptor", tmap=tmap)
    sig = signature(types.none, tmap)

    def codegen(context, builder, sig, args):
        t = u64(context, builder, sig.args[0], args[0])
        asm(builder, "prefetch.tensormap [$0];", "l,~{memory}", [t])
        return context.get_dummy_value()

    return sig, codegen


def emit_store_2d(builder, tmap, src, c0, c1):
    """The bulk tensor store of :func:`tma_store_2d` on LLVM values (i64 map address,
    i32 shared address and coordinates), for other intrinsics' codegen."""
    asm(builder,
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [$0, {$2, $3}], [$1];",
        "l,r,r,r,~{memory}", [tmap, src, c0, c1])


def emit_reduce_add_2d(builder, tmap, src, c0, c1):
    """``cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [map,
    {c0, c1}], [src];``: the box at ``src`` added element-wise (atomically, in the map's
    element type: f16 / bf16 / f32 / integers) to the global tensor; out-of-bound
    elements are skipped. Same invariants as :func:`tma_store_2d`. Minimum sm_90."""
    asm(builder,
        "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group "
        "[$0, {$2, $3}], [$1];", "l,r,r,r,~{memory}", [tmap, src, c0, c1])


def emit_commit(builder):
    """``cp.async.bulk.commit_group;`` (see :func:`tma_store_commit`)."""
    asm(builder, "cp.async.bulk.commit_group;", "~{memory}")


def emit_wait_read0(builder):
    """``cp.async.bulk.wait_group.read 0;`` (see :func:`tma_store_wait_read0`)."""
    asm(builder, "cp.async.bulk.wait_group.read 0;", "~{memory}")


@intrinsic
def tma_store_2d(typingctx, tmap, src_smem, c0, c1):
    """tma_store_2d(tmap, src_smem, c0, c1): one TMA box, shared -> global.

    PTX: ``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [tmap, {c0, c1}], [src];``.
    Out-of-bound box elements are not written. Minimum sm_90.
    Invariants: one thread issues it; every thread that wrote ``src_smem`` with generic
    stores must first run ``fence_proxy_async_shared()`` and then synchronize with the
    issuer (named barrier). Follow with :func:`tma_store_commit` and, before reusing the
    buffer, :func:`tma_store_wait_read0` in the same thread.
    """
    check_ints("tma_store_2d", tmap=tmap, src_smem=src_smem, c0=c0, c1=c1)
    sig = signature(types.none, tmap, src_smem, c0, c1)

    def codegen(context, builder, sig, args):
        t = u64(context, builder, sig.args[0], args[0])
        s = u32(context, builder, sig.args[1], args[1])
        x = u32(context, builder, sig.args[2], args[2])
        y = u32(context, builder, sig.args[3], args[3])
        emit_store_2d(builder, t, s, x, y)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def tma_store_commit(typingctx):
    """tma_store_commit(): ``cp.async.bulk.commit_group;`` -- close this thread's bulk
    async-group (9.7.9.25.6.1). Minimum sm_90. The thread that issued the stores."""
    sig = signature(types.none)

    def codegen(context, builder, sig, args):
        emit_commit(builder)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def tma_store_wait_read0(typingctx):
    """tma_store_wait_read0(): ``cp.async.bulk.wait_group.read 0;``

    Waits until all of this thread's bulk groups have finished *reading* their source
    (shared memory may be overwritten; the global writes may still be in flight; they are
    complete at kernel exit). Minimum sm_90. The thread that committed the groups.
    """
    sig = signature(types.none)

    def codegen(context, builder, sig, args):
        emit_wait_read0(builder)
        return context.get_dummy_value()

    return sig, codegen
