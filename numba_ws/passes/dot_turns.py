"""Dot turns (option ``dot_turns=1``; FA3's warp-group ping-pong), used by the
code-partition pass.

In the loop around the loads (the attention key loop), consumer group ``i`` (0-based)
waits for its turn right before the loop's *turn dot* (its first ``ws.dot`` executed on
every iteration: attention's ``q k^T``) and hands the turn to group ``(i + 1) % G``
right after issuing it. The tensor cores then receive the groups' turn dots in
alternation, so one group's element-wise work (the softmax) runs while the next
group's dot computes, instead of the groups drifting into step.

The turn barriers are the ping-pong ones (``ws_turn_wait`` / ``ws_turn_pass``,
mbarriers of 128 arrivals at ``plan.turn_offset``; the token they carry is unused
here). Group ``i``'s ``m``-th wait uses parity ``m % 2``, group 0's ``(m + 1) % 2``
(its first turn is free: a fresh barrier passes parity 1). Invariant: every group runs
the loop the same number of times (its trip count is a scalar, the same in every group:
groups differ only in their slices of split tiles), so the turns stay in step; the last
hand-over to group 0 is left unclaimed, which an mbarrier allows.
"""
import operator

from numba.cuda.core import ir

from ..language import stage_ops as so
from .ir_build import StmtBuilder
from .ir_tools import tile_op


def find_turn_dot(fir, cfg, typemap, channels, error):
    """The statement of the turn dot: the first ``ws.dot`` (by block label, then order)
    in the innermost loop around a loop channel's loads (a persistent kernel's key loop,
    not its tile loop) whose block runs on every iteration (it dominates each back
    edge's source) outside inner loops."""
    in_loop = [ch for ch in channels if ch.in_loop]
    where = channels[0].loads[0].loc if channels else None
    if not in_loop:
        raise error("dot_turns=1 needs loads in a loop (the loop whose dots take turns)",
                    where)
    loop = min((lp for ch in in_loop for lp in cfg.loops().values()
                if ch.block_label in lp.body), key=lambda lp: len(lp.body))
    doms = cfg.dominators()
    latches = {src for src, dst in cfg._back_edges if dst == loop.header}
    inner = set().union(*(lp.body for lp in cfg.loops().values()
                          if lp.header != loop.header and lp.header in loop.body))
    for lab in sorted(loop.body):
        if lab in inner or not all(lab in doms[src] for src in latches):
            continue
        for stmt in fir.blocks[lab].body:
            if tile_op(stmt, typemap) == "dot":
                return stmt
    raise error("dot_turns=1 needs a ws.dot that runs on every iteration of the loop "
                "around the loads (not inside an if or an inner loop)", where)


class DotTurns:
    """A consumer clone's turns around the turn dot."""

    def __init__(self, task, groups, stmt):
        self.task, self.group, self.groups, self.stmt = task, task - 1, groups, stmt

    def _count(self, scope, loc):
        return ir.Var(scope, f"$ws_dot_turns__t{self.task}", loc)

    def init(self, block):
        return [ir.Assign(ir.Const(0, block.loc), self._count(block.scope, block.loc),
                          block.loc)]

    def wait_turn(self, scope, loc):
        b = StmtBuilder(scope, loc, f"t{self.task}")
        m = self._count(scope, loc)
        parity = b.binop(operator.mod, m, b.const(2))
        if self.group == 0:
            parity = b.binop(operator.xor, parity, b.const(1))
        b.call(so.ws_turn_wait, [b.const(self.group), parity])
        b.binop(operator.add, m, b.const(1), target=m)
        return b.body

    def pass_turn(self, scope, loc):
        b = StmtBuilder(scope, loc, f"t{self.task}")
        b.call(so.ws_turn_pass, [b.const((self.group + 1) % self.groups), b.const(0)])
        return b.body
