"""How each language op reaches the GPU: ``LOWERING`` has the keys of ``OP_NAMES``.

A rule ``rule(lowerer, stmt, builder)`` appends the replacement statements for ``stmt``
(an ``x = op(...)`` call of the partitioned IR) to ``builder`` and returns them, or
returns None when the statement stays as it is (scalar ops and tile operators, which
numba lowers through ``lower_builtin`` registrations in :mod:`.tile_ops`). Ops without a
GPU form raise a compile error naming the op and the line: they run in the interpreter.
"""
from numba.cuda import types

from . import tile_ops as to


def _keep(lowerer, stmt, b):
    return None


def _args(stmt):
    return stmt.value.args


def _zeros(lowerer, stmt, b):
    shape, dtype = _args(stmt)
    return b.call(to.gpu_frag_full, [b.const(0.0), shape, dtype], target=stmt.target)


def _full(lowerer, stmt, b):
    shape, value, dtype = _args(stmt)
    return b.call(to.gpu_frag_full, [value, shape, dtype], target=stmt.target)


def _dot(lowerer, stmt, b):
    a, bb = _args(stmt)[:2]
    acc = _args(stmt)[2] if len(_args(stmt)) > 2 else b.const(None)
    return b.call(to.gpu_dot, [a, bb, acc], target=stmt.target)


def _astype(lowerer, stmt, b):
    fty = lowerer.state.typemap[stmt.value.func.name]
    if isinstance(fty, types.BoundFunction):
        method = lowerer.fir.get_definition(stmt.value.func)
        tile, dtype = method.value, _args(stmt)[0]
    else:
        tile, dtype = _args(stmt)
    return b.call(to.gpu_frag_astype, [tile, dtype], target=stmt.target)


def _store(lowerer, stmt, b):
    array, offsets, tile = _args(stmt)
    return b.call(to.gpu_frag_store, [array, offsets, tile], target=stmt.target)


def _trans(lowerer, stmt, b):
    return b.call(to.gpu_smem_trans, [_args(stmt)[0]], target=stmt.target)


def _not_yet(name):
    def rule(lowerer, stmt, b):
        raise lowerer.p.error(
            f"ws.{name} has no GPU lowering yet (it runs in the interpreter: "
            "NUMBA_WS_INTERPRET=1)", stmt.loc)
    return rule


def _load(lowerer, stmt, b):
    raise lowerer.p.error("a ws.load was left unpartitioned (its result feeds no consumer?)",
                          stmt.loc)


LOWERING = {
    "program_id": _keep,
    "num_programs": _keep,
    "cdiv": _keep,
    "zeros": _zeros,
    "full": _full,
    "load": _load,
    "store": _store,
    "dot": _dot,
    "astype": _astype,
    "exp": _not_yet("exp"),
    "exp2": _not_yet("exp2"),
    "log": _not_yet("log"),
    "maximum": _not_yet("maximum"),
    "where": _not_yet("where"),
    "max": _not_yet("max"),
    "sum": _not_yet("sum"),
    "trans": _trans,
    "add": _keep,
    "sub": _keep,
    "mul": _keep,
    "truediv": _keep,
    "neg": _not_yet("neg (unary minus)"),
}

