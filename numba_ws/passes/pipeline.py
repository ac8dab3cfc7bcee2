"""The pipeline order of the warp-specialization stage, in one list.

The stage runs inside numba-cuda's compiler right after type inference (and phi
stripping, so that cloning blocks per task is plain copying); later numba-cuda passes and
its NVVM backend build the kernel.
"""
from .anchors import FindAnchors
from .tasks import AssignTasks
from .data_partition import PartitionData
from .code_partition import PartitionCode
from .lower_loads import LowerLoads
from .registers import ReallocRegisters
from .layouts import AssignLayouts
from .staged_stores import StageStores
from .verify import VerifySchedule
from .lower_tiles import LowerTiles

#: (pass class, what it does) in execution order.
PIPELINE = [
    (FindAnchors, "find anchor ops: loads -> producer, dot/store -> consumers"),
    (AssignTasks, "propagate async tasks by the seed's three rules"),
    (PartitionData, "split consumer work across consumer groups along M, else N"),
    (PartitionCode, "channels, one cloned body per task, barrier ops, warp-group dispatch"),
    (LowerLoads, "TMA, cp.async or ld.global per load; shared-memory layout of slots, barriers"),
    (ReallocRegisters, "setmaxnreg at the head of each warp group's branch; budget check"),
    (AssignLayouts, "register layouts; shared-memory reads and layout conversions; scratch"),
    (StageStores, "accumulator stores through a shared-memory buffer + TMA (tma_store)"),
    (VerifySchedule, "shared-memory budget and tensor-core shape checks"),
    (LowerTiles, "tile and channel ops -> wgmma / TMA / mbarrier intrinsics; retype"),
]

#: Where an analysis-only compile (explain) stops.
ANALYSIS_END = "ws_data_partition"
#: Where the partitioned program (for the schedule simulator and explain) is complete.
PARTITIONED_END = "ws_verify"


def pass_names():
    return [cls._name for cls, _ in PIPELINE]
