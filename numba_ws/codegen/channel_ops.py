"""GPU lowering of the stage ops (channels, barriers, register reallocation).

Each function here is an ``@intrinsic`` that the ``lower_tiles`` pass calls in place of a
stage op of :mod:`numba_ws.language.stage_ops`; layout constants (byte offsets of slots
and barriers, transaction bytes) arrive as literal ints. They are built from the PTX
family intrinsics of this package through :func:`emit`. Barrier ``i`` of an array
starting at byte ``off`` lives at ``smem_base() + off + 8 * i``.

Protocol (TMA path), slot s, ring pass r (phase p = r // slots % 2):
- producer thread 0: wait empty[s] parity p ^ 1 (a fresh barrier counts its "previous"
  phase as complete, so the first pass does not block); ``arrive.expect_tx(full[s],
  slot_bytes)``; issue every TMA box of the slot, completing on full[s].
- consumers (all threads): wait full[s] parity p; ...wgmma...; ``wgmma.wait_group 0``;
  lane 0 of each consumer warp arrives on empty[s] (empty expects 4 x consumer groups).
Channels with a cp.async / ld.global producer: every consumer thread arrives (empty
expects 128 x consumer groups), so that each thread's own release orders its slot reads
before the producer's next writes. Lane 0 alone after ``bar.warp.sync`` is as correct
by the PTX memory model, but compute-sanitizer's racecheck does not follow the warp
barrier and reported each slot reuse as a hazard (sm_80 row sums / attention, H200
2026-12-03); TMA's async-proxy writes are not tracked, so TMA channels keep lane 0.
Minimum sm_90 (mbarrier tx-count, TMA). The cp.async path (cp_async_ops) with the
barrier waits chosen by ``arch`` runs from sm_80.
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from . import mbarrier as mb
from . import smem as sm
from . import tma
from ._util import I32, I64, asm, u32

_U32 = types.uint32
WARPS_PER_GROUP = 4
THREADS_PER_GROUP = 128


def release_lanes(lowering):
    """Consumer threads per warp that arrive on a channel's empty barriers: 1 (lane 0) for
    a TMA channel, 32 for cp.async / ld.global (module docstring)."""
    return 1 if lowering == "tma" else 32


def _releasing(context, builder, lanes):
    """i1: this thread arrives (``lanes`` 1: lane 0 of its warp; 32: every thread)."""
    if lanes == 32:
        return ir.Constant(ir.IntType(1), 1)
    lane = emit(sm.lane_id, context, builder, (), ())
    return builder.icmp_unsigned("==", lane, _c32(0))


def emit(intr, context, builder, argtys, args):
    """Generate the code of another intrinsic inline: its typing with ``argtys``, then
    its codegen with ``args`` (LLVM values; any value for literal-typed arguments)."""
    sig, codegen = intr._defn(context.typing_context, *argtys)
    return codegen(context, builder, sig, list(args))


def _lit(v):
    return v.literal_value if isinstance(v, types.IntegerLiteral) else None


def _need_literals(name, **tys):
    out = {}
    for k, t in tys.items():
        if _lit(t) is None:
            raise TypingError(f"{name}: {k} must be a literal int, got {t}")
        out[k] = _lit(t)
    return out


def _c32(v):
    return ir.Constant(I32, v)


def _bar(context, builder, off, slot_ty, slot):
    """smem_base() + off + 8 * slot as i32."""
    base = emit(sm.smem_base, context, builder, (), ())
    s = u32(context, builder, slot_ty, slot)
    return builder.add(builder.add(base, _c32(off)), builder.mul(s, _c32(8)))


def _is_thread0_of_group(context, builder):
    tig = emit(sm.thread_in_group, context, builder, (), ())
    return builder.icmp_unsigned("==", tig, _c32(0))


def _is_cta_thread0(context, builder):
    """Thread 0 of warp group 0 (of the CTA)."""
    tid = emit(sm.thread_in_group, context, builder, (), ())
    wg = emit(sm.warp_group_id, context, builder, (), ())
    return builder.and_(builder.icmp_unsigned("==", tid, _c32(0)),
                        builder.icmp_unsigned("==", wg, _c32(0)))


@intrinsic
def gpu_init_channel(typingctx, full_off, empty_off, slots, full_count, empty_count):
    """Thread 0 of the CTA initialises a channel's full and empty barrier arrays.

    PTX: ``mbarrier.init.shared::cta.b64 [bar], count`` per barrier. Follow with
    :func:`gpu_barriers_ready` (fence + CTA barrier) before any use.
    """
    k = _need_literals("gpu_init_channel", full_off=full_off, empty_off=empty_off,
                       slots=slots, full_count=full_count, empty_count=empty_count)
    sig = signature(types.none, full_off, empty_off, slots, full_count, empty_count)

    def codegen(context, builder, sig, args):
        with builder.if_then(_is_cta_thread0(context, builder)):
            for s in range(k["slots"]):
                for off, count in ((k["full_off"], k["full_count"]),
                                   (k["empty_off"], k["empty_count"])):
                    addr = emit(sm.smem_base, context, builder, (), ())
                    addr = builder.add(addr, _c32(off + 8 * s))
                    emit(mb.mbarrier_init, context, builder, (_U32, _U32),
                         (addr, _c32(count)))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def gpu_barriers_ready(typingctx, arch):
    """Publish the barriers: ``fence.mbarrier_init.release.cluster;`` (sm_90 and up, by
    ``arch`` = literal 10 * major + minor) then ``bar.sync 0`` (all threads). Below sm_90
    the ``bar.sync`` alone orders the generic-proxy ``mbarrier.init`` stores."""
    k = _need_literals("gpu_barriers_ready", arch=arch)
    sig = signature(types.none, arch)

    def codegen(context, builder, sig, args):
        if k["arch"] >= 90:
            emit(mb.fence_mbarrier_init, context, builder, (), ())
        fn = builder.module.globals.get("llvm.nvvm.barrier0")
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), ()),
                             "llvm.nvvm.barrier0")
        builder.call(fn, ())
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def gpu_producer_acquire(typingctx, empty_off, full_off, slot, phase, tx_bytes):
    """ProducerAcquire + expect_tx (TMA path): thread 0 of the producer group waits for
    empty[slot] with parity ``phase ^ 1`` then ``mbarrier.arrive.expect_tx`` on full[slot]
    for ``tx_bytes`` (every box of the slot). Other producer threads do nothing."""
    k = _need_literals("gpu_producer_acquire", empty_off=empty_off, full_off=full_off,
                       tx_bytes=tx_bytes)
    sig = signature(types.none, empty_off, full_off, slot, phase, tx_bytes)
    return sig, producer_acquire_codegen(k, plain_wait(90))


# -- the waits, with the wait itself as a parameter ------------------------------------
# ``wait(context, builder, addr, parity, site)`` emits one mbarrier parity wait: i32
# ``addr`` / ``parity``; ``site`` = (slot type, slot value, phase type, phase value) of the
# stage op, which a debug wait (codegen/debug.py) records when it times out.

def plain_wait(arch):
    """The wait of a normal build: an unbounded probe loop (:func:`mb.wait_for`)."""
    def wait(context, builder, addr, parity, site):
        emit(mb.wait_for(arch), context, builder, (_U32, _U32), (addr, parity))
    return wait


def producer_acquire_codegen(k, wait):
    """Codegen of :func:`gpu_producer_acquire` (``k``: its literals) around ``wait``."""
    def codegen(context, builder, sig, args):
        with builder.if_then(_is_thread0_of_group(context, builder)):
            empty = _bar(context, builder, k["empty_off"], sig.args[2], args[2])
            ph = builder.xor(u32(context, builder, sig.args[3], args[3]), _c32(1))
            wait(context, builder, empty, ph, (sig.args[2], args[2], sig.args[3], args[3]))
            full = _bar(context, builder, k["full_off"], sig.args[2], args[2])
            emit(mb.mbarrier_arrive_expect_tx, context, builder, (_U32, _U32),
                 (full, _c32(k["tx_bytes"])))
        return context.get_dummy_value()
    return codegen


def consumer_wait_codegen(k, wait):
    """Codegen of :func:`gpu_consumer_wait` around ``wait``."""
    def codegen(context, builder, sig, args):
        full = _bar(context, builder, k["full_off"], sig.args[1], args[1])
        p = u32(context, builder, sig.args[2], args[2])
        wait(context, builder, full, p, (sig.args[1], args[1], sig.args[2], args[2]))
        return context.get_dummy_value()
    return codegen


def cp_async_acquire_codegen(k, wait):
    """Codegen of ``cp_async_ops.gpu_cp_async_acquire`` (same code) around ``wait``."""
    def codegen(context, builder, sig, args):
        empty = _bar(context, builder, k["empty_off"], sig.args[1], args[1])
        ph = builder.xor(context.cast(builder, args[2], sig.args[2], types.uint32), _c32(1))
        wait(context, builder, empty, ph, (sig.args[1], args[1], sig.args[2], args[2]))
        return context.get_dummy_value()
    return codegen


def turn_wait_codegen(k, wait):
    """Codegen of :func:`gpu_turn_wait` around ``wait`` (the slot recorded is the group)."""
    def codegen(context, builder, sig, args):
        turn = _bar(context, builder, k["turn_off"], sig.args[2], args[2])
        p = u32(context, builder, sig.args[3], args[3])
        wait(context, builder, turn, p, (sig.args[2], args[2], sig.args[3], args[3]))
        token = _bar(context, builder, k["token_off"], sig.args[2], args[2])
        return asm(builder, "ld.shared.u64 $0, [$1];", "=l,r,~{memory}", [token], ret=I64)
    return codegen


@intrinsic
def gpu_tma_copy(typingctx, dst_off, slot_bytes, slot, tmaps, tmap_index, full_off,
                 row, col, boxes, box_cols, box_bytes):
    """Thread 0 of the producer issues ``boxes`` TMA boxes of one tile part.

    Box b lands at ``smem_base() + dst_off + slot * slot_bytes + b * box_bytes`` from
    tensor map ``tmaps + 128 * tmap_index`` at coordinates ``{col + b * box_cols, row}``
    (innermost first), completing on full[slot]. PTX: ``cp.async.bulk.tensor.2d...``.
    """
    k = _need_literals("gpu_tma_copy", dst_off=dst_off, slot_bytes=slot_bytes,
                       tmap_index=tmap_index, full_off=full_off, boxes=boxes,
                       box_cols=box_cols, box_bytes=box_bytes)
    sig = signature(types.none, dst_off, slot_bytes, slot, tmaps, tmap_index, full_off,
                    row, col, boxes, box_cols, box_bytes)

    def codegen(context, builder, sig, args):
        with builder.if_then(_is_thread0_of_group(context, builder)):
            s = u32(context, builder, sig.args[2], args[2])
            base = emit(sm.smem_base, context, builder, (), ())
            dst0 = builder.add(builder.add(base, _c32(k["dst_off"])),
                               builder.mul(s, _c32(k["slot_bytes"])))
            full = _bar(context, builder, k["full_off"], sig.args[2], args[2])
            tm = context.cast(builder, args[3], sig.args[3], types.uint64)
            tm = builder.add(tm, ir.Constant(I64, 128 * k["tmap_index"]))
            r = u32(context, builder, sig.args[6], args[6])
            c = u32(context, builder, sig.args[7], args[7])
            for b in range(k["boxes"]):
                dst = builder.add(dst0, _c32(b * k["box_bytes"]))
                cb = builder.add(c, _c32(b * k["box_cols"]))
                emit(tma.tma_load_2d, context, builder,
                     (_U32, types.uint64, _U32, _U32, _U32), (dst, tm, full, cb, r))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def gpu_consumer_wait(typingctx, full_off, slot, phase, arch):
    """ConsumerWait: every consumer thread waits for full[slot] with parity ``phase``
    (``mbarrier.try_wait`` loop from sm_90, ``mbarrier.test_wait`` loop below; ``arch`` is
    the literal 10 * major + minor)."""
    k = _need_literals("gpu_consumer_wait", full_off=full_off, arch=arch)
    sig = signature(types.none, full_off, slot, phase, arch)
    return sig, consumer_wait_codegen(k, plain_wait(k["arch"]))


def _release(context, builder, lanes, fence, go, empty_of):
    """The release of one slot: with ``fence`` every thread first orders its generic-proxy
    reads of the slot before the producer's next TMA writes (async proxy) with
    ``fence.proxy.async.shared::cta`` and the warp syncs; then the arriving threads
    (``lanes``) arrive on the empty barrier ``empty_of()`` where ``go`` (i1 or None)."""
    if fence:
        emit(sm.fence_proxy_async_shared, context, builder, (), ())
        asm(builder, "bar.warp.sync -1;", "~{memory}")
    pred = _releasing(context, builder, lanes)
    if go is not None:
        pred = builder.and_(pred, go)
    with builder.if_then(pred):
        emit(mb.mbarrier_arrive, context, builder, (_U32,), (empty_of(),))
    return context.get_dummy_value()


@intrinsic
def gpu_consumer_release(typingctx, empty_off, slot, lanes, fence):
    """ConsumerRelease: lane 0 of each consumer warp (``lanes`` 1) or every consumer
    thread (``lanes`` 32, literal: :func:`release_lanes`) arrives on empty[slot].
    ``fence`` (literal 0/1): the consumers read the slot of a TMA channel with ``ld.shared``
    (generic proxy) and the next TMA write (async proxy) of it must follow those reads:
    ``fence.proxy.async.shared::cta`` by every thread first (sm_90; without it a
    persistent loop read the next tile's bytes, H200 2026-12-03).

    Must follow ``wgmma.wait_group 0`` for every wgmma reading the slot (sm_90), or the
    warp's ``bar.warp.sync`` after its last ldmatrix of the slot (sm_80, mma_sync).
    """
    k = _need_literals("gpu_consumer_release", empty_off=empty_off, lanes=lanes, fence=fence)
    sig = signature(types.none, empty_off, slot, lanes, fence)

    def codegen(context, builder, sig, args):
        return _release(context, builder, k["lanes"], k["fence"], None,
                        lambda: _bar(context, builder, k["empty_off"], sig.args[1], args[1]))

    return sig, codegen


@intrinsic
def gpu_consumer_release_prev(typingctx, empty_off, prev_slot, lanes, fence):
    """Deferred ConsumerRelease: as :func:`gpu_consumer_release` for slot ``prev_slot``
    when it is >= 0 (the slot read by the dot before the one still in flight)."""
    k = _need_literals("gpu_consumer_release_prev", empty_off=empty_off, lanes=lanes,
                       fence=fence)
    sig = signature(types.none, empty_off, prev_slot, lanes, fence)

    def codegen(context, builder, sig, args):
        prev = context.cast(builder, args[1], sig.args[1], types.int64)
        go = builder.icmp_signed(">=", prev, ir.Constant(I64, 0))
        return _release(context, builder, k["lanes"], k["fence"], go,
                        lambda: _bar(context, builder, k["empty_off"], types.int64, prev))

    return sig, codegen


@intrinsic
def gpu_warp_group(typingctx):
    """Warp-group index of the thread (``tid.x / 128``, warp-uniform), as int64."""
    sig = signature(types.int64)

    def codegen(context, builder, sig, args):
        wg = emit(sm.warp_group_id, context, builder, (), ())
        return builder.sext(wg, I64) if wg.type.width < 64 else wg

    return sig, codegen


# -- ping-pong turns (passes/ping_pong.py) ---------------------------------------------
# Shared memory: G turn mbarriers at ``turn_off`` (8 B each, count THREADS_PER_GROUP: every
# thread of the handing-over group arrives), then G u64 tokens at ``token_off`` (the
# ring counter handed to group g). Minimum sm_80 (mbarrier; try_wait loop from sm_90).

@intrinsic
def gpu_init_turns(typingctx, turn_off, token_off, groups):
    """Thread 0 of the CTA: ``mbarrier.init.shared::cta.b64 [turn_g], 128`` and
    ``st.shared.u64 [token_g], 0`` for each group g (group 0's first turn starts the ring
    at 0). Follow with :func:`gpu_barriers_ready`."""
    k = _need_literals("gpu_init_turns", turn_off=turn_off, token_off=token_off,
                       groups=groups)
    sig = signature(types.none, turn_off, token_off, groups)

    def codegen(context, builder, sig, args):
        with builder.if_then(_is_cta_thread0(context, builder)):
            for g in range(k["groups"]):
                turn = _bar(context, builder, k["turn_off"], types.int64, ir.Constant(I64, g))
                emit(mb.mbarrier_init, context, builder, (_U32, _U32),
                     (turn, _c32(THREADS_PER_GROUP)))
                token = _bar(context, builder, k["token_off"], types.int64, ir.Constant(I64, g))
                asm(builder, "st.shared.u64 [$0], $1;", "r,l,~{memory}",
                    [token, ir.Constant(I64, 0)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def gpu_turn_wait(typingctx, turn_off, token_off, group, phase, arch):
    """Every thread of consumer ``group`` waits for its turn barrier with parity ``phase``
    (acquire), then ``ld.shared.u64`` of its token: the ring counter handed over. -> int64"""
    k = _need_literals("gpu_turn_wait", turn_off=turn_off, token_off=token_off, arch=arch)
    sig = signature(types.int64, turn_off, token_off, group, phase, arch)
    return sig, turn_wait_codegen(k, plain_wait(k["arch"]))


@intrinsic
def gpu_turn_pass(typingctx, turn_off, token_off, group, ring):
    """The group's first thread stores ``st.shared.u64 [token_group], ring``; then every
    thread of the handing-over group ``mbarrier.arrive`` (release) on group ``group``'s
    turn barrier, which orders its own reads of its token before the next write of it.
    (Lane 0 of each warp after ``bar.warp.sync`` left 2 racecheck hazards on the H200,
    2026-12-03: racecheck does not follow the warp barrier.)"""
    k = _need_literals("gpu_turn_pass", turn_off=turn_off, token_off=token_off)
    sig = signature(types.none, turn_off, token_off, group, ring)

    def codegen(context, builder, sig, args):
        first = builder.icmp_unsigned("==", emit(sm.thread_in_group, context, builder, (), ()),
                                      _c32(0))
        with builder.if_then(first):
            token = _bar(context, builder, k["token_off"], sig.args[2], args[2])
            value = context.cast(builder, args[3], sig.args[3], types.int64)
            asm(builder, "st.shared.u64 [$0], $1;", "r,l,~{memory}", [token, value])
        turn = _bar(context, builder, k["turn_off"], sig.args[2], args[2])
        emit(mb.mbarrier_arrive, context, builder, (_U32,), (turn,))
        return context.get_dummy_value()

    return sig, codegen
