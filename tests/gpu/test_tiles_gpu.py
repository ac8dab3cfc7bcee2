"""The register-tile kernels of tests/kernels_tiles.py on the GPU (issue 14), against
float64 references, with ``num_consumer_groups`` 1 and 2.

Every launch draws fresh random inputs (the seed is in each failure message). Outputs
start as NaN (int outputs as ``kernels_tiles.INT_POISON``) with poisoned guard rows after
them, so an element never written, or a write past the last row, fails. Shapes are
ragged (300 x 200 arrays with 64 x 64 tiles; GEMMs 300 x 200 x 136 with 128 x 128 x 64)
wherever the kernel's docstring allows.

Tolerances (each output's ``Out`` in kernels_tiles.py; the failure message prints it):
``max|out - ref| / max|ref|`` <= 1e-2 for fp16 / bf16 outputs and 1e-5 for float32
(1e-4 for float32 results of tensor-core dots); astype into a float within one ulp of
the exact value; copies, transposes, maximum, negation and int outputs exact.

Arrays are CuPy arrays, or torch tensors for bf16 (CuPy has no bfloat16). Each kernel's
first case runs with 1 and 2 consumer groups, its other cases (dtypes, shapes, ``ACT``
values) with 2; of the per-pair ``copy_astype`` cases only the first runs here
(``astype_fanout`` runs all 36 pairs in 6 compiles per group count). A handful of kernels
also run compiled for sm_80 (``NUMBA_WS_CC=8.0``). About 95 compiles in all.
"""
import numpy as np
import pytest

import kernels_tiles as kt

cp = pytest.importorskip("cupy")
import case_runner  # noqa: E402  (after the skip: it imports cupy)

ALL = list(kt.CASES.values())
FIRST = [c for i, c in enumerate(ALL) if all(d.kernel is not c.kernel for d in ALL[:i])]
OTHERS = [c for c in ALL if c not in FIRST and c.kernel is not kt.copy_astype]
#: 1-D tiles wider than a 256-column box per consumer group: both group counts
WIDE = [c for c in OTHERS if c.name.endswith(("-B512", "-B1024"))]
SM80 = ["copy2d-float32", "astype_fanout-float32", "vec_add-float32", "softmax-float32",
        "layernorm_fwd-float16", "col_sums-float32-M300", "row_maxes-float32-N192",
        "trans_store-float16", "gemm_bias_relu", "gemm_out-bfloat16-bfloat16",
        "attention_fwd_stats-h2-s256-d64-128x64"]


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


@pytest.mark.parametrize("case", WIDE, ids=[c.name for c in WIDE])
def test_wide_one_d_parts_with_one_group(case, seed):
    run_on_gpu(case, 1, seed)


@pytest.mark.parametrize("name", SM80)
def test_kernel_compiled_for_sm80(name, seed, monkeypatch):
    monkeypatch.setenv("NUMBA_WS_CC", "8.0")
    run_on_gpu(kt.CASES[name], 2, seed)
