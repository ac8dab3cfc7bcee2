"""What the warp-specialization stage knows about one kernel (``state.ws``).

Invariants:
- ``tasks`` maps ``id(stmt)`` of every statement of the *original* typed IR to a frozenset
  of task ids (0 = producer, 1..G = consumers); ``stmts`` keeps those statements alive.
- ``split`` maps a tile variable name to the tile dimension that data partitioning splits
  across consumers (0 = M, 1 = N) or None when every consumer needs the whole tile.
- ``channels`` are found by code partitioning; channel ids are their index.
"""
from dataclasses import dataclass, field

from ..runtime.options import TMA_STORE_EDGES


@dataclass
class Channel:
    """Producer -> consumers link for one group of loads issued together.

    ``loads``: the load statements (original IR) in this group; ``consumers``: task ids
    reading it; ``num_slots``: ring depth (num_buffers_warp_spec inside a loop, else 1);
    ``slot_bytes``: bytes of one slot (all loads of the group, all slices);
    ``arrivals``: arrivals the empty barrier expects per phase (one per consumer group);
    ``lowering``: 'tma', 'cp.async', 'ld.global' or 'cp.async+ld.global' (set by
    lower_loads; each member's ``path`` and ``why`` say which and why); ``smem_offset``: byte offset of
    slot 0 in dynamic shared memory; ``bar_offset``: byte offset of full[0] (then empty).
    ``ping_pong``: consumer groups take turns at the ring (``passes/ping_pong.py``): each
    fill is waited on and released by one group, whichever's turn it is (``arrivals`` = 1).
    """
    id: int
    loads: list
    consumers: tuple
    in_loop: bool
    num_slots: int
    block_label: int
    slot_bytes: int = 0
    arrivals: int = 1
    ping_pong: bool = False
    lowering: str = ""
    smem_offset: int = 0
    bar_offset: int = 0
    members: list = field(default_factory=list)   # per load: dict(var, array, dtype, parts...)

    def part(self, part_id):
        """(member, part) of a channel-wide part id (parts numbered in member order)."""
        for member in self.members:
            for part in member["parts"]:
                if part["id"] == part_id:
                    return member, part
        raise KeyError(part_id)

    @property
    def tx_bytes(self):
        return sum(p["bytes"] for m in self.members for p in m["parts"])

    def describe(self):
        names = ", ".join(m["var"] + (" (column-major: transposed view)"
                                      if m.get("transposed") else "")
                          for m in self.members) or "?"
        turns = " (taking turns, ping-pong)" if self.ping_pong else ""
        return (f"channel {self.id}: {names} -> tasks {list(self.consumers)}{turns}; "
                f"{self.num_slots} slot(s) x {self.slot_bytes} B, {self.lowering or 'unlowered'}, "
                f"full/empty barriers, empty expects {self.arrivals} arrival(s)")


@dataclass
class Plan:
    kernel_name: str
    options: object
    constexprs: dict
    cc: tuple = (9, 0)
    array_info: dict = field(default_factory=dict)   # arg name -> dict(tma_ok=bool, why=str)
    anchors: dict = field(default_factory=dict)      # id(stmt) -> op name
    tasks: dict = field(default_factory=dict)        # id(stmt) -> frozenset
    stmts: dict = field(default_factory=dict)        # id(stmt) -> (stmt, block label)
    tasks_before_partition: dict = field(default_factory=dict)
    split: dict = field(default_factory=dict)        # var name -> dim or None
    partition_dim: object = None                     # 'M', 'N' or None (G == 1)
    slice_size: int = 0
    split_source: str = ""   # 'dot': M-else-N of the dot results; 'rows': no dot, stored rows
    channels: list = field(default_factory=list)
    smem_bytes: int = 0
    branches: dict = field(default_factory=dict)     # task id -> entry label of its branch
    timings: list = field(default_factory=list)
    original_ir: object = None
    original_typemap: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    tmaps: list = field(default_factory=list)   # (array arg, box rows, box cols, transposed)
    fused: bool = False        # NUMBA_WS_DISABLE: one warp group plays every task in turn
    entry_registers: int = 0
    turn_offset: int = 0       # ping-pong / dot turns: G turn barriers, then G tokens (lower_loads)
    staged: dict = field(default_factory=dict)   # staged store target -> chunk columns
    staging_offset: int = 0    # the staged stores' buffer: group_regions x staging_bytes
    staging_bytes: int = 0
    stage_offset: int = 0      # staged dot B operands (layouts pass): stage_regions x stage_bytes
    stage_bytes: int = 0
    stage_shared: int = 0      # > 1: that many consumer groups share one region (tf32 B copies)

    @property
    def num_consumers(self):
        return self.options.num_consumer_groups

    @property
    def ping_pong(self):
        """Consumer groups alternate whole tiles of the persistent loop (option ping_pong)."""
        return bool(self.options.ping_pong) and not self.fused

    @property
    def dot_turns(self):
        """Consumer groups take turns at each iteration's first dot (option dot_turns)."""
        return bool(self.options.dot_turns) and not self.fused

    @property
    def turns(self):
        """Whether the kernel has turn barriers (ping-pong or dot turns)."""
        return self.ping_pong or self.dot_turns

    @property
    def stage_regions(self):
        """Regions of the staged dot operands: one shared by the groups, else one each."""
        return 1 if self.stage_shared > 1 else self.group_regions

    @property
    def group_regions(self):
        """Per-consumer-group regions of shared memory (layout scratch, store staging):
        one per consumer group, one when fused."""
        return 1 if self.fused else self.num_consumers

    @property
    def first_consumer_group(self):
        """Warp-group index (tid.x / 128) of the first consumer group."""
        return 0 if self.fused else 1

    @property
    def staging_edge_only(self):
        """tma_store=2: only edge tiles take the staged path."""
        return self.options.tma_store == TMA_STORE_EDGES

    @property
    def consumer_tasks(self):
        return tuple(range(1, self.num_consumers + 1))

    @property
    def num_threads(self):
        """Threads per CTA: 128 per warp group (a single group when fused)."""
        return 128 if self.fused else self.options.num_threads
