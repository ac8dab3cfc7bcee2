"""Split-K GEMM on the H200 (issue 16 item 2): examples.matmul_splitk + splitk_reduce on
ragged shapes, fp16 and bf16 with outputs in the input dtype, 1 and 2 consumer groups,
slices without k blocks; fresh random inputs, outputs and workspace NaN-poisoned,
float64 references."""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws import examples

torch = pytest.importorskip("torch")

splitk = ws.jit(examples.matmul_splitk)
reduce_ = ws.jit(examples.splitk_reduce)


def _gemm(a, b, c, split, groups):
    M, N = c.shape
    BM, BN = 128, (256 if groups == 2 else 128)
    rows = examples.splitk_slice_rows(M, BM)
    partial = torch.full((split * rows, N), float("nan"), device="cuda", dtype=torch.float32)
    splitk[(ws.cdiv(M, BM) * ws.cdiv(N, BN) * split,)](
        a, b, partial, rows, BM=BM, BN=BN, BK=64, SPLIT_K=split, num_consumer_groups=groups)
    reduce_[(ws.cdiv(M, 64) * ws.cdiv(N, 256),)](partial, c, rows, BM=64, BN=256,
                                                SPLIT_K=split, num_consumer_groups=groups)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("M, N, K, split", [(256, 1024, 4096, 2), (200, 300, 1000, 3),
                                            (130, 520, 4001, 4), (64, 256, 64, 3)])
def test_splitk_equals_float64(M, N, K, split, groups, dtype):
    a = torch.randn((M, K), device="cuda").to(dtype)
    b = torch.randn((K, N), device="cuda").to(dtype)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    _gemm(a, b, c, split, groups)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert c.dtype == dtype and not torch.isnan(c).any()
    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= (1e-2 if dtype == torch.bfloat16 else 2e-3), err
