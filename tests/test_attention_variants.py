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
from ptx_tools import assemble, resources

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


@pytest.mark.parametrize("case,groups", ALL, ids=IDS)
def test_ptx_assembles_without_spills(case, groups, tmp_path):
    args, _ = case.make(np.random.default_rng(0))
    launch, _ = kt.host_args(args)
    ptx = ws.jit(case.kernel).inspect_ptx(*launch, num_consumer_groups=groups, **case.meta)
    assert "wgmma.mma_async" in ptx and "ex2.approx" in ptx
    regs, spills, stack = resources(assemble(ptx, tmp_path, "sm_90a"))
    assert spills == [0, 0] and stack == 0, (regs, spills, stack)

