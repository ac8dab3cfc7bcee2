"""Untyped pre-pass: ``for i in ws.static_range(...)`` loops are unrolled before typing.

``ws.static_range(start, stop, step)`` takes compile-time ints (constexprs, literals and
arithmetic on them, as :mod:`numba_ws.passes.constexpr_branches` evaluates them); the
loop body is repeated once per value with the loop variable a constant in each copy, so
``if i == 0:`` is folded per copy, a tile carried from one iteration to the next is a
chain of values, and the partitioning passes see straight-line code (Triton's
``tl.static_range``). A plain ``range`` loop stays a loop.

The pass works on the untyped IR before SSA, after the constexpr folding. Numba's
front end shapes a ``for`` loop as: a preheader ``$it = getiter($r)`` (``$r`` the
``static_range`` call) jumping to a header ``$n = iternext($it)``, ``$v = pair_first``,
``$ok = pair_second``, ``$p = $v``, ``branch $ok, body, exit``; the body's entry starts
``i = $p`` and the body jumps back to the header (``continue`` too); ``break`` jumps out.
For values v0..vn-1 the pass makes, per value, a copy of the header (its other
statements, e.g. copies of an outer loop's iterator) jumping to a copy of the body whose
entry sets ``i`` to the value, and whose back edges go to the next copy; the last copy's
back edges go to an exit header that jumps to the loop's exit. Innermost loops go first.

Invariants after the pass: no ``static_range`` call, ``getiter`` of one or global
``static_range`` remains; in copy k the loop variable is read as its own variable
``<i>$ws_static<k>`` (a constant the constexpr folding treats as a constexpr) when the
body never assigns ``i`` itself, and every variable local to one iteration (Numba's
temporaries, an inner unrolled loop's constants) has its own name ``<v>$u<k>`` per copy,
so the folding decides each copy's tests separately; bounds that are not compile-time ints, a zero step, or a
loop shape the pass does not know are a WSCompileError at the loop's line.
"""
import copy

from numba.cuda.core import ir, ir_utils
from numba.cuda.core.analysis import compute_cfg_from_blocks, compute_live_map, compute_use_defs
from numba.cuda.core.compiler_machinery import FunctionPass, register_pass

from .inline_helpers import front_end_error
from ..language import core
from .constexpr_branches import STATIC_INDEX_TAG, _Evaluator, _Unknown, fold_constexpr_tests

#: More copies than this is refused (a typo such as static_range(BM) with BM = 4096).
MAX_COPIES = 1024


def _single_def(func_ir, var):
    try:
        return func_ir.get_definition(var)
    except KeyError:
        return None


def _through_copies(func_ir, var):
    """The first definition of ``var`` that is not a plain copy of another variable."""
    d = _single_def(func_ir, var)
    while isinstance(d, ir.Var):
        d = _single_def(func_ir, d)
    return d


def _is_static_range(func_ir, var):
    d = _single_def(func_ir, var)
    if isinstance(d, (ir.Global, ir.FreeVar)):
        return d.value is core.static_range
    if isinstance(d, ir.Expr) and d.op == "getattr":
        return ir_utils.resolve_func_from_module(func_ir, d) is core.static_range
    return False


class _Loop:
    """One static loop: its header, body, preheader edges and the values it takes."""

    def __init__(self, func_ir, loop, iternext, call):
        self.header = loop.header
        self.body = set(loop.body) - {loop.header}
        self.entries = set(loop.entries)
        self.call = call
        self.loc = call.loc
        hblock = func_ir.blocks[loop.header]
        self.iternext = iternext
        self.first = self.second = None
        for stmt in hblock.body:
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr) \
                    and stmt.value.op in ("pair_first", "pair_second") \
                    and stmt.value.value.name == iternext.name:
                if stmt.value.op == "pair_first":
                    self.first = stmt.target.name
                else:
                    self.second = stmt.target.name
        term = hblock.terminator
        if not (isinstance(term, ir.Branch) and self.first and term.cond.name == self.second
                and term.truebr in self.body and term.falsebr not in self.body):
            raise front_end_error("ws.static_range: cannot unroll this loop (unexpected "
                                  "loop shape in Numba's IR)", self.loc)
        self.entry, self.exit = term.truebr, term.falsebr
        # the header's copies of the induction value ($p = $v)
        self.copies = {stmt.target.name for stmt in hblock.body
                       if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Var)
                       and stmt.value.name == self.first}


def _values(func_ir, argtypes, call, loc):
    ev = _Evaluator(func_ir, argtypes)
    if call.kws or call.vararg is not None:
        raise front_end_error("ws.static_range(start, stop, step) takes positional bounds "
                              "only", loc)
    if not 1 <= len(call.args) <= 3:
        raise front_end_error(f"ws.static_range takes 1 to 3 bounds, got {len(call.args)}",
                              loc)
    bounds = []
    for i, var in enumerate(call.args):
        try:
            value = ev.value(var)
        except _Unknown:
            value = None
        if not isinstance(value, int) or isinstance(value, bool):
            raise front_end_error(
                f"ws.static_range: bound {i} is not a compile-time int (got "
                f"{'a runtime value' if value is None else repr(value)}): the bounds of an "
                "unrolled loop must be constexprs, literals or arithmetic on them; use "
                "range() for a loop with runtime bounds", loc)
        bounds.append(value)
    if len(bounds) == 3 and bounds[2] == 0:
        raise front_end_error("ws.static_range: step must not be zero", loc)
    values = list(range(*bounds))
    if len(values) > MAX_COPIES:
        raise front_end_error(f"ws.static_range{tuple(bounds)}: {len(values)} iterations; "
                              f"at most {MAX_COPIES} are unrolled", loc)
    return values


def _find_static_loops(func_ir):
    """[(loop, iternext var, static_range call expr)] of the function, innermost first."""
    cfg = compute_cfg_from_blocks(func_ir.blocks)
    found = []
    for loop in cfg.loops().values():
        for stmt in func_ir.blocks[loop.header].body:
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr) \
                    and stmt.value.op == "iternext":
                it = _through_copies(func_ir, stmt.value.value)
                if isinstance(it, ir.Expr) and it.op == "getiter":
                    call = _through_copies(func_ir, it.value)
                    if isinstance(call, ir.Expr) and call.op == "call" \
                            and _is_static_range(func_ir, call.func):
                        found.append((loop, stmt.target, call))
    found.sort(key=lambda f: len(f[0].body))
    return found


def _assigned(blocks, name):
    return sum(1 for b in blocks for stmt in b.body
               if isinstance(stmt, ir.Assign) and stmt.target.name == name)


def _retarget(stmt, mapping):
    """Jump / branch targets of a terminator remapped through ``mapping``."""
    if isinstance(stmt, ir.Jump):
        return ir.Jump(mapping.get(stmt.target, stmt.target), stmt.loc)
    if isinstance(stmt, ir.Branch):
        return ir.Branch(stmt.cond, mapping.get(stmt.truebr, stmt.truebr),
                         mapping.get(stmt.falsebr, stmt.falsebr), stmt.loc)
    return stmt


def _copy_local(blocks, loop, info):
    """Variables that can have one name per copy of the body: defined in the body, not
    occurring outside it (the header's remaining statements count as outside), and not
    live at the body's entry (so not carried from one iteration to the next). Numba's
    temporaries (the tests ``$c = i == 0``, ``$p = bool($c)``) are such, so each copy's
    tests are separate variables the constexpr folding can decide."""
    inside = set(loop.body) - {loop.header}
    usedefs = compute_use_defs(blocks)
    live = compute_live_map(compute_cfg_from_blocks(blocks), blocks, usedefs.usemap,
                            usedefs.defmap)
    outside = set()
    for lb, block in blocks.items():
        if lb not in inside:
            outside |= usedefs.usemap[lb] | usedefs.defmap[lb]
    defined = set().union(*(usedefs.defmap[lb] for lb in inside))
    return defined - outside - live[info.entry] - live[info.header]


def _unroll(func_ir, argtypes, loop, iternext, call):
    info = _Loop(func_ir, loop, iternext, call)
    values = _values(func_ir, argtypes, call, info.loc)
    blocks = func_ir.blocks
    scope = blocks[info.header].scope
    header_rest = [stmt for stmt in blocks[info.header].body[:-1]
                   if not (isinstance(stmt, ir.Assign) and (
                       stmt.target.name in {iternext.name, info.first, info.second}
                       | info.copies))]
    for stmt in header_rest:
        if any(v.name in {iternext.name, info.first, info.second} | info.copies
               for v in stmt.list_vars()):
            raise front_end_error("ws.static_range: cannot unroll this loop (the loop "
                                  "header uses the induction value)", info.loc)
    entry_block = blocks[info.entry]
    first = entry_block.body[0] if entry_block.body else None
    if not (isinstance(first, ir.Assign) and isinstance(first.value, ir.Var)
            and first.value.name in info.copies):
        raise front_end_error("ws.static_range: cannot unroll this loop (the loop variable "
                              "must be a plain name: for i in ws.static_range(n))", info.loc)
    induction = first.target
    body_blocks = [blocks[lb] for lb in info.body]
    rename = _assigned(body_blocks, induction.name) == 1
    local = _copy_local(blocks, loop, info) - {induction.name}

    def header_copy(target):
        block = ir.Block(scope, blocks[info.header].loc)
        block.body = copy.deepcopy(header_rest)
        block.body.append(ir.Jump(target, info.loc))
        return block

    exit_label = ir_utils.next_label()
    blocks[exit_label] = header_copy(info.exit)
    next_header = exit_label
    for k in reversed(range(len(values))):   # built last to first: each knows its successor
        labels = {lb: ir_utils.next_label() for lb in sorted(info.body)}
        labels[info.header] = next_header
        const_var = scope.redefine(f"{induction.name}{STATIC_INDEX_TAG}{k}", first.loc)
        renames = {name: scope.redefine(f"{name}$u{k}", first.loc) for name in local}
        if rename:
            renames[induction.name] = const_var
        for lb in info.body:
            block = copy.deepcopy(blocks[lb])
            block.scope = scope
            block.body[-1] = _retarget(block.body[-1], labels)
            if lb == info.entry:
                block.body[0] = ir.Assign(ir.Const(values[k], first.loc), const_var, first.loc)
                block.body.insert(1, ir.Assign(const_var, induction, first.loc))
                start = 2
            else:
                start = 0
            for stmt in block.body[start:]:
                ir_utils.replace_vars_stmt(stmt, renames)
            blocks[labels[lb]] = block
        header_label = ir_utils.next_label()
        blocks[header_label] = header_copy(labels[info.entry])
        next_header = header_label
    for lb in info.entries:   # the preheader(s) now enter the first copy (or the exit)
        blocks[lb].body[-1] = _retarget(blocks[lb].body[-1], {info.header: next_header})
    for lb in list(info.body) + [info.header]:
        del blocks[lb]


def _drop_static_range_setup(func_ir):
    """Remove the now unused static_range globals, calls, getiters and their copies."""
    while True:
        func_ir._definitions = ir_utils.build_definitions(func_ir.blocks)
        used = set()
        for block in func_ir.blocks.values():
            for stmt in block.body:
                if isinstance(stmt, ir.Assign):
                    value = stmt.value
                    used.update(v.name for v in ([value] if isinstance(value, ir.Var) else
                                                 value.list_vars() if isinstance(value, ir.Expr)
                                                 else []))
                else:
                    used.update(v.name for v in stmt.list_vars())
        removed = False
        for block in func_ir.blocks.values():
            keep = []
            for stmt in block.body:
                if isinstance(stmt, ir.Assign) and stmt.target.name not in used \
                        and _setup_value(func_ir, stmt.value):
                    removed = True
                    continue
                keep.append(stmt)
            block.body = keep
        if not removed:
            return


def _setup_value(func_ir, value):
    """Is ``value`` part of a static_range loop's setup (safe to drop when unused)?"""
    if isinstance(value, (ir.Global, ir.FreeVar)):
        return value.value is core.static_range
    if isinstance(value, ir.Var):
        d = _through_copies(func_ir, value)
        return d is not None and not isinstance(d, ir.Var) and _setup_value(func_ir, d)
    if isinstance(value, ir.Expr):
        if value.op == "getiter":
            call = _through_copies(func_ir, value.value)
            return isinstance(call, ir.Expr) and call.op == "call" \
                and _is_static_range(func_ir, call.func)
        if value.op == "call":
            return _is_static_range(func_ir, value.func)
        if value.op == "getattr":
            return ir_utils.resolve_func_from_module(func_ir, value) is core.static_range
    return False


def unroll_static_ranges(func_ir, argtypes):
    """Unroll every static_range loop of ``func_ir``; returns the number unrolled."""
    unrolled = 0
    while True:
        func_ir._definitions = ir_utils.build_definitions(func_ir.blocks)
        loops = _find_static_loops(func_ir)
        if not loops:
            break
        _unroll(func_ir, argtypes, *loops[0])
        unrolled += 1
    if unrolled:
        _drop_static_range_setup(func_ir)
        func_ir.blocks = ir_utils.simplify_CFG(func_ir.blocks)
        func_ir._definitions = ir_utils.build_definitions(func_ir.blocks)
        fold_constexpr_tests(func_ir, argtypes)
    _refuse_leftovers(func_ir)
    return unrolled


def _refuse_leftovers(func_ir):
    """A static_range not driving a for loop (``r = ws.static_range(4)``) is an error."""
    for block in func_ir.blocks.values():
        for stmt in block.body:
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr) \
                    and stmt.value.op == "call" and _is_static_range(func_ir, stmt.value.func):
                raise front_end_error("ws.static_range(...) is only allowed as the iterable "
                                      "of a for loop: for i in ws.static_range(n)", stmt.loc)


@register_pass(mutates_CFG=True, analysis_only=False)
class UnrollStaticRanges(FunctionPass):
    _name = "ws_unroll_static_ranges"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        return unroll_static_ranges(state.func_ir, tuple(state.args)) > 0
