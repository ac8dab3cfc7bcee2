"""Untyped pre-pass: branches decided by constexprs are resolved before typing.

``if ACT == "leaky_relu":`` with ``ACT: ws.constexpr`` bound to ``"none"`` must not type
or lower its body: the untaken side may be ill-typed for this specialization, and typing
a string comparison makes Numba compile a device function for the current GPU.
Numba's own ``dead_branch_prune`` does not help: for a comparison with an argument it
prunes only ``x is None``-like tests (it compares the argument's *type*, not its literal
value), and ``if FLAG:`` on an argument is never pruned.

This pass runs on the untyped IR before SSA (no phis, so removing blocks needs no phi
repair). A *constexpr* is an argument whose Numba type carries its value: a literal
(``IntegerLiteral``, ``BooleanLiteral``, ``StringLiteral``, a ws dtype) or ``Omitted``;
plain copies are followed (a helper's parameters after inlining), and the loop variable
of an unrolled ``ws.static_range`` copy counts as one.
Invariants after the pass:

- every comparison (``== != < <= > >= is is not in not in``), ``not`` and ``bool()``
  whose operands are known from constexprs, constants, globals and tuples of them is an
  ``ir.Const`` of its value (also with no constexpr: ``if FLAG:`` in a helper called
  with a literal ``False``);
- every ``branch`` on such a value is a ``jump`` to the taken side;
- blocks no longer reachable from the entry are gone, and ``func_ir._definitions`` is
  rebuilt. Arithmetic on constexprs (``BK * 2``) is evaluated to decide a test but never
  rewritten, so the typing of everything else is unchanged.
"""
import operator
import types as pytypes

from numba.cuda import types
from numba.cuda.core import ir, ir_utils
from numba.cuda.core.compiler_machinery import FunctionPass, register_pass

from ..language.types import DTypeType

#: In a variable's name: the loop variable of one copy of an unrolled ws.static_range
#: body (passes/static_range.py); its constant counts as a constexpr here.
STATIC_INDEX_TAG = "$ws_static"

#: Operators whose result is folded to a constant.
_TESTS = {operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
          operator.is_, operator.is_not, operator.contains, operator.not_, operator.truth}
#: Operators evaluated on known operands (results used only to decide a test).
_ARITHMETIC = {operator.add, operator.sub, operator.mul, operator.floordiv,
               operator.truediv, operator.mod, operator.pow, operator.lshift,
               operator.rshift, operator.and_, operator.or_, operator.xor,
               operator.neg, operator.pos, operator.invert}
_UNARY = {"not": operator.not_, "-": operator.neg, "+": operator.pos, "~": operator.invert}


class _Unknown(Exception):
    """The value is not known at compile time."""


_UNKNOWN = object()     # memo of a variable whose value is not known


def constexpr_value(argty):
    """The compile-time value an argument type carries; raises _Unknown otherwise."""
    if isinstance(argty, DTypeType):
        from ..language.dtypes import from_name
        return from_name(argty.literal_value)
    if isinstance(argty, types.Omitted):
        return argty.value
    if isinstance(argty, types.Literal):
        return argty.literal_value
    raise _Unknown


class _Evaluator:
    """Values of IR variables known at compile time, memoised per variable name."""

    def __init__(self, func_ir, argtypes):
        self.func_ir = func_ir
        self.argtypes = argtypes
        self.known = {}

    def value(self, var):
        """The compile-time value of ``var``; raises _Unknown."""
        if var.name not in self.known:
            try:
                d = self.func_ir.get_definition(var)
                if STATIC_INDEX_TAG in var.name and isinstance(d, ir.Const):
                    self.known[var.name] = d.value
                else:
                    self.known[var.name] = self._evaluate(d)
            except (_Unknown, KeyError):   # KeyError: zero or several definitions
                self.known[var.name] = _UNKNOWN
        if self.known[var.name] is _UNKNOWN:
            raise _Unknown
        return self.known[var.name]

    def _evaluate(self, d):
        if isinstance(d, ir.Arg):
            if d.index >= len(self.argtypes):
                raise _Unknown
            return constexpr_value(self.argtypes[d.index])
        if isinstance(d, (ir.Const, ir.Global, ir.FreeVar)):
            return d.value
        if isinstance(d, ir.Var):   # a copy: a helper's parameter (passes/inline_helpers.py)
            return self.value(d)
        if not isinstance(d, ir.Expr):
            raise _Unknown
        if d.op == "binop" and (d.fn in _TESTS or d.fn in _ARITHMETIC):
            return _apply(d.fn, self.value(d.lhs), self.value(d.rhs))
        if d.op == "unary":
            fn = _UNARY.get(d.fn, d.fn)
            if fn not in _TESTS and fn not in _ARITHMETIC:
                raise _Unknown
            return _apply(fn, self.value(d.value))
        if d.op == "call" and not d.kws and d.vararg is None and len(d.args) == 1:
            if self.value(d.func) is bool:
                return _apply(bool, self.value(d.args[0]))
        if d.op == "build_tuple":
            return tuple(self.value(v) for v in d.items)
        if d.op == "getattr":
            owner = self.value(d.value)
            if isinstance(owner, pytypes.ModuleType) and hasattr(owner, d.attr):
                return getattr(owner, d.attr)
        raise _Unknown


def _apply(fn, *operands):
    try:
        return fn(*operands)
    except Exception:   # e.g. "a" < 1: left for typing to report
        raise _Unknown from None


def _is_test(expr):
    if not isinstance(expr, ir.Expr):
        return False
    if expr.op == "binop":
        return expr.fn in _TESTS
    if expr.op == "unary":
        return _UNARY.get(expr.fn, expr.fn) in _TESTS
    return expr.op == "call"   # bool(x): _Evaluator accepts no other call


def fold_constexpr_tests(func_ir, argtypes):
    """Rewrite known tests to constants and known branches to jumps, remove the blocks
    left unreachable; returns (tests folded, branches resolved)."""
    ev = _Evaluator(func_ir, argtypes)
    folded = {}
    for block in func_ir.blocks.values():
        for stmt in block.body:
            if isinstance(stmt, ir.Assign) and _is_test(stmt.value):
                try:
                    value = ev.value(stmt.target)
                except _Unknown:
                    continue
                # a test of constants and globals only (a literal flag passed to a helper:
                # ``_keep(..., False)``) is decided too: left as a runtime branch it split
                # a loop body, and the partitioner waits for every dot at the join
                folded[stmt.target.name] = value
                stmt.value = ir.Const(value, stmt.value.loc)
    resolved = 0
    for block in func_ir.blocks.values():
        term = block.terminator
        if isinstance(term, ir.Branch) and term.cond.name in folded:
            taken = term.truebr if folded[term.cond.name] else term.falsebr
            block.body[-1] = ir.Jump(taken, term.loc)
            resolved += 1
    if folded:
        _drop_unreachable(func_ir)
        if resolved:
            # a resolved branch leaves a chain of blocks joined by jumps: one block again,
            # so a pruned ``if CAUSAL:`` in a loop body costs what no ``if`` would (the
            # partitioner waits for every dot at a block with several predecessors)
            ir_utils.merge_adjacent_blocks(func_ir.blocks)
        func_ir._definitions = ir_utils.build_definitions(func_ir.blocks)
    return len(folded), resolved


def _drop_unreachable(func_ir):
    entry = min(func_ir.blocks)
    seen, todo = set(), [entry]
    while todo:
        label = todo.pop()
        if label not in seen:
            seen.add(label)
            todo.extend(func_ir.blocks[label].terminator.get_targets())
    for label in [lb for lb in func_ir.blocks if lb not in seen]:
        del func_ir.blocks[label]


@register_pass(mutates_CFG=True, analysis_only=False)
class PruneConstexprBranches(FunctionPass):
    _name = "ws_prune_constexpr_branches"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        folded, _ = fold_constexpr_tests(state.func_ir, tuple(state.args))
        return folded > 0
