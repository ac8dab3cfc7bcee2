"""Pass 7 — static checks of the partitioned kernel before any code is generated.

- Target: sm_80 or newer (cp.async, mbarrier, mma.sync with bf16 need it).
- Shared memory: all channel slots + barriers must fit the target's opt-in limit per
  block (:func:`smem_limit`: 227 KB on sm_90, 163 KB on sm_80 / sm_87, 99 KB on other
  sm_8x); over it is a compile error, never a launch failure or a hang.
- Registers: a consumer's dot accumulator (M*N/128 fp32 registers per thread) plus
  ``ACC_OVERHEAD`` must fit its register limit (``reg_inc_consumer`` with setmaxnreg;
  below sm_90 the entry limit R of every thread: 168 for two consumer groups, so
  64 x 256 per consumer fits, measured 168 registers and 0 spills with ptxas -arch=sm_80),
  or ptxas would fail or spill.
- Tile shapes legal for the tensor-core form: per consumer, a dot's M a multiple of 64
  (m64 wgmma), N a multiple of 8 in [8, 256] per instruction, K a multiple of 16; TMA
  boxes at most 256 rows.
- Every channel has at least one consumer and one slot; arrivals match consumer groups
  (one per phase when ping-pong groups take turns).
"""
from ..errors import WSResourceError
from ..language.types import TileType
from .base import WSPass, ws_pass
from .ir_tools import tile_op

#: Max dynamic shared memory per block on sm_90 after opting in (bytes).
SMEM_LIMIT = 227 * 1024
#: The same below sm_90 (CUDA C Programming Guide, compute capabilities table).
SMEM_LIMIT_SM8X = {(8, 0): 163 * 1024, (8, 7): 163 * 1024}
SMEM_LIMIT_SM8X_OTHER = 99 * 1024
#: Registers a consumer needs besides its accumulator (measured: 168 for a 128-register
#: accumulator with 0 spills; ptxas asked for 154 with a 64x256 one under a 152 cap).
ACC_OVERHEAD = 32


def smem_limit(cc):
    """Opt-in dynamic shared memory per block of compute capability ``cc`` (bytes)."""
    if tuple(cc[:2]) >= (9, 0):
        return SMEM_LIMIT
    return SMEM_LIMIT_SM8X.get(tuple(cc[:2]), SMEM_LIMIT_SM8X_OTHER)


def consumer_register_limit(plan):
    """Registers per consumer thread: reg_inc_consumer after setmaxnreg (sm_90a, G > 1),
    else the entry limit (255 for one consumer group on sm_90; R below sm_90)."""
    if plan.cc[0] < 9:
        return plan.entry_registers
    return plan.options.reg_inc_consumer if plan.num_consumers > 1 else 255


def dot_shapes(func_ir, typemap):
    """(loc, a_shape, b_shape) of every dot in the partitioned IR."""
    out = []
    for block in func_ir.blocks.values():
        for stmt in block.body:
            if tile_op(stmt, typemap) == "dot":
                a, b = (typemap[v.name] for v in stmt.value.args[:2])
                if isinstance(a, TileType) and isinstance(b, TileType):
                    out.append((stmt.loc, a.shape, b.shape))
    return out


@ws_pass
class VerifySchedule(WSPass):
    _name = "ws_verify"

    def run(self, state):
        plan = state.ws
        if plan.cc[0] < 8:
            raise self.error(f"sm_{plan.cc[0]}{plan.cc[1]}: the GPU path needs sm_80 or newer "
                             "(cp.async, mbarrier, mma.sync); run it in the interpreter")
        limit = smem_limit(plan.cc)
        if plan.smem_bytes > limit:
            detail = "; ".join(f"channel {c.id}: {c.num_slots} x {c.slot_bytes} B"
                               for c in plan.channels)
            raise WSResourceError(
                f"shared memory: {plan.smem_bytes} bytes needed ({detail}), the limit per "
                f"block is {limit} bytes on sm_{plan.cc[0]}{plan.cc[1]}. Lower "
                "num_buffers_warp_spec or the block sizes",
                pass_name=self._name)
        limit = consumer_register_limit(plan)
        knob = "reg_inc_consumer" if plan.cc[0] >= 9 else "no setmaxnreg below sm_90"
        for loc, (m, k), (_, n) in dot_shapes(state.func_ir, state.typemap):
            acc_regs = m * n // 128
            if acc_regs + ACC_OVERHEAD > limit:
                raise WSResourceError(
                    f"registers: a ({m}, {n}) float32 accumulator takes {acc_regs} registers "
                    f"per consumer thread (+~{ACC_OVERHEAD} for addresses and loop state), "
                    f"over the consumers' limit of {limit} ({knob}). Use smaller "
                    "tiles or more consumer groups"
                    + (" or a larger reg_inc_consumer" if plan.cc[0] >= 9 else ""),
                    loc=loc, pass_name=self._name)
            if m % 64 or k % 16 or n % 8:
                raise self.error(
                    f"dot of ({m}, {k}) @ ({k}, {n}) per consumer: the tensor cores need M a "
                    "multiple of 64, K a multiple of 16 and N a multiple of 8", loc)
        for ch in plan.channels:
            arrivals = 1 if ch.ping_pong else len(ch.consumers)
            if not ch.consumers or ch.num_slots < 1 or ch.arrivals != arrivals:
                raise self.error(f"inconsistent channel: {ch.describe()}")
            for member in ch.members:
                for part in member["parts"]:
                    rows = part.get("phys", part["shape"])[0]
                    if ch.lowering == "tma" and rows > 256:
                        raise self.error(
                            f"tile {member['var']}: {rows} rows per part, a TMA box holds "
                            "at most 256", ch.loads[0].loc)
