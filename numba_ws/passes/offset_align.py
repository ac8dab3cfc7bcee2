"""What a load's offsets are known to be a multiple of (used by passes/lower_loads.py).

``alignment(var, func_ir, typemap)`` is the largest power of two (in elements, at most
:data:`CAP`) that divides every value the integer ``var`` can take, from its definition:
literals and constexprs give their lowest set bit; ``a + b`` / ``a - b`` the smaller
alignment, ``a * b`` the product, ``-a`` and copies that of ``a``; anything else
(``ws.program_id``, a loop variable, a runtime argument, ``%``, ``//``) is only known to
be an integer: 1. So ``k * BK`` and ``pid_n * BN`` are BK- / BN-aligned, ``c0 - 2`` is
2-aligned and ``ws.program_id(0)`` 1-aligned.

Why it matters: TMA faults (an illegal instruction, H200, 2026-12-03, found by the GPU
fuzzer) when a box's innermost coordinate is not a multiple of 16 bytes, and cp.async /
vector ld.global pieces must be aligned to their size; a load whose column offset is
only N-byte aligned uses pieces of at most N bytes.
"""
import operator

from numba.cuda import types
from numba.cuda.core import ir

#: Alignments are capped here (elements): enough for any piece or TMA requirement.
CAP = 64


def lowbit(n):
    """The largest power of two dividing ``n`` (``CAP`` for 0)."""
    n = int(n)
    return CAP if n == 0 else min(CAP, n & -n)


def alignment(var, func_ir, typemap, depth=0):
    """Largest power of two (<= CAP) known to divide every value of int ``var``."""
    ty = typemap.get(var.name)
    if isinstance(ty, types.IntegerLiteral):
        return lowbit(ty.literal_value)
    if depth > 32:
        return 1
    try:
        d = func_ir.get_definition(var)
    except KeyError:            # several definitions (a loop-carried value) or none
        return 1
    if isinstance(d, (ir.Const, ir.Global, ir.FreeVar)):
        value = d.value
        return lowbit(value) if isinstance(value, int) and not isinstance(value, bool) else 1
    if isinstance(d, ir.Var):
        return alignment(d, func_ir, typemap, depth + 1)
    if not isinstance(d, ir.Expr):
        return 1
    if d.op in ("binop", "inplace_binop"):
        fn = d.fn if d.op == "binop" else d.immutable_fn
        a = alignment(d.lhs, func_ir, typemap, depth + 1)
        b = alignment(d.rhs, func_ir, typemap, depth + 1)
        if fn in (operator.add, operator.sub):
            return min(a, b)
        if fn is operator.mul:
            return min(CAP, a * b)
        return 1
    if d.op == "unary" and d.fn in (operator.neg, operator.pos):
        return alignment(d.value, func_ir, typemap, depth + 1)
    if d.op == "cast":
        return alignment(d.value, func_ir, typemap, depth + 1)
    return 1


def offset_alignment(load, dim, func_ir, typemap):
    """Alignment (elements) of offset ``dim`` of ``ws.load`` statement ``load`` (1 when
    the offsets are not a literal tuple)."""
    try:
        offsets = func_ir.get_definition(load.value.args[1])
    except (KeyError, IndexError, AttributeError):
        return 1
    if not (isinstance(offsets, ir.Expr) and offsets.op == "build_tuple"):
        return 1
    return alignment(offsets.items[dim], func_ir, typemap)
