"""Text dump of the IR with task ids, printed before each pass when NUMBA_WS_DUMP is set.

Before code partitioning every statement shows ``# tasks {..}`` from the plan (empty
before the task pass ran); after it, each block shows which warp group's branch it
belongs to.
"""
from numba.cuda.core import ir


def _branch_of(plan, label):
    owner = None
    for task, entry in sorted(plan.branches.items(), key=lambda kv: kv[1]):
        if label >= entry:
            owner = task
    return owner


def dump_ir(state):
    plan = getattr(state, "ws", None)
    lines = []
    for label in sorted(state.func_ir.blocks):
        block = state.func_ir.blocks[label]
        owner = _branch_of(plan, label) if plan is not None and plan.branches else None
        lines.append(f"label {label}:" + (f"  # warp group {owner}" if owner is not None else ""))
        for stmt in block.body:
            text = str(stmt)
            tasks = plan.tasks.get(id(stmt)) if plan is not None else None
            if tasks is not None and not isinstance(stmt, ir.Jump):
                text = f"{text:<70s} # tasks {sorted(tasks)}"
            lines.append("    " + text)
    return "\n".join(lines)
