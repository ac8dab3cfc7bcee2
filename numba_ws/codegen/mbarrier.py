"""mbarrier intrinsics (PTX ISA 9.7.13.15): init, arrive, arrive.expect_tx, try_wait.parity
and (sm_80) test_wait.parity.

An mbarrier is an 8-byte, 8-byte-aligned object in shared memory; ``addr`` is its uint32
shared-window address. A phase completes when the pending arrival count reaches zero *and*
the transaction count is zero (9.7.13.15.6); the parity waits below succeed once the phase
with the given parity (0 for the first phase after init, then 1, 0, ...) has completed.
All operations here use ``.shared::cta`` and the default ``.release`` / ``.acquire`` at
``.cta`` scope, which is what a single-CTA (non-cluster) kernel needs. ``init``,
``arrive`` (no count) and ``test_wait`` need sm_80; the ``.shared::cta`` spelling of their
state space needs PTX ISA 7.8 (numba-cuda's NVVM writes ``.version`` 9.0; checked with
``ptxas -arch=sm_80`` in tests/test_ptx.py).
"""
from numba.cuda import types
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import I32, asm, check_ints, pred_to_bool, u32


@intrinsic
def mbarrier_init(typingctx, addr, count):
    """mbarrier_init(addr, count): ``mbarrier.init.shared::cta.b64 [addr], count;``

    Sets the expected arrival count of the barrier at ``addr`` and its phase to 0.
    Minimum sm_80. Invariants: exactly one thread initializes each barrier, before any
    other use; then :func:`fence_mbarrier_init` and a CTA barrier (``bar.sync``) publish it.
    """
    check_ints("mbarrier_init", addr=addr, count=count)
    sig = signature(types.none, addr, count)

    def codegen(context, builder, sig, args):
        a = u32(context, builder, sig.args[0], args[0])
        c = u32(context, builder, sig.args[1], args[1])
        asm(builder, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}", [a, c])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def fence_mbarrier_init(typingctx):
    """fence_mbarrier_init(): ``fence.mbarrier_init.release.cluster;``

    Release fence restricted to this thread's prior ``mbarrier.init`` operations
    (PTX ISA 9.7.13.4, ``.op_restrict``). Minimum sm_90.
    Invariants: executed by the initializing thread after its inits; other threads still
    need a synchronizing barrier (``bar.sync`` / ``cuda.syncthreads()``) before using them.
    """
    sig = signature(types.none)

    def codegen(context, builder, sig, args):
        asm(builder, "fence.mbarrier_init.release.cluster;", "~{memory}")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def mbarrier_arrive(typingctx, addr):
    """mbarrier_arrive(addr): ``mbarrier.arrive.shared::cta.b64 _, [addr];``

    One arrive-on (count 1) with release semantics at CTA scope; the returned state is
    discarded (sink ``_``). Minimum sm_80.
    Invariants: executed by as many threads per phase as the init count expects (for an
    "empty" barrier released by G consumer warp groups: one elected thread per group).
    """
    check_ints("mbarrier_arrive", addr=addr)
    sig = signature(types.none, addr)

    def codegen(context, builder, sig, args):
        a = u32(context, builder, sig.args[0], args[0])
        asm(builder, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", [a])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def mbarrier_arrive_expect_tx(typingctx, addr, nbytes):
    """mbarrier_arrive_expect_tx(addr, nbytes):
    ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [addr], nbytes;``

    Raises the barrier's expected transaction count by ``nbytes`` and then arrives once
    (9.7.13.15.13: with ``.expect_tx`` the arrive count is 1). TMA loads issued with
    ``.mbarrier::complete_tx::bytes`` on this barrier count their bytes down; bytes of
    out-of-bounds (zero-filled) box elements count too. Minimum sm_90.
    Invariants: one thread per phase (the producer's elected thread), issued before or
    after the matching TMA loads in the same phase; nbytes < 2**20.
    """
    check_ints("mbarrier_arrive_expect_tx", addr=addr, nbytes=nbytes)
    sig = signature(types.none, addr, nbytes)

    def codegen(context, builder, sig, args):
        a = u32(context, builder, sig.args[0], args[0])
        n = u32(context, builder, sig.args[1], args[1])
        asm(builder, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
            "r,r,~{memory}", [a, n])
        return context.get_dummy_value()

    return sig, codegen


def _wait_loop(probe, label):
    """A ``{ }``-scoped asm loop around an mbarrier probe (``$0`` barrier, ``$1`` parity)."""
    return ("{\n"
            " .reg .pred ws_p;\n"
            f"{label}:\n"
            f" mbarrier.{probe}.parity.shared::cta.b64 ws_p, [$0], $1;\n"
            f" @!ws_p bra {label};\n"
            "}")


def _wait_loop_codegen(text):
    def codegen(context, builder, sig, args):
        a = u32(context, builder, sig.args[0], args[0])
        p = u32(context, builder, sig.args[1], args[1])
        asm(builder, text, "r,r,~{memory}", [a, p])
        return context.get_dummy_value()
    return codegen


_WAIT_LOOP = _wait_loop("try_wait", "WS_WAIT_LOOP")
_TEST_WAIT_LOOP = _wait_loop("test_wait", "WS_TEST_WAIT_LOOP")


@intrinsic
def mbarrier_wait(typingctx, addr, phase):
    """mbarrier_wait(addr, phase): block until the phase of parity ``phase & 1`` completed.

    PTX (one asm block, the label is local to the ``{ }`` scope)::

        { .reg .pred ws_p;
        WS_WAIT_LOOP:
          mbarrier.try_wait.parity.shared::cta.b64 ws_p, [addr], phase;
          @!ws_p bra WS_WAIT_LOOP; }

    ``try_wait`` suspends the thread for a system-dependent time before returning false,
    so the loop does not spin hot (9.7.13.15.16). Acquire semantics at CTA scope: data
    published by the arrivals (and TMA bytes completed on the barrier) is visible after it.
    Minimum sm_90. Invariants: any number of threads may wait; each waiter tracks its own
    phase bit, flipping it every time its ring index wraps.
    """
    check_ints("mbarrier_wait", addr=addr, phase=phase)
    return signature(types.none, addr, phase), _wait_loop_codegen(_WAIT_LOOP)


@intrinsic
def mbarrier_try_wait(typingctx, addr, phase):
    """mbarrier_try_wait(addr, phase) -> bool: one ``try_wait`` probe.

    PTX: ``{ .reg .pred ws_p; mbarrier.try_wait.parity.shared::cta.b64 ws_p, [addr], phase;
    selp.u32 r, 1, 0, ws_p; }``. True when the phase of parity ``phase`` has completed.
    Minimum sm_90. Invariants: as :func:`mbarrier_wait`.
    """
    check_ints("mbarrier_try_wait", addr=addr, phase=phase)
    sig = signature(types.boolean, addr, phase)

    def codegen(context, builder, sig, args):
        a = u32(context, builder, sig.args[0], args[0])
        p = u32(context, builder, sig.args[1], args[1])
        return pred_to_bool(builder, probe(builder, 90, a, p))

    return sig, codegen


def probe(builder, arch, addr, parity):
    """One parity probe as an i32 (1: the phase of parity ``parity`` completed), for
    ``arch`` (10 * major + minor): ``mbarrier.try_wait`` from sm_90 (suspends a while
    before failing), ``mbarrier.test_wait`` below (returns at once). PTX::

        { .reg .pred ws_p;
          mbarrier.{try_wait|test_wait}.parity.shared::cta.b64 ws_p, [addr], parity;
          selp.u32 r, 1, 0, ws_p; }

    ``addr``, ``parity``: i32 LLVM values. Acquire at CTA scope when it succeeds.
    """
    op = "try_wait" if arch >= 90 else "test_wait"
    text = ("{\n .reg .pred ws_p;\n"
            f" mbarrier.{op}.parity.shared::cta.b64 ws_p, [$1], $2;\n"
            " selp.u32 $0, 1, 0, ws_p;\n}")
    return asm(builder, text, "=r,r,r,~{memory}", [addr, parity], ret=I32)


@intrinsic
def mbarrier_test_wait_loop(typingctx, addr, phase):
    """mbarrier_test_wait_loop(addr, phase): :func:`mbarrier_wait` for sm_80.

    PTX (one asm block, the label is local to the ``{ }`` scope)::

        { .reg .pred ws_p;
        WS_TEST_WAIT_LOOP:
          mbarrier.test_wait.parity.shared::cta.b64 ws_p, [addr], phase;
          @!ws_p bra WS_TEST_WAIT_LOOP; }

    ``test_wait`` is the non-blocking probe (9.7.13.15.16: it returns at once), so this
    loop spins. Default ``.acquire`` at ``.cta`` scope, as ``try_wait``. Minimum sm_80
    (``.parity``: PTX ISA 7.1; ``.shared::cta``: 7.8). Invariants: as :func:`mbarrier_wait`.
    """
    check_ints("mbarrier_test_wait_loop", addr=addr, phase=phase)
    return signature(types.none, addr, phase), _wait_loop_codegen(_TEST_WAIT_LOOP)


def wait_for(arch):
    """The parity-wait intrinsic for ``arch`` (10 * major + minor): try_wait from sm_90,
    test_wait below."""
    return mbarrier_wait if arch >= 90 else mbarrier_test_wait_loop
