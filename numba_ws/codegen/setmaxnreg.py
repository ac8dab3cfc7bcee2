"""``setmaxnreg``: move registers between warp groups (PTX ISA 9.7.19.5, sm_90a)."""
from numba.cuda import types
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import asm, literal_int

#: The register counts setmaxnreg accepts: multiples of 8 in [24, 256].
VALID_COUNTS = tuple(range(24, 257, 8))


def _make(action):
    def typer(typingctx, n):
        count = literal_int(f"setmaxnreg_{action}", "n", n, VALID_COUNTS)
        sig = signature(types.none, n)

        def codegen(context, builder, sig, args):
            asm(builder, f"setmaxnreg.{action}.sync.aligned.u32 {count};", "~{memory}")
            return context.get_dummy_value()

        return sig, codegen
    return typer


@intrinsic
def setmaxnreg_inc(typingctx, n):
    """setmaxnreg_inc(n): ``setmaxnreg.inc.sync.aligned.u32 n;`` (n a literal, 24..256, %8).

    Raises the warp's per-thread register limit to ``n``, blocking until the CTA's pool has
    enough registers. Requires ``sm_90a``. Invariants: every warp of the warp group executes
    the same instruction (``.aligned``: warp-group-uniform control flow), the current limit
    is <= n, and the kernel has a register cap at entry (``launch_bounds=(threads, 1)`` or
    ``max_registers``), else ptxas ignores it (warning C7508).
    """
    return _make("inc")(typingctx, n)


@intrinsic
def setmaxnreg_dec(typingctx, n):
    """setmaxnreg_dec(n): ``setmaxnreg.dec.sync.aligned.u32 n;`` (n a literal, 24..256, %8).

    Releases registers so the warp's per-thread limit becomes ``n`` (current limit >= n).
    Requires ``sm_90a``. Invariants: as :func:`setmaxnreg_inc`; the producer warp group
    runs it first so that the consumers' ``inc`` can be satisfied.
    """
    return _make("dec")(typingctx, n)
