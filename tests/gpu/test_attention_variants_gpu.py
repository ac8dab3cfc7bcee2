"""Issue 18 items 1 and 3 on the GPU: every case of tests/kernels_attention.py
(``examples.attention_fwd``: causal and not, D 64 / 128 / 256, fp16 / bf16 in and out,
ragged sequence lengths, grouped-query attention, log-sum-exp) on fresh random inputs,
outputs NaN-poisoned with guard rows, against float64; two consumer groups with BM=128,
one with BM=64. The ``nan-v`` cases check that the causal key loop stops at the diagonal.
"""
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
