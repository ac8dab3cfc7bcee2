"""Issue 18 items 1 and 3 on the GPU: every case of tests/kernels_attention.py
(``examples.attention_fwd``: causal and not, D 64 / 128 / 256, fp16 / bf16 in and out,
ragged sequence lengths, grouped-query attention, log-sum-exp) on fresh random inputs,
outputs NaN-poisoned with guard rows, against float64; two consumer groups with BM=128,
one with BM=64; three with BM=192 (D=64, 128) and key blocks of 176 / 192 at D=128
(``test_wide_tiles``). The ``nan-v`` cases check that the causal key loop stops at the diagonal.
"""
import dataclasses

import numpy as np
import pytest

import kernels_attention as ka

cp = pytest.importorskip("cupy")
import case_runner  # noqa: E402  (after the skip: it imports cupy)

KERNELS = {}


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


@pytest.mark.parametrize("case", list(ka.CASES.values()), ids=list(ka.CASES))
def test_two_groups(case, seed):
    case_runner.run_on_gpu(case, 2, seed, KERNELS)


@pytest.mark.parametrize("case", list(ka.ONE_GROUP.values()), ids=list(ka.ONE_GROUP))
def test_one_group(case, seed):
    case_runner.run_on_gpu(case, 1, seed, KERNELS)


#: the schedule options of the attention benchmark: dot turns, the PV dot in flight, the
#: PV dot lagged one iteration (passes/lag_last_dot.py)
SCHEDULES = {"turns": dict(dot_turns=1),
             "in-flight": dict(dot_in_flight=1, num_buffers_warp_spec=3),
             "turns+in-flight": dict(dot_turns=1, dot_in_flight=1, num_buffers_warp_spec=3),
             "lag": dict(lag_last_dot=1, num_buffers_warp_spec=2),
             "lag+in-flight": dict(lag_last_dot=1, dot_in_flight=1, num_buffers_warp_spec=2),
             "lag+turns": dict(lag_last_dot=1, num_buffers_warp_spec=2, dot_turns=1)}
SCHEDULED = ["attention-causal-bfloat16-d128-s200-128x64",
             "attention-causal-bfloat16-d64-s77-gqa3:1-128x128",
             "attention-causal-float16-d64-s384-nan-v128-128x64",
             "attention-full-float16-d128-s333-gqa4:2-128x64",
             "attention-full-float16-d64-s256-128x128"]


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("name", SCHEDULED)
def test_schedules(name, schedule, seed):
    base = ka.CASES[name]
    case = dataclasses.replace(base, name=f"{name}-{schedule}",
                               meta=dict(base.meta, **SCHEDULES[schedule]))
    case_runner.run_on_gpu(case, 2, seed, KERNELS)


@pytest.mark.parametrize("name", ["attention-causal-bfloat16-d64-s200-64x128",
                                  "attention-full-float16-d128-s130-gqa4:1-64x64",
                                  "attention-causal-float16-d128-s256-nan-v128-64x64"])
def test_lag_one_group(name, seed):
    base = ka.ONE_GROUP[name]
    case = dataclasses.replace(base, name=f"{name}-lag",
                               meta=dict(base.meta, lag_last_dot=1, num_buffers_warp_spec=2))
    case_runner.run_on_gpu(case, 1, seed, KERNELS)


#: (case, consumer groups, register split): BM=192 over three consumer groups (D=64, 128;
#: the default split, 24 / 160) and key blocks of 176 / 192 (D=128), FA3's tiles
WIDE_TILES = {**{n: (c, 3, {}) for n, c in ka.THREE_GROUPS.items()},
              **{n: (c, 2, ka.WIDE_KEY_REGS) for n, c in ka.WIDE_KEYS.items()}}


@pytest.mark.parametrize("name", list(WIDE_TILES))
def test_wide_tiles(name, seed):
    base, groups, regs = WIDE_TILES[name]
    case = dataclasses.replace(base, meta=dict(base.meta, **regs))
    case_runner.run_on_gpu(case, groups, seed, KERNELS)
