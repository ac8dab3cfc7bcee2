"""The math, integer and promotion kernels of tests/kernels_math.py (issue 15 item 3) on
the GPU, against float64 (or exact NumPy) references, ``num_consumer_groups`` 1 and 2.

Every launch draws fresh random inputs with NaN, ±inf, ±0, ties, negative operands and
out-of-range shift counts planted (the seed is in each failure message). Outputs start as
a sentinel (``kernels_math.SENTINEL``; ints ``kernels_tiles.INT_POISON``) with poisoned
guard rows after them; NaN and ±inf must sit exactly where the reference has them.

Tolerances (``kernels_math.UNARY_TOL``; the failure message prints them): sqrt / abs /
minimum / fma / min / argmax / argmin / integer operators / float ``//`` and ``%`` /
the promotion kernels are exact; rsqrt 2**-21, sigmoid 2**-17, tanh 2**-15 relative
(``tanh.approx.f32``), gelu 2e-6 * (1 + |ref|) for float32; fp16 outputs 2**-10
relative; float64 a few ulp. The "ulp" checks let results below the smallest normal
flush to 0 (sigmoid of x < -87 on the fp32 fast path).

Arrays are CuPy arrays, or torch tensors for bf16. Each kernel's first case runs with 1
and 2 consumer groups, its other cases with 2; a few also compiled for sm_80
(``NUMBA_WS_CC=8.0``). About 90 compiles.
"""
import numpy as np
import pytest

import kernels_math as km

cp = pytest.importorskip("cupy")
import case_runner  # noqa: E402  (after the skip: it imports cupy)

ALL = list(km.CASES.values())
FIRST = [c for i, c in enumerate(ALL) if all(d.kernel is not c.kernel for d in ALL[:i])]
OTHERS = [c for c in ALL if c not in FIRST]
SM80 = ["unary-tanh-float32", "unary-gelu-float16", "minimum_tiles-float32",
        "fma_tiles-bfloat16", "row_reduce-argmax-float32-N64", "col_reduce-argmax-float32-M64",
        "int_binop-floordiv-int32", "float_divmod-float32", "promote_mix",
        "gemm_row_argmax"]

KERNELS = {}


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


def run_on_gpu(case, groups, seed):
    case_runner.run_on_gpu(case, groups, seed, KERNELS)


pytestmark = pytest.mark.filterwarnings(
    "ignore::numba_ws.passes.data_partition.PartitionFallbackWarning")


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
    KERNELS.clear()
    run_on_gpu(km.CASES[name], 2, seed)
    KERNELS.clear()
