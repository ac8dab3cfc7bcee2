"""Building Numba IR statements: the few constructors the partitioning passes need,
typing the statements they build, and re-typing a rewritten function (:func:`retype`)."""
import copy

from numba.cuda import types
from numba.cuda.core import ir, ir_utils
from numba.cuda.core.typed_passes import type_inference_stage


class StmtBuilder:
    """Appends new statements to a list; fresh names are unique per builder prefix."""

    _counter = [0]

    def __init__(self, scope, loc, prefix):
        self.scope, self.loc, self.prefix = scope, loc, prefix
        self.body = []

    def fresh(self, hint):
        self._counter[0] += 1
        return ir.Var(self.scope, f"$ws_{hint}.{self.prefix}.{self._counter[0]}", self.loc)

    def assign(self, value, hint="v", target=None):
        var = target if target is not None else self.fresh(hint)
        self.body.append(ir.Assign(value, var, self.loc))
        return var

    def const(self, value):
        return self.assign(ir.Const(value, self.loc), "const")

    def glob(self, obj, name=None):
        return self.assign(ir.Global(name or getattr(obj, "__name__", "g"), obj, self.loc), "fn")

    def call(self, fn, args, target=None):
        fvar = self.glob(fn)
        return self.assign(ir.Expr.call(fvar, list(args), (), self.loc), "call", target)

    def binop(self, fn, lhs, rhs, target=None):
        return self.assign(ir.Expr.binop(fn, lhs, rhs, self.loc), "binop", target)

    def tuple(self, items):
        return self.assign(ir.Expr.build_tuple(list(items), self.loc), "tuple")


def clone_stmt(stmt, shared_memo):
    """Deep copy of an IR statement; scope and global/const values are shared, not copied."""
    return copy.deepcopy(stmt, dict(shared_memo))


def shared_memo(func_ir):
    """ids of the objects clones must share with the original (scope, global values)."""
    memo = {}
    for block in func_ir.blocks.values():
        memo[id(block.scope)] = block.scope
        for stmt in block.body:
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, (ir.Global, ir.FreeVar, ir.Const)):
                memo[id(stmt.value.value)] = stmt.value.value
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr):
                for key in ("fn", "immutable_fn"):
                    fn = stmt.value._kws.get(key)
                    if fn is not None:
                        memo[id(fn)] = fn
    return memo


def type_statements(state, stmts):
    """Type statements a :class:`StmtBuilder` made (constants, globals, calls) into
    ``state.typemap`` / ``state.calltypes`` the way Numba's type inference does (literal
    types for constants), without re-running it over the whole function; records their
    definitions in ``state.func_ir``. For passes that add a few statements; a pass that
    rewrites much of the IR calls ``retype``."""
    ctx, typemap = state.typingctx, state.typemap
    for stmt in stmts:
        value, name = stmt.value, stmt.target.name
        state.func_ir._definitions[name] = [value]
        if isinstance(value, ir.Const):
            ty = types.maybe_literal(value.value) or ctx.resolve_value_type(value.value)
        elif isinstance(value, ir.Global):
            ty = ctx.resolve_value_type(value.value)
        elif isinstance(value, ir.Expr) and value.op == "call" and not value.kws:
            ty = retype_call(state, value)
        else:
            raise TypeError(f"type_statements types constants, globals and positional "
                            f"calls only (a pass that adds other statements must retype): "
                            f"{stmt}")
        set_type(typemap, name, ty)


def set_type(mapping, key, value):
    """Set or replace an entry of Numba's typemap / calltypes (they refuse overwrites)."""
    mapping.pop(key, None)
    mapping[key] = value


def retype_call(state, call):
    """Resolve ``call`` (positional arguments) against the current typemap, record its
    signature in ``state.calltypes`` and return its result type."""
    fnty = state.typemap[call.func.name]
    argtys = tuple(state.typemap[a.name] for a in call.args)
    sig = state.typingctx.resolve_function_type(fnty, argtys, {})
    if sig is None:
        raise TypeError(f"no signature of {fnty} for {argtys}")
    set_type(state.calltypes, call, sig)
    return sig.return_type


def retype(state, new_ir):
    """Run Numba's type inference again on rewritten IR; update the compiler state."""
    new_ir._definitions = ir_utils.build_definitions(new_ir.blocks)
    try:
        typemap, return_type, calltypes, _ = type_inference_stage(
            state.typingctx, state.targetctx, new_ir, state.args, state.return_type,
            state.locals, raise_errors=True)
    except Exception as e:
        loc = getattr(e, "loc", None)
        if loc is None or not hasattr(loc, "line"):
            raise
        first = str(e).strip().splitlines()[0].replace("\x1b[1m", "").replace("\x1b[0m", "")
        from ..errors import WSCompileError
        raise WSCompileError(
            f"after partitioning, this line has no form numba_ws can generate: {first}",
            loc=loc, pass_name="ws_retype") from None
    state.func_ir = new_ir
    state.typemap = typemap
    state.calltypes = calltypes
    state.return_type = return_type
