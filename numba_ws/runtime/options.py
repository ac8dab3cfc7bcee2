"""Warp-specialization launch options (the seed's ``triton.Config`` knobs), validated.

Invariant: an ``Options`` instance is always valid on its own (ranges, multiples of 8);
budgets that depend on the kernel (registers per CTA, shared memory) are checked by the
``registers`` and ``verify`` passes.
"""
from dataclasses import dataclass, fields, asdict

from ..errors import WSUsageError

#: Registers per SM on sm_90 (64K 32-bit registers).
REGISTER_FILE = 65536

#: The values of option ``tma_store`` (``passes/staged_stores.py``).
TMA_STORE_DIRECT, TMA_STORE_ALL, TMA_STORE_EDGES, TMA_STORE_WHERE_SAFE = 0, 1, 2, 3


def default_registers(groups, dec=None):
    """(producer, consumer) ``setmaxnreg`` targets when the launch names none: 40 / 232
    for one or two consumer groups (384 threads start at 168 registers); from three on,
    24 for the producer (it only issues TMA) and the most each consumer group can take
    from what is left: 160 for three groups (512 threads), 112 for four (640 threads:
    65536 / 640 rounds down to 96 a thread at launch). ``dec``: the producer's, when the
    launch names it."""
    if not isinstance(groups, int) or groups <= 2:
        return (40 if dec is None else dec), 232
    dec = 24 if dec is None else dec
    if not isinstance(dec, int):          # refused by Options' own checks
        return dec, 232
    threads = 128 * (1 + groups)
    entry = min(255, REGISTER_FILE // threads) // 8 * 8
    return dec, max(24, min(256, (entry * threads - 128 * dec) // (128 * groups) // 8 * 8))


@dataclass(frozen=True)
class Options:
    num_consumer_groups: int = 2
    num_buffers_warp_spec: int = 3
    #: ``setmaxnreg`` targets; None (the default): :func:`default_registers`.
    reg_dec_producer: int = None
    reg_inc_consumer: int = None
    #: 1: a GEMM main-loop dot stays in flight while the previous slot is released
    #: (wgmma.wait_group 1); 0: wait for every dot before releasing its slot. 0 by
    #: default: with 1, ptxas 13.0 serialises the wgmmas (warning C7514) and the H200
    #: measured it slower (BENCHMARKS.md).
    dot_in_flight: int = 0
    #: 1: ping-pong consumers (CUTLASS's Pingpong): consumer group g takes every G-th
    #: iteration of the persistent tile loop and computes whole tiles, so one group's
    #: epilogue overlaps another's main loop; each group has its own ring of
    #: num_buffers_warp_spec slots. 0: the groups split every tile (cooperative).
    ping_pong: int = 0
    #: 1: the consumer groups take turns issuing the first dot of each iteration of the
    #: loop around the loads (turn barriers; FA3's warp-group ping-pong): one group's
    #: element-wise work (attention's softmax) runs while the next group's dot holds the
    #: tensor cores. Non-persistent kernels (with ping_pong=1 the groups already take turns).
    dot_turns: int = 0
    #: 1: the consumer groups of a cooperative kernel run one copy of the consumer code,
    #: each taking its slice (shared-memory part, store rows) by its warp-group index at
    #: run time: half the consumer PTX for 2 groups, so NVVM and ptxas take ~0.6x the
    #: time. 0: one clone per group with constant offsets (the layout before 2026-12-06).
    #: Ping-pong, dot turns and kernels whose groups do not all run the same statements
    #: always get one clone per group.
    shared_consumer_body: int = 1
    #: NVVM's optimisation level (``-opt=N``), 1..3. At 3 (numba-cuda's default) NVVM
    #: unrolls the producer's load loop 4x; at 1 it does not: the 128x256 GEMM's PTX
    #: 89 -> 80 KB, NVVM 0.16 -> 0.12 s, ptxas 0.19 -> 0.17 s (CPU VM, 2026-12-06).
    #: On the H100 1 ran the GEMMs 1-4 % and D64 attention 4 % slower, D128 non-causal
    #: attention 1-5 % faster, causal -2 to +1.5 % (BENCHMARKS.md, 2026-12-06), so 3
    #: stays the default. 0 leaves locals in memory (a 696-byte stack
    #: frame), so it is refused.
    nvvm_opt: int = 3
    #: How an accumulator stored to a 2-byte array TMA can write leaves (sm_90,
    #: ``passes/staged_stores.py``): 1: every tile through a shared-memory staging buffer
    #: and TMA stores, so a persistent kernel's consumers start the next tile while the
    #: copy engine writes this one (the buffer takes rows x columns x 2 bytes per
    #: consumer group, in column chunks when shared memory is short); 2: only the edge
    #: tiles the consumers' vector stores cannot take (TMA clips them) instead of
    #: unrolled bounds-checked scalar stores: smaller PTX, interior tiles unchanged;
    #: 3 (the default): as 1 for the stores outside loops, where that costs no CTA per SM
    #: and the kernel does not also read or write the same array
    #: (``passes/staged_stores.py``): the one-tile-per-program GEMM's PTX 89 -> 57 KB,
    #: ptxas 0.23 -> 0.14 s, a second specialization 0.38 -> 0.29 s (CPU VM, 2026-12-07);
    #: 0: the consumers' own st.global stores only.
    tma_store: int = TMA_STORE_WHERE_SAFE
    #: 1: a loop's last dot is issued one iteration late, right after the next
    #: iteration's first dot (``passes/lag_last_dot.py``; FA3's intra-warpgroup overlap
    #: for the plain flash-attention program: block j's softmax runs while block j-1's
    #: ``p @ v`` holds the tensor cores). Use it without ``dot_in_flight`` (which would
    #: wait right after the first dot); loops of another shape are left as they are.
    #: Default 0: within noise of the plain program at D128 (H100, 2026-12-07 03:20).
    lag_last_dot: int = 0
    #: 1: where every staged dot B is a float32 slot part copied K-major (a tf32 dot of a
    #: row-major b) and the consumer groups split M, they write one operand buffer
    #: together (each 1 / G of it, a named barrier over all groups; ``_stage_shared`` in
    #: passes/layouts.py); 0: each group copies the whole B into its own buffer (the
    #: groups' copies and dots may then overlap). Default 0: 1 is not yet run on a GPU
    #: (no device after 00:40 on 2026-12-08); 0 passed tests/gpu/test_tf32_gpu.py.
    shared_operand_buffer: int = 0

    def __post_init__(self):
        dec, inc = default_registers(self.num_consumer_groups, self.reg_dec_producer)
        if self.reg_dec_producer is None:
            object.__setattr__(self, "reg_dec_producer", dec)
        if self.reg_inc_consumer is None:
            object.__setattr__(self, "reg_inc_consumer", inc)

        def need(cond, name, what):
            if not cond:
                raise WSUsageError(f"{name}={getattr(self, name)!r}: expected {what}")
        for f in fields(self):
            v = getattr(self, f.name)
            need(isinstance(v, int) and not isinstance(v, bool), f.name, "an int")
        need(1 <= self.num_consumer_groups <= 4, "num_consumer_groups", "1..4")
        need(1 <= self.num_buffers_warp_spec <= 8, "num_buffers_warp_spec", "1..8")
        need(self.dot_in_flight in (0, 1), "dot_in_flight", "0 or 1")
        need(self.ping_pong in (0, 1), "ping_pong", "0 or 1")
        need(not self.ping_pong or self.num_consumer_groups >= 2, "ping_pong",
             "0 with num_consumer_groups=1 (ping-pong alternates tiles between >= 2 groups)")
        need(self.dot_turns in (0, 1), "dot_turns", "0 or 1")
        need(self.shared_consumer_body in (0, 1), "shared_consumer_body", "0 or 1")
        need(self.tma_store in (TMA_STORE_DIRECT, TMA_STORE_ALL, TMA_STORE_EDGES,
                             TMA_STORE_WHERE_SAFE), "tma_store", "0, 1, 2 or 3")
        need(self.lag_last_dot in (0, 1), "lag_last_dot", "0 or 1")
        need(self.shared_operand_buffer in (0, 1), "shared_operand_buffer", "0 or 1")
        need(1 <= self.nvvm_opt <= 3, "nvvm_opt",
             "1..3 (NVVM -opt level; 0 keeps locals on the stack)")
        need(not self.dot_turns or self.num_consumer_groups >= 2, "dot_turns",
             "0 with num_consumer_groups=1 (turns alternate between >= 2 groups)")
        need(not (self.dot_turns and self.ping_pong), "dot_turns",
             "0 with ping_pong=1 (ping-pong groups already take turns at the work loop)")
        for name in ("reg_dec_producer", "reg_inc_consumer"):
            v = getattr(self, name)
            need(24 <= v <= 256 and v % 8 == 0, name,
                 "a multiple of 8 in [24, 256] (setmaxnreg's range)")

    @property
    def num_threads(self):
        """Threads per CTA: one producer warp group plus G consumer warp groups."""
        return 128 * (1 + self.num_consumer_groups)

    def as_dict(self):
        return asdict(self)

    @classmethod
    def names(cls):
        return tuple(f.name for f in fields(cls))

    @classmethod
    def pop_from(cls, meta: dict):
        """Take the option keys out of ``meta`` (a launch's keyword dict) and build Options."""
        kw = {n: meta.pop(n) for n in cls.names() if n in meta}
        return cls(**kw)
