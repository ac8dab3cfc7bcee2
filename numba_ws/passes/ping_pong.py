"""Ping-pong consumers (option ``ping_pong=1``; CUTLASS calls it Pingpong), used by the
code-partition pass.

The persistent tile loop ``for tile in range(start, stop, step)`` is dealt out: consumer
group ``i`` (0-based) runs ``range(start + i*step, stop, G*step)`` and computes whole
tiles, so while one group stores its tile the next one has the tensor cores. The
producer is unchanged: it fills one ring of ``num_buffers_warp_spec`` slots for every
tile in order, and each fill is consumed (and released) by one group (``arrivals`` = 1).

The groups take turns at the *work loop* (the loop holding the loads, inside the tile
loop): group ``i`` waits for its turn before entering it (``ws_turn_wait``) and, once it
leaves it, hands the turn with its ring counter to group ``(i + 1) % G``
(``ws_turn_pass``). The ring counter that arrives is where the next tile's fills start,
and the turn order keeps every wait on a slot's full barrier at most one phase ahead
(a group skipping the other groups' fills without turns could wait on a parity that an
older fill already satisfied). Group ``i``'s ``m``-th turn wait uses parity ``m % 2``,
group 0's ``(m + 1) % 2`` (its first turn needs no one's hand-over: a fresh barrier
passes parity 1). One channel only: the turn carries one ring counter.
"""
import operator
from dataclasses import dataclass

from numba.cuda.core import ir

from ..language import stage_ops as so
from .ir_build import StmtBuilder


@dataclass
class TileLoop:
    range_stmt: object   # the tile loop's ``range(...)`` call statement (original IR)
    work: object         # the loop holding the loads (numba Loop: entries, exits)


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
    range_stmt = _for_range(fir, loop) if len(loop.entries) == 1 else None
    if range_stmt is None:
        raise error("ping_pong=1: the loop around the loads must be a for loop over "
                    "range(start, stop, step) with one entry", where)
    if len(channels) != 1:
        raise error(f"ping_pong=1 supports one channel (the loads of one loop body read by "
                    f"the same ops); this kernel has {len(channels)}", where)
    work = min((lp for lp in cfg.loops().values() if channels[0].block_label in lp.body),
               key=lambda lp: len(lp.body))
    preds = {p for e in work.exits for p, _ in cfg.predecessors(e)}
    if work.header == loop.header or len(work.entries) != 1 or not preds <= work.body:
        raise error("ping_pong=1 needs the loads in a loop of their own (the K loop) inside "
                    "the persistent tile loop", where)
    carried = _carried(fir, loop)
    if carried:
        raise error(f"ping_pong=1: {carried[0]!r} is carried from one iteration of the loop "
                    "around the loads to the next, but ping-pong gives each consumer group "
                    "only every G-th iteration; each iteration must compute whole tiles "
                    "(a persistent tile loop, like numba_ws.examples.matmul_persistent)",
                    where)
    return TileLoop(range_stmt, work)


def _carried(fir, loop):
    """User variables assigned both inside and outside ``loop`` (loop-carried values)."""
    inside, outside = set(), set()
    for label, block in fir.blocks.items():
        names = {s.target.name for s in block.body if isinstance(s, ir.Assign)
                 and not isinstance(s.value, ir.Arg)}
        (inside if label in loop.body else outside).update(names)
    return sorted(n.split(".")[0] for n in inside & outside)


def _for_range(fir, loop):
    """The ``$r = range(...)`` statement a for loop iterates, or None. The ``iternext``
    sits in the header or in blocks it jumps to."""
    label = loop.header
    while label in loop.body:
        block = fir.blocks[label]
        term = block.terminator
        nexts = [s for s in block.body if isinstance(s, ir.Assign)
                 and isinstance(s.value, ir.Expr) and s.value.op == "iternext"]
        if nexts:
            if not isinstance(term, ir.Branch):
                return None
            return _range_stmt(fir, nexts[0].value.value)
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


class Turns:
    """A consumer clone's turn-taking around the work loop (see the module doc)."""

    def __init__(self, cloner, tile_loop):
        self.c, self.loop = cloner, tile_loop.work
        self.group = cloner.task - 1
        self.groups = cloner.plan.num_consumers

    def _count(self, scope, loc):
        return ir.Var(scope, f"$ws_turns__t{self.c.task}", loc)

    def _ring(self, block):
        ch, = self.c.plan.channels
        return self.c.ring_var(block.scope, ch, block.loc)

    def init(self, block):
        return [ir.Assign(ir.Const(0, block.loc), self._count(block.scope, block.loc),
                          block.loc)]

    def wait_turn(self, block):
        b = StmtBuilder(block.scope, block.loc, f"t{self.c.task}")
        m = self._count(block.scope, block.loc)
        parity = b.binop(operator.mod, m, b.const(2))
        if self.group == 0:
            parity = b.binop(operator.xor, parity, b.const(1))
        b.call(so.ws_turn_wait, [b.const(self.group), parity], target=self._ring(block))
        b.binop(operator.add, m, b.const(1), target=m)
        return b.body

    def pass_turn(self, block):
        b = StmtBuilder(block.scope, block.loc, f"t{self.c.task}")
        b.call(so.ws_turn_pass, [b.const((self.group + 1) % self.groups), self._ring(block)])
        return b.body
