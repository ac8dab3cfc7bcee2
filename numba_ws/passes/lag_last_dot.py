"""Untyped pre-pass (option ``lag_last_dot=1``): a loop's last dot is issued one
iteration late, right after the next iteration's first dot (FA3's intra-warpgroup
overlap, found for the plain flash-attention program).

The loop it takes (``for j in range(lo, hi)``, step 1, innermost) reads, per iteration:
its first dot ``F`` in the body's entry block (``s = ws.dot(q, ws.trans(k_tile))``),
then element-wise work, then its last dot ``L`` in the single latch block whose second
operand is a load ``V`` of the entry block read by ``L`` only (``acc = ws.dot(p, v_tile,
acc * alpha)``). It becomes

    if lo < hi:
        body(lo) without V and L                     # prologue: block lo's softmax
        for j in range(lo + 1, hi):
            A1(j)                                     # loads, F: q @ k_j^T issued
            V(j - 1); L(j - 1)                        # p_{j-1} @ v_{j-1} issued
            A2(j)                                     # softmax of s_j while L runs
        V(hi - 1); L(hi - 1)                          # epilogue

so the element-wise work of iteration j runs while ``L(j-1)`` holds the tensor cores,
and no score tile is carried from one iteration to the next (a loop-carried wgmma result
costs one register move per element at the back edge). Same values as the loop: ``L``'s
inputs come from the previous iteration's A2 and are not redefined before ``L(j-1)``
runs, ``L``'s result is read neither by A1 nor after ``L`` in its block, ``V``'s address
is recomputed for ``j - 1`` (its slice of pure statements, cloned with fresh names) and
issued after the first dot, so K and V are channels of their own: the partitioner
releases K's slot once ``F`` retired (``wait_group 1``, L in flight) and V's once L did
(the ``wait_group 0`` before the rescale), without ``dot_in_flight``.

A loop that does not have this shape is left as it is (the option is a request, not an
assertion); a plan note says how many loops were rewritten. Runs on the untyped IR
before SSA, after ``ws.static_range`` unrolling: copies keep the loop's variable names
(SSA gives each definition its own version), temporaries local to a copy get fresh ones.
"""
import copy
import operator

from numba.cuda.core import ir, ir_utils
from numba.cuda.core.analysis import compute_cfg_from_blocks, compute_live_map, compute_use_defs
from numba.cuda.core.compiler_machinery import FunctionPass, register_pass

from ..language import core
from .static_range import _retarget, _through_copies

#: Expression ops a load's address may be computed with (cloned for ``j - 1``).
_PURE_OPS = {"binop", "inplace_binop", "unary", "build_tuple", "getattr", "cast"}


def _callee(func_ir, var):
    """The Python object a call's function variable resolves to, or None."""
    d = _through_copies(func_ir, var)
    if isinstance(d, (ir.Global, ir.FreeVar)):
        return d.value
    if isinstance(d, ir.Expr) and d.op == "getattr":
        try:
            return ir_utils.resolve_func_from_module(func_ir, d)
        except Exception:   # an attribute of a non-module: not a ws op
            return None
    return None


def _ws_calls(func_ir, block, fn):
    """Indices of ``block``'s statements ``x = fn(...)``."""
    return [i for i, s in enumerate(block.body)
            if isinstance(s, ir.Assign) and isinstance(s.value, ir.Expr)
            and s.value.op == "call" and _callee(func_ir, s.value.func) is fn]


def _defs(stmt):
    return {stmt.target.name} if isinstance(stmt, ir.Assign) else set()


def _uses(stmt):
    return {v.name for v in stmt.list_vars()} - _defs(stmt) if isinstance(stmt, ir.Assign) \
        else {v.name for v in stmt.list_vars()}


class _RangeLoop:
    """A ``for j in range(...)`` loop: header, body, latch, preheader, bounds."""

    @classmethod
    def of(cls, func_ir, loop):
        blocks = func_ir.blocks
        self = cls()
        self.header, self.body = loop.header, set(loop.body) - {loop.header}
        hblock = blocks[loop.header]
        nexts = [s for s in hblock.body if isinstance(s, ir.Assign)
                 and isinstance(s.value, ir.Expr) and s.value.op == "iternext"]
        term = hblock.terminator
        if len(nexts) != 1 or not isinstance(term, ir.Branch) or len(loop.entries) != 1:
            return None
        self.entry, self.exit = term.truebr, term.falsebr
        if self.entry not in self.body or self.exit in self.body:
            return None
        it = _through_copies(func_ir, nexts[0].value.value)
        call = _through_copies(func_ir, it.value) if isinstance(it, ir.Expr) \
            and it.op == "getiter" else None
        if not (isinstance(call, ir.Expr) and call.op == "call" and not call.kws
                and call.vararg is None and _callee(func_ir, call.func) is range):
            return None
        args = list(call.args)
        if len(args) == 3:
            step = _through_copies(func_ir, args[2])
            if not (isinstance(step, ir.Const) and step.value == 1):
                return None
            args = args[:2]
        if not 1 <= len(args) <= 2:
            return None
        self.call, self.bounds = call, args
        (self.preheader,) = loop.entries
        pre = blocks[self.preheader]
        if not any(isinstance(s, ir.Assign) and s.value is call for s in pre.body) \
                or not isinstance(pre.terminator, ir.Jump):
            return None
        latches = [lb for lb in self.body if self.header in _successors(blocks[lb])]
        leaves = [lb for lb in self.body
                  if any(t not in self.body | {self.header} for t in _successors(blocks[lb]))]
        if len(latches) != 1 or leaves:
            return None                # a break, or several back edges
        self.latch = latches[0]
        first = blocks[self.entry].body[0] if blocks[self.entry].body else None
        if not (isinstance(first, ir.Assign) and isinstance(first.value, ir.Var)):
            return None
        self.induction = first.target
        return self


def _successors(block):
    term = block.terminator
    if isinstance(term, ir.Jump):
        return [term.target]
    if isinstance(term, ir.Branch):
        return [term.truebr, term.falsebr]
    return []


class _Lag:
    """The statements of one loop the rewrite moves, or None where it does not apply."""

    @classmethod
    def of(cls, func_ir, rl):
        blocks = func_ir.blocks
        entry, latch = blocks[rl.entry], blocks[rl.latch]
        body_stmts = [s for lb in rl.body for s in blocks[lb].body]
        j = rl.induction.name
        defined_in_body = set().union(*(_defs(s) for s in body_stmts))
        if sum(1 for s in body_stmts if j in _defs(s)) != 1:
            return None
        if any(v.name in defined_in_body for v in rl.bounds):
            return None
        outside = [s for lb, b in blocks.items() if lb not in rl.body for s in b.body]
        if any(j in _uses(s) for s in outside):
            return None                                  # j read after the loop
        dots_entry = _ws_calls(func_ir, entry, core.dot)
        dots_latch = _ws_calls(func_ir, latch, core.dot)
        if not dots_entry or not dots_latch:
            return None
        self = cls()
        self.induction = j
        self.first = entry.body[dots_entry[0]]
        self.last = latch.body[dots_latch[-1]]
        if self.first is self.last:
            return None
        f_at = dots_entry[0]
        last_at = dots_latch[-1]
        a1 = entry.body[1:f_at]
        b_var = self.last.value.args[1].name if len(self.last.value.args) > 1 else None
        loads = {entry.body[i].target.name: i for i in _ws_calls(func_ir, entry, core.load)
                 if i < f_at}
        if b_var not in loads:
            return None
        self.load = entry.body[loads[b_var]]
        if any(b_var in _uses(s) for s in body_stmts + outside if s is not self.last):
            return None                                  # the loaded tile has other readers
        slice_ = cls._slice(func_ir, entry.body[:loads[b_var]], self.load, j,
                            defined_in_body)
        chain = cls._slice(func_ir, latch.body[:last_at], self.last, j, defined_in_body,
                           only={self.last.value.func.name})
        if slice_ is None or chain is None:
            return None
        self.slice, self.chain = slice_, chain
        target = self.last.target.name
        inputs = _uses(self.last) - {b_var} - {s.target.name for s in chain}
        a1_defs = set().union(set(), *(_defs(s) for s in a1))
        after = latch.body[last_at + 1:]
        if target in set().union(set(), *(_uses(s) for s in a1 + after)) \
                or inputs & a1_defs or inputs & set().union(set(), *(_defs(s) for s in after)):
            return None
        users = {}
        for s in body_stmts:
            for u in _uses(s):
                users.setdefault(u, []).append(s)
        mine = {id(s) for s in slice_} | {id(self.load)}
        # slice statements only the load reads can leave A1
        self.removable = [s for s in slice_ if all(id(u) in mine
                                                   for u in users.get(s.target.name, []))]
        return self

    @staticmethod
    def _slice(func_ir, before, stmt, j, defined_in_body, only=None):
        """The statements of ``before`` that ``stmt`` needs (pure, transitively), in
        order; None if one is not pure. ``only``: the variables to follow (default: all
        that ``stmt`` reads)."""
        wanted = (set(only) if only is not None else _uses(stmt)) - {j}
        picked = []
        for s in reversed(before):
            if not (isinstance(s, ir.Assign) and s.target.name in wanted):
                continue
            v = s.value
            if not (isinstance(v, (ir.Const, ir.Global, ir.FreeVar, ir.Var))
                    or isinstance(v, ir.Expr) and v.op in _PURE_OPS):
                return None
            picked.append(s)
            wanted |= _uses(s) - {j}
        needed = wanted - {s.target.name for s in picked} - {j}
        if needed & defined_in_body:
            return None     # an input computed in the body outside this slice
        return picked[::-1]


def _clone(stmts, scope, renames, keep):
    """Deep copies of ``stmts`` with variables renamed through ``renames``; each target
    not in ``keep`` gets a fresh name (added to ``renames``)."""
    out = []
    for s in stmts:
        c = copy.deepcopy(s)
        ir_utils.replace_vars_stmt(c, renames)
        if isinstance(c, ir.Assign) and s.target.name not in keep:
            fresh = scope.redefine(s.target.name, s.loc)
            renames[s.target.name] = fresh
            c.target = fresh
        out.append(c)
    return out


def _stage(lag, scope, j_var):
    """``V(j_var); L(j_var)``: the load's slice, the load, the dot's callee chain, the
    dot, with the induction variable read as ``j_var``."""
    renames = {lag.induction: j_var}
    keep = {lag.load.target.name, lag.last.target.name}
    return _clone(lag.slice + [lag.load] + lag.chain + [lag.last], scope, renames, keep)


def _const(scope, value, loc, name):
    var = scope.redefine(name, loc)
    return var, ir.Assign(ir.Const(value, loc), var, loc)


def _rewrite(func_ir, rl, lag):
    blocks = func_ir.blocks
    scope = blocks[rl.entry].scope
    loc = rl.call.loc
    pre = blocks[rl.preheader]
    # bounds: range(hi) or range(lo, hi) -> range(lo + 1, hi)
    setup = []
    if len(rl.bounds) == 1:
        lo, stmt = _const(scope, 0, loc, "$lag_lo")
        setup.append(stmt)
        hi = rl.bounds[0]
    else:
        lo, hi = rl.bounds
    one, stmt = _const(scope, 1, loc, "$lag_one")
    setup.append(stmt)
    lo1 = scope.redefine("$lag_lo1", loc)
    setup.append(ir.Assign(ir.Expr.binop(operator.add, lo, one, loc), lo1, loc))
    nonempty = scope.redefine("$lag_nonempty", loc)
    setup.append(ir.Assign(ir.Expr.binop(operator.lt, lo, hi, loc), nonempty, loc))
    at = next(i for i, s in enumerate(pre.body) if isinstance(s, ir.Assign)
              and s.value is rl.call)
    pre.body[at:at] = setup
    rl.call.args = [lo1, hi]
    # the prologue: a copy of the body for j = lo without the lagged load and dot
    local = _iteration_local(func_ir, rl) - _uses(lag.last)   # L's inputs: now carried
    labels = {lb: ir_utils.next_label() for lb in sorted(rl.body)}
    renames = {name: scope.redefine(name, loc) for name in local}
    drop = {id(s) for s in [lag.load, lag.last] + lag.removable}
    for lb in sorted(rl.body):
        block = copy.copy(blocks[lb])
        block.body = []
        for i, s in enumerate(blocks[lb].body):
            if id(s) in drop:
                continue
            c = copy.deepcopy(s)
            if lb == rl.entry and i == 0:
                c = ir.Assign(lo, rl.induction, s.loc)
            else:
                ir_utils.replace_vars_stmt(c, renames)
            block.body.append(c)
        block.body[-1] = _retarget(block.body[-1], labels)
        blocks[labels[lb]] = block
    pre.body[-1] = ir.Branch(nonempty, labels[rl.entry], rl.exit, pre.body[-1].loc)
    # the loop: V(j - 1); L(j - 1) right after the first dot (V a channel of its own:
    # the partitioner releases K's slot once the first dot retired, V's once L did)
    entry = blocks[rl.entry]
    entry.body = [s for s in entry.body if id(s) not in drop]
    jprev = scope.redefine("$lag_jprev", loc)
    one2, stmt = _const(scope, 1, loc, "$lag_one")
    at = entry.body.index(lag.first) + 1
    entry.body[at:at] = [stmt, ir.Assign(ir.Expr.binop(operator.sub, rl.induction, one2, loc),
                                         jprev, loc)] + _stage(lag, scope, jprev)
    latch = blocks[rl.latch]
    latch.body = [s for s in latch.body if s is not lag.last]
    _sink_operands(latch, lag)
    _split_join(blocks, rl, lag)
    # the epilogue: V(hi - 1); L(hi - 1) on the loop's exit edge
    jlast = scope.redefine("$lag_jlast", loc)
    one3, stmt = _const(scope, 1, loc, "$lag_one")
    epi = ir.Block(scope, loc)
    epi.body = [stmt, ir.Assign(ir.Expr.binop(operator.sub, hi, one3, loc), jlast, loc)] \
        + _stage(lag, scope, jlast) + [ir.Jump(rl.exit, loc)]
    epi_label = ir_utils.next_label()
    blocks[epi_label] = epi
    hblock = blocks[rl.header]
    hblock.body[-1] = _retarget(hblock.body[-1], {rl.exit: epi_label})


def _sink_operands(latch, lag):
    """Move the latch's definitions of L's operands that do not read L's result (``p16 =
    p.astype(v.dtype)``) to the latch's end, after those that do (``acc * alpha``, where
    the consumer waits for L(j-1)). Written before the wait, the conversion's registers
    are L(j-1)'s in-flight A operand and ptxas hoists that wait above the softmax
    (2026-12-07, SASS on the CPU VM); after it, the softmax runs while L(j-1) does."""
    target = lag.last.target.name
    operands = _uses(lag.last) - {lag.load.target.name} - {s.target.name for s in lag.chain}
    body, term = latch.body[:-1], latch.body[-1]
    moved = []
    for i, s in enumerate(body):
        if not (isinstance(s, ir.Assign) and s.target.name in operands) or target in _uses(s):
            continue
        later = body[i + 1:]
        if any(s.target.name in _uses(t) for t in later) \
                or _uses(s) & set().union(set(), *(_defs(t) for t in later)):
            continue
        moved.append(s)
    latch.body = [s for s in body if s not in moved] + moved + [term]


def _split_join(blocks, rl, lag):
    """Where the latch is a join (the body's ``if`` ends there), copy its statements
    before the first read of L's result (the softmax) to the end of each incoming path,
    so the wait for L(j-1) opens a block of its own: within one block ptxas moves that
    wait above the softmax to convert P early into L(j-1)'s in-flight A-operand
    registers (SASS, 2026-12-07); across a join it cannot."""
    latch = blocks[rl.latch]
    target = lag.last.target.name
    at = next((i for i, s in enumerate(latch.body) if target in _uses(s)), None)
    preds = [lb for lb in rl.body if rl.latch in _successors(blocks[lb])]
    if at is None or at == 0 or len(preds) < 2:
        return
    head, tail = latch.body[:at], latch.body[at:]
    # names the tail reads through a getattr / global (``p.astype``) stay single
    # definitions: Numba types a method call from its one definition
    tail_uses = set().union(set(), *(_uses(s) for s in tail))
    lookups = [s for s in head if isinstance(s, ir.Assign) and s.target.name in tail_uses
               and (isinstance(s.value, (ir.Global, ir.FreeVar, ir.Const))
                    or isinstance(s.value, ir.Expr) and s.value.op == "getattr")]
    head = [s for s in head if s not in lookups]
    latch.body = lookups + tail
    for lb in preds:
        block = blocks[lb]
        term = block.body[-1]
        if isinstance(term, ir.Jump):
            block.body[-1:] = copy.deepcopy(head) + [term]
            continue
        edge = ir.Block(latch.scope, term.loc)
        edge.body = copy.deepcopy(head) + [ir.Jump(rl.latch, term.loc)]
        label = ir_utils.next_label()
        blocks[label] = edge
        rl.body.add(label)
        block.body[-1] = _retarget(term, {rl.latch: label})


def _iteration_local(func_ir, rl):
    """Variables defined in the body, read nowhere outside it and not live at its entry
    (not carried between iterations): the prologue's copy gives them fresh names."""
    blocks = func_ir.blocks
    usedefs = compute_use_defs(blocks)
    live = compute_live_map(compute_cfg_from_blocks(blocks), blocks, usedefs.usemap,
                            usedefs.defmap)
    outside = set()
    for lb in blocks:
        if lb not in rl.body:
            outside |= usedefs.usemap[lb] | usedefs.defmap[lb]
    defined = set().union(*(usedefs.defmap[lb] for lb in rl.body))
    return defined - outside - live[rl.entry] - {rl.induction.name}


def lag_last_dots(func_ir):
    """Rewrite every loop of the shape above, innermost first; returns how many."""
    done = 0
    while True:
        func_ir._definitions = ir_utils.build_definitions(func_ir.blocks)
        cfg = compute_cfg_from_blocks(func_ir.blocks)
        found = None
        for loop in sorted(cfg.loops().values(), key=lambda lp: len(lp.body)):
            if any(set(other.body) < set(loop.body) for other in cfg.loops().values()):
                continue                        # not innermost
            if getattr(func_ir.blocks[loop.header], "ws_lagged", False):
                continue                        # rewritten already
            rl = _RangeLoop.of(func_ir, loop)
            lag = _Lag.of(func_ir, rl) if rl else None
            if lag:
                found = rl, lag
                break
        if not found:
            return done
        _rewrite(func_ir, *found)
        func_ir.blocks[found[0].header].ws_lagged = True
        done += 1


@register_pass(mutates_CFG=True, analysis_only=False)
class LagLastDot(FunctionPass):
    _name = "ws_lag_last_dot"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        done = lag_last_dots(state.func_ir)
        state.func_ir._definitions = ir_utils.build_definitions(state.func_ir.blocks)
        state.ws_plan.notes.append(f"lag_last_dot=1: {done} loop(s) rewritten"
                                   + ("" if done else " (no loop of the pass's shape)"))
        return done > 0
