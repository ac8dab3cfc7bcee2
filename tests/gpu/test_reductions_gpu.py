"""Issue 15 item 4 on the GPU: the NumPy / Triton-style reduction kernels of
tests/kernels_reduce.py (the reduced axis dropped, ``keepdims=True``, ``axis=None`` to a
scalar, ``ws.squeeze``, 1-D results stored as 1-D tiles) against float64 references, on
fresh random inputs with NaN-poisoned outputs and guard rows, ragged shapes (masked
softmax over N = 100 and 77 in 128-wide tiles, 300 x 200 tiles of 64 x 64, a GEMM of
300 x 200 x 136), fp16 / bf16 outputs in the input dtype.

Every case with 1 and 2 consumer groups (kernels whose reduced axis is the split one
fall back to one group, with the warning), and each case once compiled for sm_80
(``NUMBA_WS_CC=8.0``). About 36 compiles.
"""
import numpy as np
import pytest

import kernels_reduce as kr

cp = pytest.importorskip("cupy")
import case_runner  # noqa: E402  (after the skip: it imports cupy)

ALL = list(kr.CASES.values())
KERNELS = {}

pytestmark = pytest.mark.filterwarnings(
    "ignore::numba_ws.passes.data_partition.PartitionFallbackWarning")


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_kernel_on_gpu(case, groups, seed):
    case_runner.run_on_gpu(case, groups, seed, KERNELS)


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_kernel_compiled_for_sm80(case, seed, monkeypatch):
    monkeypatch.setenv("NUMBA_WS_CC", "8.0")
    case_runner.run_on_gpu(case, 2, seed, {})
