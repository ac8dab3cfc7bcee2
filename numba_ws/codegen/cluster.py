"""Thread-block clusters (sm_90): rank, cluster barrier, remote mbarrier arrive, TMA
multicast. Used by the hand-written 2-CTA GEMM (tests/gpu/hand_gemm_cluster.py) that
measures what TMA multicast is worth before the compiler generates it.

A kernel using them must be launched as clusters: the PTX entry carries
``.reqnctapercluster X, Y, Z`` (then a plain ``cuLaunchKernel`` forms the clusters) and the
grid is a multiple of the cluster shape.
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import I32, asm, check_ints, u32, u64


@intrinsic
def cluster_ctarank(typingctx):
    """cluster_ctarank() -> int32: ``mov.u32 %r, %cluster_ctarank;`` (0 .. cluster size - 1).
    Minimum sm_90. Any thread."""
    sig = signature(types.int32)

    def codegen(context, builder, sig, args):
        return asm(builder, "mov.u32 $0, %cluster_ctarank;", "=r", [], ret=I32,
                   side_effect=False)

    return sig, codegen


@intrinsic
def cluster_sync(typingctx):
    """cluster_sync(): ``barrier.cluster.arrive.release; barrier.cluster.wait.acquire;`` --
    every thread of every CTA of the cluster arrives, then waits. Not ``.aligned``: a warp
    may reach it diverged (the producer's elected lane arrives after its loop). Use it after initialising mbarriers that other CTAs arrive on or
    multicast into (after ``fence.mbarrier_init.release.cluster``), and before exit so that
    no CTA leaves while a peer still writes its shared memory. Minimum sm_90. All threads.
    """
    sig = signature(types.none)

    def codegen(context, builder, sig, args):
        asm(builder, "barrier.cluster.arrive.release;\n\t"
                     "barrier.cluster.wait.acquire;", "~{memory}", [])
        return context.get_dummy_value()

    return sig, codegen


def _remote_arrive(name, semantics, doc):
    """The intrinsic ``name``: ``mapa`` + ``mbarrier.arrive{semantics}.shared::cluster.b64``."""
    text = ("{\n .reg .b32 ws_r;\n mapa.shared::cluster.u32 ws_r, $0, $1;\n"
            f" mbarrier.arrive{semantics}.shared::cluster.b64 _, [ws_r];\n}}")

    def typer(typingctx, addr, cta):
        check_ints(name, addr=addr, cta=cta)

        def codegen(context, builder, sig, args):
            a = u32(context, builder, sig.args[0], args[0])
            c = u32(context, builder, sig.args[1], args[1])
            asm(builder, text, "r,r,~{memory}", [a, c])
            return context.get_dummy_value()

        return signature(types.none, addr, cta), codegen

    typer.__name__, typer.__qualname__, typer.__doc__ = name, name, doc
    return intrinsic(typer)


mbarrier_arrive_cluster = _remote_arrive("mbarrier_arrive_cluster", ".release.cluster", """\
    mbarrier_arrive_cluster(addr, cta): arrive on the mbarrier
    at this CTA's shared address ``addr`` in CTA ``cta`` of the cluster (itself included),
    with cluster-scope release semantics (every prior memory access of the thread is
    ordered before the arrive, for all CTAs of the cluster).

    PTX: ``mapa.shared::cluster.u32 r, addr, cta;
    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [r];`` Minimum sm_90.
    Invariants: the target CTA initialised the barrier before a cluster barrier both passed.
    """)

mbarrier_arrive_remote = _remote_arrive("mbarrier_arrive_remote", "", """\
    mbarrier_arrive_remote(addr, cta): as
    :func:`mbarrier_arrive_cluster` with the default ``.release.cta`` semantics (CUTLASS's
    cluster pipelines arrive so): enough when the arrive only says "my wgmma reads of the
    slot completed" (``wgmma.wait_group`` before it). PTX: ``mapa.shared::cluster.u32 r,
    addr, cta; mbarrier.arrive.shared::cluster.b64 _, [r];`` Minimum sm_90. Not yet run
    on a GPU (2026-12-02).
    """)


@intrinsic
def tma_load_2d_multicast(typingctx, dst_smem, tmap, bar, c0, c1, cta_mask):
    """tma_load_2d_multicast(dst_smem, tmap, bar, c0, c1, cta_mask): one TMA box written to
    the same shared offset ``dst_smem`` of every CTA in ``cta_mask`` (bit i = CTA rank i),
    completing its bytes on the mbarrier at offset ``bar`` of each of them.

    PTX: ``cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
    .multicast::cluster [dst], [tmap, {c0, c1}], [bar], mask;`` (mask a 16-bit register).
    Minimum sm_90. Invariants: as :func:`numba_ws.codegen.tma.tma_load_2d`, and each
    destination CTA's consumers released the slot (the empty barrier of the issuing CTA
    counts them) and each destination's full barrier expects these bytes.
    """
    check_ints("tma_load_2d_multicast", dst_smem=dst_smem, tmap=tmap, bar=bar, c0=c0, c1=c1,
               cta_mask=cta_mask)
    sig = signature(types.none, dst_smem, tmap, bar, c0, c1, cta_mask)

    def codegen(context, builder, sig, args):
        d = u32(context, builder, sig.args[0], args[0])
        t = u64(context, builder, sig.args[1], args[1])
        b = u32(context, builder, sig.args[2], args[2])
        x = u32(context, builder, sig.args[3], args[3])
        y = u32(context, builder, sig.args[4], args[4])
        m = builder.trunc(u32(context, builder, sig.args[5], args[5]), ir.IntType(16))
        asm(builder, "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx"
                     "::bytes.multicast::cluster [$0], [$1, {$3, $4}], [$2], $5;",
            "r,l,r,r,r,h,~{memory}", [d, t, b, x, y, m])
        return context.get_dummy_value()

    return sig, codegen
