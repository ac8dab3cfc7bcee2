"""Ping-pong consumers (option ``ping_pong=1``; CUTLASS calls it Pingpong), used by the
code-partition pass.

The persistent tile loop ``for tile in range(start, stop, step)`` is dealt out: consumer
group ``i`` (0-based) runs ``range(start + i*step, stop, G*step)`` and computes whole
tiles, so while one group stores its tile the others keep the tensor cores busy. The
producer runs every iteration; iteration ``j`` is for group ``j % G``.

Each channel holds one ring of ``NB`` slots per group (``Channel.group_slots``): group
``i`` uses slots ``i*NB + ring % NB`` with its own ring counter, and only the producer's
fills of group ``i``'s tiles go there. So every group sees the plain protocol (its
``k``-th wait on a slot is for that slot's ``k``-th fill, never more than one phase
ahead), which a shared ring cannot give: a group skipping the other groups' fills would
wait on a parity that an older fill already satisfies.

The producer keeps ``G`` ring counters per channel, the current group's first: at the
top of each tile-loop iteration the group index advances (``g = (g + 1) % G``) and the
counters rotate left by one. Invariant: at a fill, ``ring`` counts the fills made so far
for group ``g``.
"""
import operator
from dataclasses import dataclass

from numba.cuda.core import ir


@dataclass
class TileLoop:
    header: int        # label of the loop header (iternext)
    body_entry: int    # first block of an iteration
    range_stmt: object  # the ``range(...)`` call statement (original IR)


def find_tile_loop(fir, cfg, channels, error):
    """The outermost loop around every channel's loads, which must be a ``for ... in
    range(...)`` loop with one entry."""
    loops = [lp for lp in cfg.loops().values()
             if all(ch.block_label in lp.body for ch in channels)]
    where = channels[0].loads[0].loc if channels else None
    if not channels or not loops:
        raise error("ping_pong=1 needs a persistent tile loop (for tile in range(start, "
                    "num_tiles, step)) around the loads", where)
    loop = max(loops, key=lambda lp: len(lp.body))
    found = _for_range(fir, loop) if len(loop.entries) == 1 else None
    if found is None:
        raise error("ping_pong=1: the loop around the loads must be a for loop over "
                    "range(start, stop, step) with one entry", where)
    carried = _carried(fir, loop)
    if carried:
        raise error(f"ping_pong=1: {carried[0]!r} is carried from one iteration of the loop "
                    "around the loads to the next, but ping-pong gives each consumer group "
                    "only every G-th iteration; each iteration must compute whole tiles "
                    "(a persistent tile loop, like numba_ws.examples.matmul_persistent)",
                    where)
    return TileLoop(loop.header, *found)


def _carried(fir, loop):
    """User variables assigned both inside and outside ``loop`` (loop-carried values)."""
    inside, outside = set(), set()
    for label, block in fir.blocks.items():
        names = {s.target.name for s in block.body if isinstance(s, ir.Assign)
                 and not isinstance(s.value, ir.Arg)}
        (inside if label in loop.body else outside).update(names)
    return sorted(n.split(".")[0] for n in inside & outside)


def _for_range(fir, loop):
    """(first block of an iteration, the ``$r = range(...)`` statement) of a for loop,
    or None. The ``iternext`` sits in the header or in blocks it jumps to."""
    label = loop.header
    while label in loop.body:
        block = fir.blocks[label]
        term = block.terminator
        nexts = [s for s in block.body if isinstance(s, ir.Assign)
                 and isinstance(s.value, ir.Expr) and s.value.op == "iternext"]
        if nexts:
            if not isinstance(term, ir.Branch):
                return None
            stmt = _range_stmt(fir, nexts[0].value.value)
            return (term.truebr, stmt) if stmt is not None else None
        if not isinstance(term, ir.Jump):
            return None
        label = term.target
    return None


def _range_stmt(fir, iterator):
    it = fir.get_definition(iterator)
    if not (isinstance(it, ir.Expr) and it.op == "getiter"):
        return None
    call = fir.get_definition(it.value)
    if not (isinstance(call, ir.Expr) and call.op == "call"):
        return None
    fn = fir.get_definition(call.func)
    if not (isinstance(fn, (ir.Global, ir.FreeVar)) and fn.value is range):
        return None
    for block in fir.blocks.values():
        for s in block.body:
            if isinstance(s, ir.Assign) and s.value is call:
                return s
    return None


def stride_range(new, b, index, groups):
    """Rewrite the cloned ``range(...)`` call ``new`` in place for consumer ``index`` of
    ``groups``: ``range(start + index*step, stop, groups*step)``."""
    args = list(new.value.args)
    if len(args) == 1:
        start, stop, step = b.const(0), args[0], b.const(1)
    elif len(args) == 2:
        start, stop, step = args[0], args[1], b.const(1)
    else:
        start, stop, step = args
    shift = b.binop(operator.mul, step, b.const(index)) if index else None
    new_start = b.binop(operator.add, start, shift) if index else start
    new.value.args = [new_start, stop, b.binop(operator.mul, step, b.const(groups))]


def advance_group(b, group_var, rings, groups):
    """Producer, top of a tile-loop iteration: next group, rotate each channel's counters.

    ``rings``: per channel, its ``groups`` ring-counter variables (current group first).
    """
    nxt = b.binop(operator.add, group_var, b.const(1))
    b.binop(operator.mod, nxt, b.const(groups), target=group_var)
    for ring in rings:
        first = b.assign(ring[0])
        for k in range(groups - 1):
            b.assign(ring[k + 1], target=ring[k])
        b.assign(first, target=ring[-1])
