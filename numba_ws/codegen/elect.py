"""``elect.sync``: pick one lane of a warp (PTX ISA 9.7.13.14)."""
from numba.cuda import types
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import I32, asm, pred_to_bool


@intrinsic
def elect_one(typingctx):
    """elect_one() -> bool: True in exactly one lane of the (fully active) warp.

    PTX: ``{ .reg .pred ws_p; elect.sync _|ws_p, 0xffffffff; selp.u32 r, 1, 0, ws_p; }``.
    The election is deterministic for a given member mask. Minimum sm_90.
    Invariants: all 32 lanes of the warp execute it (the member mask is the full warp;
    a lane outside the mask is undefined behaviour), i.e. call it in warp-uniform code.
    """
    sig = signature(types.boolean)

    def codegen(context, builder, sig, args):
        text = ("{\n .reg .pred ws_p;\n elect.sync _|ws_p, 0xffffffff;\n"
                " selp.u32 $0, 1, 0, ws_p;\n}")
        return pred_to_bool(builder, asm(builder, text, "=r", [], ret=I32))

    return sig, codegen
