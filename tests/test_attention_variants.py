"""Issue 18 items 1 and 3 without a GPU: ``examples.attention_fwd`` (causal or not, head
dims 64 / 128 / 256, fp16 / bf16, ragged sequence lengths, grouped-query attention, the
log-sum-exp output) in the interpreter against float64, ``ws.verify`` of the partitioned
program, and its PTX through ptxas with no spills. tests/gpu/test_attention_variants_gpu.py
runs the same cases on the H200.
"""
import numpy as np
import pytest

import numba_ws as ws

import kernels_attention as ka
import kernels_tiles as kt
from ptx_tools import assemble, resources, same_code

TWO = list(ka.CASES.values())
ONE = list(ka.ONE_GROUP.values())
ALL = [(c, 2) for c in TWO] + [(c, 1) for c in ONE]
IDS = [f"{c.name}-g{g}" for c, g in ALL]


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


@pytest.mark.parametrize("case", TWO + ONE, ids=[c.name for c in TWO + ONE])
def test_interpreter_matches_float64(case, seed):
    args, grid = case.make(np.random.default_rng(seed))
    launch, outs = kt.host_args(args)
    ws.jit(case.kernel)[grid](*launch, **case.meta)
    for i, (out, base) in enumerate(outs):
        out.check(base, f"{case.name} output {i} (seed {seed})")


def test_poisoned_v_check_can_fail():
    """The diagonal check is real: a kernel that loads every key block (no causal stop)
    reads the NaN rows of v into rows that must come out finite."""
    case = ka.CASES["attention-causal-float16-d64-s384-nan-v128-128x64"]
    args, grid = case.make(np.random.default_rng(1))
    launch, outs = kt.host_args(args)
    meta = dict(case.meta, CAUSAL=False)
    ws.jit(case.kernel)[grid](*launch, **meta)
    with pytest.raises(AssertionError, match="NaN where they should not"):
        outs[0][0].check(outs[0][1])


@pytest.mark.parametrize("case,groups", [(ka.CASES["attention-causal-bfloat16-d128-s200-128x64"], 2),
                                         (ka.ONE_GROUP["attention-full-float16-d128-s130-gqa4:1-64x64"], 1)],
                         ids=["causal-bf16-g2", "gqa-g1"])
def test_verify_is_clean(case, groups):
    args, grid = case.make(np.random.default_rng(0))
    launch, _ = kt.host_args(args)
    report = ws.verify(case.kernel, grid, *launch, seeds=1, max_programs=2, exact=False,
                       num_consumer_groups=groups, **case.meta)
    assert report.ok, str(report)


#: Known spills (bytes stored, loaded) with the shared consumer body (the default), with
#: none with one clone per group: in this persistent case ptxas 13.0 moves the producer's
#: tile arithmetic (five 64-bit divisions per tile) off the uniform datapath and, at the
#: producer's 40 registers, spills one 64-bit value per tile (an STL before the tile loop,
#: an LDL per tile). The PTX of the producer is the same instructions either way.
KNOWN_SHARED_BODY_SPILLS = {"attention-full-bfloat16-d64-s256-128x128-p4": [8, 8]}


@pytest.mark.parametrize("case,groups", ALL, ids=IDS)
def test_ptx_assembles_without_spills(case, groups, tmp_path):
    args, _ = case.make(np.random.default_rng(0))
    launch, _ = kt.host_args(args)
    ptx = ws.jit(case.kernel).inspect_ptx(*launch, num_consumer_groups=groups, **case.meta)
    assert "wgmma.mma_async" in ptx and "ex2.approx" in ptx
    regs, spills, stack = resources(assemble(ptx, tmp_path, "sm_90a"))
    known = KNOWN_SHARED_BODY_SPILLS.get(case.name) if groups == 2 else None
    if known is None:
        assert spills == [0, 0] and stack == 0, (regs, spills, stack)
        return
    assert spills == known, (regs, spills, stack)      # no worse than known
    ptx = ws.jit(case.kernel).inspect_ptx(*launch, num_consumer_groups=groups,
                                          shared_consumer_body=0, **case.meta)
    regs, spills, stack = resources(assemble(ptx, tmp_path, "sm_90a"))
    assert spills == [0, 0] and stack == 0, (regs, spills, stack)



# == schedule options: dot_in_flight (PV in flight past its release), dot_turns ==========

SCHEDULES = {"turns": dict(dot_turns=1),
             "in-flight": dict(dot_in_flight=1, num_buffers_warp_spec=3),
             "turns+in-flight": dict(dot_turns=1, dot_in_flight=1, num_buffers_warp_spec=3),
             "lag": dict(lag_last_dot=1, num_buffers_warp_spec=2),
             "lag+in-flight": dict(lag_last_dot=1, dot_in_flight=1, num_buffers_warp_spec=2),
             "lag+turns": dict(lag_last_dot=1, num_buffers_warp_spec=2, dot_turns=1)}


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("name", ["attention-causal-bfloat16-d128-s200-128x64",
                                  "attention-causal-float16-d64-s384-nan-v128-128x64"])
def test_schedule_verify_is_clean(name, schedule):
    case = ka.CASES[name]
    args, grid = case.make(np.random.default_rng(0))
    launch, _ = kt.host_args(args)
    meta = dict(case.meta, **SCHEDULES[schedule])
    report = ws.verify(case.kernel, grid, *launch, seeds=2, max_programs=2, exact=False,
                       **meta)
    assert report.ok, str(report)


def _ptx(case, **extra):
    args, _ = case.make(np.random.default_rng(0))
    launch, _ = kt.host_args(args)
    return ws.jit(case.kernel).inspect_ptx(*launch, **dict(case.meta, **extra))


def test_dot_turns_ptx(tmp_path):
    """Two turn barriers more (mbarrier.init), a wait and a hand-over around the q k^T
    wgmma of each group, no spills."""
    case = ka.CASES["attention-full-float16-d128-s333-gqa4:2-128x64"]
    # dot turns keep one clone per consumer group: compare with the cloned plain program
    plain, turns = _ptx(case, shared_consumer_body=0), _ptx(case, dot_turns=1)
    count = lambda ptx, s: ptx.count(s)  # noqa: E731
    assert count(turns, "mbarrier.init") == count(plain, "mbarrier.init") + 2
    assert count(turns, "mbarrier.try_wait") == count(plain, "mbarrier.try_wait") + 2
    assert count(turns, "mbarrier.arrive.shared") == count(plain, "mbarrier.arrive.shared") + 2
    regs, spills, stack = resources(assemble(turns, tmp_path, "sm_90a"))
    assert spills == [0, 0] and stack == 0


def test_dot_in_flight_releases_one_iteration_later():
    """The key loop ends with wgmma.wait_group 1 (the PV dot stays in flight) instead of
    wait_group 0 before the slot release."""
    case = ka.CASES["attention-full-float16-d64-s256-128x128"]
    plain = _ptx(case, num_buffers_warp_spec=3)
    deferred = _ptx(case, num_buffers_warp_spec=3, dot_in_flight=1)
    assert "wgmma.wait_group.sync.aligned 1;" not in plain
    assert deferred.count("wgmma.wait_group.sync.aligned 1;") == 1   # the shared consumer body


@pytest.mark.parametrize("name", ["attention-causal-bfloat16-d128-s333-gqa4:2-128x128-pipelined",
                                  "attention-full-float16-d64-s200-128x128-pipelined"])
def test_the_pipelined_program_keeps_the_next_scores_in_flight(name):
    """attention_fwd_pipelined's softmax of block j waits with wgmma.wait_group 1 (block
    j+1's q k^T stays in flight) on both sides of its runtime ``if j >= mask_from`` (the
    blocks of the ``if`` inherit the dot in flight), causal or not."""
    ptx = _ptx(ka.CASES[name])
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 2     # the shared body's branches


@pytest.mark.parametrize("opts,what", [(dict(num_consumer_groups=1, dot_turns=1), ">= 2 groups"),
                                       (dict(ping_pong=1, dot_turns=1), "ping_pong=1"),
                                       (dict(dot_turns=2), "0 or 1")])
def test_dot_turns_option_errors(opts, what):
    from numba_ws.runtime.options import Options
    with pytest.raises(ws.WSUsageError, match="dot_turns") as e:
        Options(**opts)
    assert what in str(e.value)


def dot_only_in_if(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (0, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, 0), (BK, BN))
        if k % 2 == 0:
            acc = ws.dot(x, y, acc)
    ws.store(c, (0, 0), acc)


def test_dot_turns_needs_a_dot_on_every_iteration():
    a, b = np.zeros((128, 256), np.float16), np.zeros((256, 128), np.float16)
    c = np.zeros((128, 128), np.float16)
    with pytest.raises(ws.WSCompileError, match="dot_turns=1 needs a ws.dot that runs on "
                       "every iteration") as e:
        ws.jit(dot_only_in_if).inspect_ptx(a, b, c, BM=128, BN=128, BK=64, dot_turns=1)
    assert "test_attention_variants.py" in str(e.value)


@pytest.mark.parametrize("seq,BM,programs", [(4096, 128, 132), (2048, 128, 132),
                                              (333, 128, 5), (100, 64, 1), (128, 128, 132)])
def test_persistent_head_group_covers_the_programs_in_flight(seq, BM, programs):
    """``head_group`` heads of query blocks hold the ``programs`` tiles in flight, with
    less than one head to spare (so they read few heads' keys and values)."""
    from numba_ws import examples
    group, blocks = examples.persistent_head_group(seq, BM, programs), -(-seq // BM)
    assert group >= 1 and group * blocks >= programs
    assert group == 1 or (group - 1) * blocks < programs


#: (cases, consumer groups, register split): FA3's tiles, BM=192 over three groups at D64
#: and key blocks of 176 / 192 at D128
WIDE_TILES = {name: (ka.THREE_GROUPS[name], 3, ka.THREE_GROUP_REGS)
              for name in list(ka.THREE_GROUPS)[:2]}
WIDE_TILES.update({name: (ka.WIDE_KEYS[name], 2, ka.WIDE_KEY_REGS)
                   for name in list(ka.WIDE_KEYS)[:2]})


@pytest.mark.parametrize("name", list(WIDE_TILES))
def test_wide_tiles_verify_is_clean(name):
    case, groups, regs = WIDE_TILES[name]
    args, grid = case.make(np.random.default_rng(0))
    launch, _ = kt.host_args(args)
    report = ws.verify(case.kernel, grid, *launch, seeds=2, max_programs=2, exact=False,
                       num_consumer_groups=groups, **case.meta, **regs)
    assert report.ok, str(report)


def test_three_groups_default_registers_are_the_benchmarked_split():
    """num_consumer_groups=3 without register options compiles to the PTX of the
    benchmark's explicit 24 / 160 split (the GPU tests and the benchmark pass it)."""
    case = ka.THREE_GROUPS["attention-full-float16-d64-s500-192x128"]
    default = _ptx(case, num_consumer_groups=3)
    assert same_code(default) == same_code(_ptx(case, num_consumer_groups=3,
                                                **ka.THREE_GROUP_REGS))
    assert "setmaxnreg.inc.sync.aligned.u32 160;" in default
    assert "setmaxnreg.dec.sync.aligned.u32 24;" in default
