"""Small queries on Numba IR shared by the passes (which op a call is, uses, regions)."""
from numba.cuda import types
from numba.cuda.core import ir

from ..language import core
from ..language.typing import STUBS, OPERATORS

_STUB_TO_OP = {stub: name for name, stub in STUBS.items()}
_OPERATOR_TO_OP = {op: name for name, op in OPERATORS.items()}
ANCHOR_TASK = {"load": "producer", "dot": "consumer", "store": "consumer",
               "atomic_add": "consumer"}
#: Ops that write a tile to an array: (array, offsets, tile[, mask]).
STORE_OPS = frozenset({"store", "atomic_add"})


def callee_object(expr, typemap):
    """The Python object a call expression calls (via the typemap), or None."""
    fty = typemap.get(expr.func.name)
    if isinstance(fty, types.Function):
        return getattr(fty.typing_key, "__self__", None) or fty.typing_key
    if isinstance(fty, types.BoundFunction):
        return fty
    return None


def tile_op(stmt, typemap):
    """The language op name a statement performs, or None.

    Recognises ``x = ws.op(...)`` calls, ``tile.astype(...)`` and operators on tiles.
    """
    if not isinstance(stmt, ir.Assign):
        return None
    value = stmt.value
    if isinstance(value, ir.Expr):
        if value.op == "call":
            fty = typemap.get(value.func.name)
            if isinstance(fty, types.Function):
                key = fty.typing_key
                if key in _STUB_TO_OP:
                    return _STUB_TO_OP[key]
            if isinstance(fty, types.BoundFunction) and fty.typing_key == "tile.astype":
                return "astype"
            return None
        if value.op in ("binop", "inplace_binop", "unary"):
            fn = value.fn
            op = _OPERATOR_TO_OP.get(fn)
            if op is None and value.op == "inplace_binop":
                op = _OPERATOR_TO_OP.get(value.immutable_fn)
            from ..language.types import TileType
            if op and isinstance(typemap.get(stmt.target.name), TileType):
                return op
    return None


def stmt_uses(stmt):
    """Names of the variables a statement reads."""
    return {v.name for v in stmt.list_vars()} - ({stmt.target.name} if isinstance(stmt, ir.Assign) else set())


def stmt_defs(stmt):
    return {stmt.target.name} if isinstance(stmt, ir.Assign) else set()


def controlled_blocks(cfg, label):
    """Blocks whose execution depends on the branch ending ``label``.

    Those reachable from its successors before reaching its immediate post-dominator.
    """
    pdoms = cfg.post_dominators()
    ipdom = None
    cands = pdoms[label] - {label}
    # the immediate post-dominator: every other post-dominator post-dominates it
    for c in cands:
        if all(o == c or o in pdoms[c] for o in cands):
            ipdom = c
            break
    seen, stack = set(), [s for s, _ in cfg.successors(label)]
    while stack:
        b = stack.pop()
        if b in seen or b == ipdom:
            continue
        seen.add(b)
        stack.extend(s for s, _ in cfg.successors(b))
    return seen


def is_ws_module_access(stmt):
    """``$x = global(ws)`` or ``$y = getattr($x, 'load')``-like plumbing statements."""
    if isinstance(stmt, ir.Assign):
        v = stmt.value
        if isinstance(v, (ir.Global, ir.FreeVar)) and v.value is __import__("numba_ws"):
            return True
    return False


def line_of(stmt):
    return stmt.loc.line if stmt.loc is not None else None


_ = core  # the stubs live there
