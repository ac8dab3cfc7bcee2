"""Issue 15 items 1-2 on the GPU: the kernels of tests/kernels_masks.py (index tiles,
comparisons, boolean tiles, ``ws.where``, masked loads and stores) against float64
references, with ``num_consumer_groups`` 1 and 2.

Every launch draws fresh random inputs (the seed is in each failure message). Outputs
start as NaN (int outputs as ``kernels_tiles.INT_POISON``) with poisoned guard rows;
where a masked store must leave an element alone, its reference is NaN and the poison
must still be there (``kernels_masks.Partial``). Shapes are ragged: softmax and layer
norm with N = 100, 77, 33 in 128-wide tiles (mask + ``other=-inf`` / ``other=0``),
element-wise kernels on 300 x 200 with 64 x 64 tiles, GEMMs 300 x 200 x 136, causal
attention with 2 heads of 256 and 1 head of 128.

Each kernel's first case runs with 1 and 2 consumer groups, its other cases with 2; a
few also compiled for sm_80 (``NUMBA_WS_CC=8.0``). About 70 compiles.
"""
import numpy as np
import pytest

import kernels_masks as km

cp = pytest.importorskip("cupy")
import case_runner  # noqa: E402  (after the skip: it imports cupy)

ALL = list(km.CASES.values())
FIRST = [c for i, c in enumerate(ALL) if all(d.kernel is not c.kernel for d in ALL[:i])]
OTHERS = [c for c in ALL if c not in FIRST]
SM80 = ["softmax_masked-float32-N100", "layernorm_masked-float16-N33",
        "masked_copy-float32-nan", "masked_store-float32-lo0.0", "compare_codes-float16",
        "gemm_store_mask-250", "causal_attention-h2-s256-d64-128x64", "where_transposed",
        "linear_index-s5", "gemm_masked_a-100", "gemm_masked_ab-float16-100"]

KERNELS = {}


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


def run_on_gpu(case, groups, seed):
    case_runner.run_on_gpu(case, groups, seed, KERNELS)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", FIRST, ids=[c.name for c in FIRST])
def test_kernel_on_gpu(case, groups, seed):
    run_on_gpu(case, groups, seed)


@pytest.mark.parametrize("case", OTHERS, ids=[c.name for c in OTHERS])
def test_other_cases_on_gpu(case, seed):
    run_on_gpu(case, 2, seed)


@pytest.mark.parametrize("name", SM80)
def test_kernel_compiled_for_sm80(name, seed, monkeypatch):
    monkeypatch.setenv("NUMBA_WS_CC", "8.0")
    run_on_gpu(km.CASES[name], 2, seed)
