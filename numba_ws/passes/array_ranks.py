"""Untyped pre-pass: a ``ws.load`` / ``ws.store`` of a kernel argument whose rank does not
match the offsets is an error naming the argument, before typing.

``ws.load(a, (i, j), (BM, BK))`` says "a is 2-D"; passing a 1-D or 3-D array as ``a``
would otherwise surface as a typing error about the offsets tuple that does not say
which argument is wrong. This pass runs just before type inference (after helpers are
inlined, so a load inside a helper is checked against the kernel's argument), with the
argument types of the specialization. Invariant after the pass: every load / store whose
array is (a copy of) a kernel argument and whose offsets are a tuple literal has one
offset per dimension of a 1-D or 2-D array, or is a load whose literal shape has the
array's rank (then the offsets are wrong, and typing says so); otherwise a
WSCompileError at the op's line says which argument, its rank, and the rank the op
expects. The interpreter raises the
same sentence (:func:`rank_message`, numba_ws.interpreter.run).
"""
from numba.cuda import types
from numba.cuda.core import ir, ir_utils
from numba.cuda.core.compiler_machinery import FunctionPass, register_pass

from .inline_helpers import front_end_error
from ..language import core

_OPS = {core.load: "load", core.store: "store", core.atomic_add: "atomic_add"}


def rank_message(op, arg, ndim, n_offsets, n_shape=None):
    """The error for ``ws.<op>`` of argument ``arg`` (an ``ndim``-D array) with
    ``n_offsets`` offsets (and, for a load, an ``n_shape``-D tile shape), or None when
    they match (1-D or 2-D) or when the array is not to blame: a load whose shape has
    the array's rank but whose offsets do not is the offsets' fault (typing says so)."""
    if ndim in (1, 2) and n_offsets == ndim:
        return None
    if ndim in (1, 2) and n_shape == ndim:
        return None
    if n_offsets in (1, 2):
        expected = f"a {n_offsets}-D array"
        fix = (f"pass {expected} as {arg!r}, or write the offsets and the tile shape for "
               f"a {ndim}-D array" if ndim in (1, 2) else f"pass {expected} as {arg!r}")
    else:
        expected, fix = "a 1-D or 2-D array", f"tiles are 1-D or 2-D: pass such an array as {arg!r}"
    return (f"ws.{op}(): argument {arg!r} is a {ndim}-D array, but this {op} has "
            f"{n_offsets} offset{'' if n_offsets == 1 else 's'} and expects {expected} "
            f"({fix})")


def _definition(func_ir, var):
    try:
        d = func_ir.get_definition(var)
    except KeyError:
        return None
    while isinstance(d, ir.Var):
        try:
            d = func_ir.get_definition(d)
        except KeyError:
            return None
    return d


def _op(func_ir, var):
    d = _definition(func_ir, var)
    if isinstance(d, (ir.Global, ir.FreeVar)):
        return _OPS.get(d.value) if _hashable(d.value) else None
    if isinstance(d, ir.Expr) and d.op == "getattr":
        fn = ir_utils.resolve_func_from_module(func_ir, d)
        return _OPS.get(fn) if _hashable(fn) else None
    return None


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return False
    return True


def check_array_ranks(func_ir, argtypes):
    """Raise a WSCompileError for the first load / store of a mismatched argument."""
    for block in func_ir.blocks.values():
        for stmt in block.body:
            if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr)
                    and stmt.value.op == "call" and len(stmt.value.args) >= 2):
                continue
            op = _op(func_ir, stmt.value.func)
            if op is None:
                continue
            array = _definition(func_ir, stmt.value.args[0])
            offsets = _definition(func_ir, stmt.value.args[1])
            if not (isinstance(array, ir.Arg) and array.index < len(argtypes)
                    and isinstance(argtypes[array.index], types.Array)
                    and isinstance(offsets, ir.Expr) and offsets.op == "build_tuple"):
                continue
            shape = _definition(func_ir, stmt.value.args[2]) \
                if op == "load" and len(stmt.value.args) > 2 else None
            n_shape = len(shape.items) if isinstance(shape, ir.Expr) \
                and shape.op == "build_tuple" else None
            msg = rank_message(op, array.name, argtypes[array.index].ndim,
                               len(offsets.items), n_shape)
            if msg is not None:
                raise front_end_error(msg, stmt.loc)


@register_pass(mutates_CFG=False, analysis_only=True)
class CheckArrayRanks(FunctionPass):
    _name = "ws_check_array_ranks"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        check_array_ranks(state.func_ir, tuple(state.args))
        return False
