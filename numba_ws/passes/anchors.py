"""Pass 1 — anchors (seed: 异步任务).

Every ``ws.load`` is a producer anchor (task 0); every ``ws.dot`` and ``ws.store`` is a
consumer anchor (task 1 before data partitioning). Records ``plan.anchors`` and snapshots
the original IR so that ``explain()`` and later passes can refer to it.
"""
from .base import WSPass, ws_pass
from .ir_tools import ANCHOR_TASK, tile_op


@ws_pass
class FindAnchors(WSPass):
    _name = "ws_anchors"

    def run(self, state):
        plan = state.ws
        plan.original_ir = state.func_ir
        plan.original_typemap = dict(state.typemap)
        for label, block in state.func_ir.blocks.items():
            for stmt in block.body:
                plan.stmts[id(stmt)] = (stmt, label)
                op = tile_op(stmt, state.typemap)
                if op in ANCHOR_TASK:
                    plan.anchors[id(stmt)] = op
        if not any(op == "load" for op in plan.anchors.values()):
            plan.notes.append("no ws.load: nothing for a producer to do")
