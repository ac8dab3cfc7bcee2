"""Pass 2 — async task assignment, the seed's three propagation rules.

1. A control dependency used only by one anchor's task goes to that task.
2. A data dependency used only by one anchor goes to its task — unless it is itself an
   anchor (an anchor keeps its own task: that is where channels come from).
3. Anything used by several tasks is placed in all of them (computed redundantly).

Implemented as a backward fixpoint over variable uses: the tasks of a statement are the
union of the tasks of the statements reading what it defines, plus, for a branch, the
tasks of every statement whose execution it controls. Returns get every task.
"""
from numba.cuda.core import ir

from .base import WSPass, ws_pass
from .ir_tools import controlled_blocks, stmt_defs, stmt_uses

PRODUCER, CONSUMER = 0, 1


def assign_tasks(func_ir, anchors, all_tasks):
    """Map id(stmt) -> frozenset of tasks for every statement of ``func_ir``."""
    cfg = func_ir.get_cfg() if hasattr(func_ir, "get_cfg") else None
    if cfg is None:
        from numba.cuda.core.analysis import compute_cfg_from_blocks
        cfg = compute_cfg_from_blocks(func_ir.blocks)
    users = {}
    stmts = []
    for label, block in func_ir.blocks.items():
        for stmt in block.body:
            stmts.append((label, stmt))
            for name in stmt_uses(stmt):
                users.setdefault(name, []).append(stmt)
    controls = {label: [s for b in controlled_blocks(cfg, label)
                        for s in func_ir.blocks[b].body]
                for label, block in func_ir.blocks.items()
                if isinstance(block.terminator, ir.Branch)}
    tasks = {}
    for _, stmt in stmts:
        op = anchors.get(id(stmt))
        if op is not None:
            tasks[id(stmt)] = frozenset({PRODUCER} if op == "load" else {CONSUMER})
        elif isinstance(stmt, ir.Return):
            tasks[id(stmt)] = frozenset(all_tasks)
        else:
            tasks[id(stmt)] = frozenset()
    changed = True
    while changed:
        changed = False
        for label, stmt in stmts:
            if id(stmt) in anchors or isinstance(stmt, ir.Return):
                continue
            new = set(tasks[id(stmt)])
            for name in stmt_defs(stmt):
                for user in users.get(name, ()):
                    new |= tasks[id(user)]
            if isinstance(stmt, ir.Branch):
                for s in controls.get(label, ()):
                    new |= tasks[id(s)]
            new = frozenset(new)
            if new != tasks[id(stmt)]:
                tasks[id(stmt)] = new
                changed = True
    return tasks


@ws_pass
class AssignTasks(WSPass):
    _name = "ws_tasks"

    def run(self, state):
        plan = state.ws
        plan.tasks = assign_tasks(state.func_ir, plan.anchors, (PRODUCER, CONSUMER))
        plan.tasks_before_partition = dict(plan.tasks)
        for sid, op in plan.anchors.items():
            stmt = plan.stmts[sid][0]
            if op == "load":
                target = stmt.target.name
                if not any(target in stmt_uses(s) for s, _ in plan.stmts.values()):
                    raise self.error(
                        f"the result of ws.load ({target}) feeds nothing: a producer "
                        "load must have a consumer", stmt.loc)
