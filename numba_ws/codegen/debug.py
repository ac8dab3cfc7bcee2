"""Debug builds: mbarrier waits that report a hang instead of hanging, and a schedule
broken on purpose to test them.

``NUMBA_WS_DEBUG_BARRIERS=1`` (see numba_ws/knobs.py) makes ``lower_tiles`` lower every
barrier wait of a kernel (producer acquire, consumer wait, cp.async acquire, ping-pong turn
wait) with the ``*_debug`` intrinsics below: the same code around a bounded wait
(:func:`bounded_wait`)::

    start = %clock64
    loop:  probe (try_wait from sm_90, test_wait below); success -> done
           waited = %clock64 - start
           waited >= timeout          -> timed out
           waited >= POLL_AFTER_CYCLES and record.status != 0 -> exit   (another wait timed
                                           out: this kernel is being abandoned)
           -> loop
    timed out: the first such thread of the launch (atom.cas on record.status) writes the
           record; every one adds 1 to record.timeouts; exit
    done:

``exit`` ends only the waiting thread; the threads it would have released time out (or
see the status) in turn, so the kernel ends within about one timeout, the CUDA context
stays usable, and the launcher (runtime/launcher.py), which synchronizes after every
launch of a module holding a record, raises ``WSBarrierTimeout`` with the record's fields.
The default timeout, NUMBA_WS_DEBUG_TIMEOUT_CYCLES = 4e9 SM cycles, is about 2 s at the
H200's 1.98 GHz boost clock (``%clock64`` counts SM cycles, so the time scales with the
clock). A wait that succeeds costs two ``%clock64`` reads more than in a normal build.

Device record: ``.visible .global .align 8 .b8 __ws_debug_record[64]`` (:data:`RECORD`,
u32 words unless noted, zero at module load), and ``__ws_debug_info``: a constant JSON
text (kernel name, channel descriptions, timeout) the launcher reads to name the channel.
PTX used: ``mov.u64 %clock64``, ``ld.volatile.global``, ``atom.global.cas.b32``,
``red.global.add.u32``, ``st.global``, ``exit``; minimum sm_80 (the probes'
minimum: test_wait sm_80, try_wait sm_90).

``NUMBA_WS_DEBUG_DROP_RELEASE=<channel>``: :func:`drop_releases` removes every
``ws_consumer_release`` / ``ws_consumer_release_prev`` of that channel from the
partitioned IR (the GPU build applies it before lowering; the schedule simulator finds
the deadlock when a test applies it to a partitioned state): the producer's acquire of a
slot it already filled once then never completes.
Without the knobs none of this is emitted: a normal build's PTX is unchanged.
"""
import json

from llvmlite import ir

from numba.cuda import types
from numba.cuda.core import ir as nir
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from .. import knobs
from ..errors import WSUsageError
from . import channel_ops as cg
from . import mbarrier as mb
from ._util import I32, I64, asm, sreg, u32

# the record's layout and its host-side decoding (Numba-free: the launcher reads it)
from ..runtime.debug_record import (  # noqa: F401,E402
    CONSUMER_WAIT, CP_ASYNC_ACQUIRE, INFO_SYMBOL, PRODUCER_ACQUIRE, RECORD, RECORD_BYTES,
    RECORD_SYMBOL, TURN_WAIT, WAITS, decode_info, decode_record, describe_timeout)

#: A thread polls the record's status only after waiting this long (a normal wait is
#: shorter: the poll's global load stays off the fast path).
POLL_AFTER_CYCLES = 1 << 16


def wait_timeout():
    """The debug wait timeout in SM cycles when NUMBA_WS_DEBUG_BARRIERS is on, else None."""
    return knobs.debug_timeout_cycles() if knobs.debug_barriers() else None


# -- device side ------------------------------------------------------------------------

def _global(module, name, llty, init, constant):
    gv = module.globals.get(name)
    if gv is None:
        gv = ir.GlobalVariable(module, llty, name, addrspace=1)
        gv.initializer = init
        gv.global_constant = constant
        gv.align = 8
    return gv


def _record_address(builder):
    """i64 global address of this module's record (defined on first use)."""
    llty = ir.ArrayType(I32, RECORD_BYTES // 4)
    gv = _global(builder.module, RECORD_SYMBOL, llty, ir.Constant(llty, None), False)
    return builder.ptrtoint(gv, I64)


def _clock64(builder):
    return asm(builder, "mov.u64 $0, %clock64;", "=l", [], ret=I64)


def _field(builder, record, name):
    return builder.add(record, ir.Constant(I64, RECORD[name][0]))


def _store(builder, record, name, value):
    kind = "u64" if RECORD[name][1] == "Q" else "u32"
    asm(builder, f"st.global.{kind} [$0], $1;", f"l,{'l' if kind == 'u64' else 'r'},~{{memory}}",
        [_field(builder, record, name), value])


def bounded_wait(arch, kind, channel, timeout):
    """A wait emitter (see channel_ops: ``wait(context, builder, addr, parity, site)``)
    that gives up after ``timeout`` SM cycles, records the wait and exits the thread.
    ``kind``: a key of :data:`WAITS`; ``channel``: the channel id (-1 for a turn)."""
    def wait(context, builder, addr, parity, site):
        slot_ty, slot, phase_ty, phase = site
        c32 = lambda v: ir.Constant(I32, v)   # noqa: E731
        start = _clock64(builder)
        loop = builder.append_basic_block("ws_dbg_wait")
        check = builder.append_basic_block("ws_dbg_check")
        early = builder.append_basic_block("ws_dbg_early")
        poll = builder.append_basic_block("ws_dbg_poll")
        report = builder.append_basic_block("ws_dbg_timeout")
        leave = builder.append_basic_block("ws_dbg_exit")
        done = builder.append_basic_block("ws_dbg_done")
        builder.branch(loop)

        builder.position_at_end(loop)
        ok = mb.probe(builder, arch, addr, parity)
        builder.cbranch(builder.icmp_unsigned("!=", ok, c32(0)), done, check)

        builder.position_at_end(check)
        waited = builder.sub(_clock64(builder), start)
        builder.cbranch(builder.icmp_unsigned(">=", waited, ir.Constant(I64, timeout)),
                        report, early)

        builder.position_at_end(early)
        builder.cbranch(builder.icmp_unsigned(">=", waited, ir.Constant(I64, POLL_AFTER_CYCLES)),
                        poll, loop)

        builder.position_at_end(poll)
        record = _record_address(builder)
        status = asm(builder, "ld.volatile.global.u32 $0, [$1];", "=r,l,~{memory}",
                     [_field(builder, record, "status")], ret=I32)
        builder.cbranch(builder.icmp_unsigned("!=", status, c32(0)), leave, loop)

        builder.position_at_end(report)
        record = _record_address(builder)
        old = asm(builder, "atom.global.cas.b32 $0, [$1], $2, $3;", "=r,l,r,r,~{memory}",
                  [_field(builder, record, "status"), c32(0), c32(1)], ret=I32)
        with builder.if_then(builder.icmp_unsigned("==", old, c32(0))):
            tid = sreg(builder, "tid.x")
            fields = {"wait": c32(kind), "channel": c32(channel & 0xFFFFFFFF),
                      "slot": u32(context, builder, slot_ty, slot),
                      "phase": u32(context, builder, phase_ty, phase), "parity": parity,
                      "warp_group": builder.lshr(tid, c32(7)), "thread": tid,
                      "cta_x": sreg(builder, "ctaid.x"), "cta_y": sreg(builder, "ctaid.y"),
                      "cta_z": sreg(builder, "ctaid.z"), "cycles": waited,
                      "timeout": ir.Constant(I64, timeout)}
            for name, value in fields.items():
                _store(builder, record, name, value)
        asm(builder, "red.global.add.u32 [$0], $1;", "l,r,~{memory}",
            [_field(builder, record, "timeouts"), c32(1)])
        builder.branch(leave)

        builder.position_at_end(leave)
        asm(builder, "exit;", "~{memory}")
        builder.branch(done)      # not reached at run time; keeps the IR well formed

        builder.position_at_end(done)
    return wait


def _debug_literals(name, **tys):
    k = cg._need_literals(name, **tys)
    if not 0 < k["timeout"] < 2 ** 63:
        raise TypingError(f"{name}: timeout {k['timeout']} must be 1 .. 2**63 - 1 cycles")
    return k


@intrinsic
def gpu_producer_acquire_debug(typingctx, empty_off, full_off, slot, phase, tx_bytes,
                               channel, timeout):
    """:func:`~.channel_ops.gpu_producer_acquire` with a bounded wait (:func:`bounded_wait`,
    kind producer acquire). ``channel``, ``timeout`` (SM cycles): literal ints. sm_90."""
    k = _debug_literals("gpu_producer_acquire_debug", empty_off=empty_off, full_off=full_off,
                        tx_bytes=tx_bytes, channel=channel, timeout=timeout)
    sig = signature(types.none, empty_off, full_off, slot, phase, tx_bytes, channel, timeout)
    wait = bounded_wait(90, PRODUCER_ACQUIRE, k["channel"], k["timeout"])
    return sig, cg.producer_acquire_codegen(k, wait)


@intrinsic
def gpu_consumer_wait_debug(typingctx, full_off, slot, phase, arch, channel, timeout):
    """:func:`~.channel_ops.gpu_consumer_wait` with a bounded wait (kind consumer wait)."""
    k = _debug_literals("gpu_consumer_wait_debug", full_off=full_off, arch=arch,
                        channel=channel, timeout=timeout)
    sig = signature(types.none, full_off, slot, phase, arch, channel, timeout)
    wait = bounded_wait(k["arch"], CONSUMER_WAIT, k["channel"], k["timeout"])
    return sig, cg.consumer_wait_codegen(k, wait)


@intrinsic
def gpu_cp_async_acquire_debug(typingctx, empty_off, slot, phase, arch, channel, timeout):
    """``cp_async_ops.gpu_cp_async_acquire`` with a bounded wait (kind cp.async acquire)."""
    k = _debug_literals("gpu_cp_async_acquire_debug", empty_off=empty_off, arch=arch,
                        channel=channel, timeout=timeout)
    sig = signature(types.none, empty_off, slot, phase, arch, channel, timeout)
    wait = bounded_wait(k["arch"], CP_ASYNC_ACQUIRE, k["channel"], k["timeout"])
    return sig, cg.cp_async_acquire_codegen(k, wait)


@intrinsic
def gpu_turn_wait_debug(typingctx, turn_off, token_off, group, phase, arch, timeout):
    """:func:`~.channel_ops.gpu_turn_wait` with a bounded wait (kind turn wait; the
    record's slot is the group, its channel -1). -> int64"""
    k = _debug_literals("gpu_turn_wait_debug", turn_off=turn_off, token_off=token_off,
                        arch=arch, timeout=timeout)
    sig = signature(types.int64, turn_off, token_off, group, phase, arch, timeout)
    wait = bounded_wait(k["arch"], TURN_WAIT, -1, k["timeout"])
    return sig, cg.turn_wait_codegen(k, wait)


@intrinsic
def gpu_debug_info(typingctx, text):
    """Defines ``__ws_debug_info`` (constant ``.global`` bytes: ``text``, a literal str,
    NUL-terminated) and the record; emits no instruction."""
    if not isinstance(text, types.StringLiteral):
        raise TypingError(f"gpu_debug_info: text must be a literal str, got {text}")
    data = text.literal_value.encode("utf-8") + b"\0"
    sig = signature(types.none, text)

    def codegen(context, builder, sig, args):
        llty = ir.ArrayType(ir.IntType(8), len(data))
        _global(builder.module, INFO_SYMBOL, llty, ir.Constant(llty, bytearray(data)), True)
        _record_address(builder)
        return context.get_dummy_value()

    return sig, codegen


def info_text(plan):
    """The JSON the launcher reads back to name a timed-out wait's kernel and channel."""
    return json.dumps({"kernel": plan.kernel_name, "cc": list(plan.cc[:2]),
                       "channels": [ch.describe() for ch in plan.channels],
                       "dropped_release": dropped_channel(plan),
                       "timeout_cycles": wait_timeout()}, separators=(",", ":"))


# -- a schedule broken on purpose ------------------------------------------------------

def dropped_channel(plan, spec=None):
    """The id of the channel NUMBA_WS_DEBUG_DROP_RELEASE (or ``spec``) names, or None.

    The value is a channel id or the name of a variable loaded into a channel (its load's
    target, or its array parameter); anything else is a WSUsageError listing the channels.
    """
    spec = knobs.debug_drop_release() if spec is None else str(spec).strip()
    if not spec:
        return None
    found = [ch.id for ch in plan.channels if str(ch.id) == spec or any(
        spec in (m.get("var"), m.get("array")) for m in ch.members)]
    if not found:
        listing = "; ".join(ch.describe() for ch in plan.channels) or "none"
        raise WSUsageError(f"NUMBA_WS_DEBUG_DROP_RELEASE={spec!r} names no channel of kernel "
                           f"{plan.kernel_name} (channels: {listing})")
    return found[0]


def drop_releases(state, spec=None):
    """Remove the consumer releases of the channel :func:`dropped_channel` names from the
    partitioned IR of ``state``; returns how many were removed (0 without the knob)."""
    from ..language import stage_ops as so
    channel = dropped_channel(state.ws, spec)
    if channel is None:
        return 0
    fir, removed = state.func_ir, 0
    releases = (so.ws_consumer_release, so.ws_consumer_release_prev)
    for block in fir.blocks.values():
        body = []
        for stmt in block.body:
            if isinstance(stmt, nir.Assign) and isinstance(stmt.value, nir.Expr) \
                    and stmt.value.op == "call":
                fn = fir.get_definition(stmt.value.func)
                if isinstance(fn, (nir.Global, nir.FreeVar)) and fn.value in releases \
                        and fir.get_definition(stmt.value.args[0]).value == channel:
                    removed += 1
                    continue
            body.append(stmt)
        block.body = body
    return removed
