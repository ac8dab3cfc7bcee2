"""Pass 6 — register reallocation (seed: RegAllocOp / RegDeallocOp).

The kernel launches with ``launch_bounds=(128 * (1 + G), 1)``, so every thread starts
with ``R = min(255, 65536 / threads)`` registers rounded down to a multiple of 8.
The producer branch begins with ``ws_reg_dealloc(reg_dec_producer)``, each consumer
branch with ``ws_reg_alloc(reg_inc_consumer)`` (setmaxnreg needs the new limit below /
above R for dec / inc; one that would not change anything is left out and noted, and so
is the whole split when a channel is lowered to cp.async or ld.global, whose producer
threads compute addresses and need more than a few dozen registers). The
budget ``128 * dec + G * 128 * inc <= threads * R`` is checked here: a split that does
not fit would hang the GPU, so it is a compile error instead. Below sm_90 there is no
setmaxnreg: the pass only records R (the verify pass checks the accumulators against it).
"""
from ..errors import WSResourceError
from ..language import stage_ops as so
from ..runtime.options import REGISTER_FILE
from .base import WSPass, ws_pass
from .ir_build import StmtBuilder, type_statements


def entry_registers(threads):
    return min(255, REGISTER_FILE // threads) // 8 * 8


def register_split(options):
    """(R, dec or None, inc or None) for these options, or raise WSResourceError."""
    threads = options.num_threads
    r = entry_registers(threads)
    dec, inc = options.reg_dec_producer, options.reg_inc_consumer
    g = options.num_consumer_groups
    need = 128 * min(dec, r) + g * 128 * max(inc, r)
    if need > threads * r:
        raise WSResourceError(
            f"register budget: 128 x reg_dec_producer({dec}) + {g} x 128 x "
            f"reg_inc_consumer({inc}) = {need} registers, but {threads} threads x {r} = "
            f"{threads * r} are available per CTA (64K register file). Lower "
            "reg_inc_consumer or raise reg_dec_producer", pass_name="ws_registers")
    return r, (dec if dec < r else None), (inc if inc > r else None)


@ws_pass
class ReallocRegisters(WSPass):
    _name = "ws_registers"

    def run(self, state):
        plan = state.ws
        if plan.cc[0] < 9:
            plan.entry_registers = entry_registers(plan.num_threads)
            plan.notes.append(f"setmaxnreg left out: sm_{plan.cc[0]}{plan.cc[1]} has none "
                              "(sm_90a); every warp group keeps the entry limit of "
                              f"{plan.entry_registers} registers")
            return
        r, dec, inc = register_split(plan.options)
        plan.entry_registers = r
        if plan.fused:
            plan.notes.append("no warp specialization (NUMBA_WS_DISABLE): no setmaxnreg")
            return
        copying = sorted({ch.lowering for ch in plan.channels if ch.lowering != "tma"})
        if copying:   # cp.async / ld.global: the producer's threads copy, not one TMA thread
            plan.notes.append(f"setmaxnreg left out: the {' / '.join(copying)} producer "
                              "computes addresses for 128 threads and keeps the entry limit "
                              f"of {r} registers")
            return
        first_task = {}        # label -> its first task (consumers may share one clone)
        for task, label in plan.branches.items():
            first_task.setdefault(label, task)
        for label, task in first_task.items():
            block = state.func_ir.blocks[label]
            amount = dec if task == 0 else inc
            if amount is None:
                plan.notes.append(f"task {task}: setmaxnreg left out (entry limit is {r})")
                continue
            b = StmtBuilder(block.scope, block.loc, f"reg{task}")
            b.call(so.ws_reg_dealloc if task == 0 else so.ws_reg_alloc, [b.const(amount)])
            block.body[:0] = b.body
            type_statements(state, b.body)
