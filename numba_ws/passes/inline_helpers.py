"""Untyped pre-pass: calls of helper functions are inlined into the kernel before typing.

A *helper* is a plain Python function (or a ``@numba_ws.jit`` kernel's function) called
from a tile program: ``y = softmax_rows(x, BN)``. Tiles are not values Numba could pass
to a separately compiled function (they only become registers in the numba_ws stage), so
the helper's IR is spliced into the kernel at the call site, with numba-cuda's
``InlineWorker`` (the helper runs through Numba's untyped front end on its own globals,
its variables are renamed uniquely per call site, its arguments become copies of the
caller's variables and its ``return`` a copy into the call's target).

Runs right after ``IRProcessing``, on the untyped IR before SSA, ahead of the constexpr
folding (passes/constexpr_branches.py), which follows the argument copies: a constexpr
passed to a helper stays a compile-time value inside it. Invariants after the pass:

- no call in the kernel's IR resolves (as a global, a free variable or a module
  attribute) to a helper; helpers called by helpers are inlined too, recursion is a
  WSCompileError naming the helper;
- every statement that came from a helper has an :class:`InlinedLoc`: the helper's line
  plus the call site it was inlined at (a chain for nested helpers), which
  ``strformat()`` and numba_ws's error messages print;
- a call whose arguments do not bind to the helper's signature is a WSCompileError at the
  call site naming the helper.

What is not a helper: the ws ops and anything else Numba can type (registered globals,
``@numba.cuda.jit`` dispatchers: device functions are ``ws.map``'d by
passes/device_calls.py), built-ins, and functions of the packages in
:data:`NOT_HELPERS` (numba, numba_ws, numpy, ...).
"""
import copy
import inspect
import types as pytypes

from numba.cuda.core import ir, ir_utils, postproc
from numba.cuda.core.analysis import compute_cfg_from_blocks
from numba.cuda.core.compiler_machinery import FunctionPass, register_pass
from numba.cuda.core.inline_closurecall import InlineWorker, callee_ir_validator

from ..errors import WSCompileError
from ..runtime.sources import is_library

#: Helpers nested deeper than this are refused (a recursion the chain check missed).
MAX_DEPTH = 32


class InlinedLoc(ir.Loc):
    """The location of a statement inlined from helper ``helper`` (its name): the
    helper's file and line, and ``call_site``, the Loc of the call it was inlined at."""

    def __init__(self, filename, line, col=None, maybe_decorator=False, call_site=None,
                 helper=None):
        super().__init__(filename, line, col, maybe_decorator)
        self.call_site = call_site
        self.helper = helper

    @classmethod
    def of(cls, loc, call_site, helper):
        return cls(loc.filename, loc.line, loc.col, loc.maybe_decorator, call_site, helper)

    def with_lineno(self, line, col=None):
        return InlinedLoc(self.filename, line, col, False, self.call_site, self.helper)

    def chain(self):
        """[(helper name, call-site Loc)] from this helper outwards to the kernel."""
        out, loc = [], self
        while isinstance(loc, InlinedLoc):
            out.append((loc.helper, loc.call_site))
            loc = loc.call_site
        return out

    def strformat(self, nlines_up=2):
        text = super().strformat(nlines_up)
        for helper, site in self.chain():
            text += f"\n(in helper {helper}(), inlined at)\n" + ir.Loc.strformat(site, nlines_up)
        return text


def source_lines(loc):
    """``File "...", line N:`` and the line's text, then for a statement inlined from a
    helper each call site it was inlined at, out to the kernel's line (no colours)."""
    import linecache

    def one(loc):
        line = linecache.getline(loc.filename, loc.line).strip()
        return f'File "{loc.filename}", line {loc.line}:' + (f"\n    {line}" if line else "")

    text = one(loc)
    if isinstance(loc, InlinedLoc):
        for helper, site in loc.chain():
            text += f"\n(in helper {helper}(), called from)\n" + one(site)
    return text


def front_end_error(message, loc):
    """A WSCompileError of a numba_ws front-end pass: ``message`` then the lines of
    :func:`source_lines`; ``.loc`` is ``loc``."""
    err = WSCompileError(f"{message}\n{source_lines(loc)}" if loc is not None else message)
    err.loc = loc
    return err


def kernel_loc(loc):
    """The kernel's own Loc behind ``loc`` (the outermost call site of a helper)."""
    while isinstance(loc, InlinedLoc):
        loc = loc.call_site
    return loc


def _known_to_numba(typingctx, value):
    try:
        typingctx.resolve_value_type(value)
    except Exception:
        return False
    return True


def helper_function(typingctx, value):
    """The Python function to inline for a callee ``value``, or None."""
    from ..runtime.jit import Kernel
    if isinstance(value, Kernel):
        return value.fn
    if not isinstance(value, pytypes.FunctionType):
        return None
    if is_library(value):
        return None
    if _known_to_numba(typingctx, value):
        return None
    return value


def _callee(func_ir, var):
    try:
        d = func_ir.get_definition(var)
    except KeyError:
        return None
    if isinstance(d, (ir.Global, ir.FreeVar)):
        return d.value
    if isinstance(d, ir.Expr) and d.op == "getattr":
        return ir_utils.resolve_func_from_module(func_ir, d)
    return None


def _check_binding(fn, call, loc):
    """The call's arguments bind to ``fn``'s parameters (else a WSCompileError)."""
    name = fn.__name__
    if call.vararg is not None or getattr(call, "varkwarg", None) is not None:
        raise front_end_error(f"helper {name}(): calls with *args / **kwargs are not "
                              "supported (helpers are inlined)", loc)
    sig = inspect.signature(fn)
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise front_end_error(f"helper {name}{sig}: *args / **kwargs parameters are "
                                  "not supported (helpers are inlined)", loc)
    try:
        sig.bind(*call.args, **dict(call.kws))
    except TypeError as err:
        raise front_end_error(f"helper {name}{sig}: {err}", loc) from None


def _relocate(blocks, call_site, helper):
    """Give every statement (and expression) of the inlined ``blocks`` an InlinedLoc."""
    for block in blocks:
        block.loc = InlinedLoc.of(block.loc, call_site, helper)
        for stmt in block.body:
            stmt.loc = InlinedLoc.of(stmt.loc, call_site, helper)
            value = getattr(stmt, "value", None)
            if isinstance(value, ir.Expr):
                value.loc = InlinedLoc.of(value.loc, call_site, helper)


def _drop_helper_references(func_ir, typingctx):
    """Remove the now unused ``$f = global(helper)`` (or ``getattr(module, helper)``)
    assignments: typing would refuse a plain function as a value."""
    used = set()
    for block in func_ir.blocks.values():
        for stmt in block.body:
            if isinstance(stmt, ir.Assign):
                value = stmt.value
                vars_ = [value] if isinstance(value, ir.Var) else (
                    value.list_vars() if isinstance(value, ir.Expr) else [])
            else:
                vars_ = stmt.list_vars()
            used.update(v.name for v in vars_)
    for block in func_ir.blocks.values():
        block.body = [stmt for stmt in block.body if not (
            isinstance(stmt, ir.Assign) and stmt.target.name not in used
            and helper_function(typingctx, _callee(func_ir, stmt.target)) is not None)]


def inline_helpers(state):
    """Inline every helper call of ``state.func_ir``; returns the number inlined."""
    func_ir = state.func_ir
    flags = copy.copy(state.flags)   # InlineWorker sets enable_ssa on the flags it gets
    worker = InlineWorker(state.typingctx, state.targetctx, state.locals, state.pipeline,
                          flags, validator=callee_ir_validator)
    inlined = 0
    work = list(func_ir.blocks.items())
    while work:
        _, block = work.pop()
        for i, stmt in enumerate(block.body):
            if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr)
                    and stmt.value.op == "call"):
                continue
            fn = helper_function(state.typingctx, _callee(func_ir, stmt.value.func))
            if fn is None:
                continue
            loc = stmt.loc
            chain = [h for h, _ in loc.chain()] if isinstance(loc, InlinedLoc) else []
            if fn.__name__ in chain or len(chain) >= MAX_DEPTH:
                raise front_end_error(
                    f"helper {fn.__name__}() calls itself (through "
                    f"{' <- '.join([fn.__name__] + chain)}): helpers are inlined, so they "
                    "cannot be recursive", loc)
            _check_binding(fn, stmt.value, loc)
            _, _, _, new_blocks = worker.inline_function(func_ir, block, i, fn)
            # new_blocks[0] is the rest of the caller's block, the others the helper's
            _relocate([b for _, b in new_blocks[1:]], loc, fn.__name__)
            work.extend(new_blocks)
            inlined += 1
            break   # this block was split: its tail is on the work list
    if inlined:
        _drop_helper_references(func_ir, state.typingctx)
        cfg = compute_cfg_from_blocks(func_ir.blocks)
        for dead in cfg.dead_nodes():
            del func_ir.blocks[dead]
        postproc.PostProcessor(func_ir).run()
        func_ir.blocks = ir_utils.simplify_CFG(func_ir.blocks)
        func_ir._definitions = ir_utils.build_definitions(func_ir.blocks)
        if unpack_returned_tuples(func_ir):
            func_ir._definitions = ir_utils.build_definitions(func_ir.blocks)
    return inlined


def unpack_returned_tuples(func_ir):
    """``pid_m, acc = helper(...)`` of a helper ending in ``return pid_m, acc``: each
    ``static_getitem`` of the unpacked tuple becomes a copy of the tuple's item, so tiles
    flow through plain copies (data partitioning and layouts follow copies, not tuples).
    Only where the tuple variable (through copies) has one definition, a ``build_tuple``;
    the helper's variables are unique per call site, so the item still holds the value
    when the unpack runs. Returns the number of items rewritten."""
    defs = func_ir._definitions

    def single(var):
        seen = set()
        while var.name not in seen:
            seen.add(var.name)
            d = defs.get(var.name, [])
            if len(d) != 1:
                return None
            if not isinstance(d[0], ir.Var):
                return d[0]
            var = d[0]
        return None

    rewritten = 0
    for block in func_ir.blocks.values():
        for stmt in block.body:
            v = getattr(stmt, "value", None)
            if not (isinstance(stmt, ir.Assign) and isinstance(v, ir.Expr)
                    and v.op == "static_getitem" and isinstance(v.index, int)):
                continue
            it = single(v.value)
            if not (isinstance(it, ir.Expr) and it.op == "exhaust_iter"):
                continue
            tup = single(it.value)
            if isinstance(tup, ir.Expr) and tup.op == "build_tuple" \
                    and len(tup.items) == it.count and 0 <= v.index < it.count:
                stmt.value = tup.items[v.index]
                rewritten += 1
    return rewritten


@register_pass(mutates_CFG=True, analysis_only=False)
class InlineHelpers(FunctionPass):
    _name = "ws_inline_helpers"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        return inline_helpers(state) > 0
