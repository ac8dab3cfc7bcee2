"""ws.atomic_add on the GPU against float64 / exact integer references: split-K GEMMs
adding their slices into one output (fp16 / bf16 / fp32, direct red.global.add and the
staged bulk reduce of tma_store=1, 1 and 2 consumer groups, ragged shapes), and 1-D /
2-D tiles in other layouts from many programs (masked, int32). Outputs start as zeros
(atomic adds accumulate), so each case also checks that elements outside the tiles keep
a NaN / sentinel."""
import pytest

import numba_ws as ws
from kernels import matmul_splitk_atomic

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

splitk = ws.jit(matmul_splitk_atomic)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _gemm_case(M, N, K, dtype, out_dtype):
    a = torch.randn(M, K, device="cuda", dtype=DTYPES[dtype])
    b = torch.randn(K, N, device="cuda", dtype=DTYPES[dtype])
    parent = torch.full((M, N + 8), float("nan"), device="cuda", dtype=DTYPES[out_dtype])
    c = parent[:, :N]
    c.zero_()
    return a, b, c, parent


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (130, 200, 66), (128, 512, 4096)])
@pytest.mark.parametrize("split", [2, 3])
@pytest.mark.parametrize("tma_store,groups,BN", [(0, 2, 256), (1, 2, 256), (1, 2, 128),
                                                 (1, 1, 128), (0, 1, 128)])
def test_splitk_atomic_gemm(dtype, M, N, K, split, tma_store, groups, BN):
    a, b, c, parent = _gemm_case(M, N, K, dtype, dtype)
    grid = (ws.cdiv(M, 128) * ws.cdiv(N, BN) * split,)
    splitk[grid](a, b, c, BM=128, BN=BN, BK=64, SPLIT_K=split, num_consumer_groups=groups,
                 num_buffers_warp_spec=3, tma_store=tma_store)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= 2e-2, f"relative error {err:.3e}"   # rounded once per slice
    assert bool(torch.isnan(parent[:, N:]).all()), "atomic adds past the view's columns"


@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (130, 200, 66)])
def test_splitk_atomic_gemm_fp32_output(M, N, K):
    a, b, c, parent = _gemm_case(M, N, K, "float16", "float32")
    grid = (ws.cdiv(M, 128) * ws.cdiv(N, 128) * 4,)
    splitk[grid](a, b, c, BM=128, BN=128, BK=64, SPLIT_K=4, num_buffers_warp_spec=3)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= 1e-5, f"relative error {err:.3e}"
    assert bool(torch.isnan(parent[:, N:]).all())


def accumulate_rows(x, y, BN: ws.constexpr):
    """Every program adds row pid % 4 of x's first BN columns, where > 0, to y[0:BN]."""
    row = ws.load(x, (ws.program_id(0) % 4, 0), (1, BN))
    ws.atomic_add(y, (0, 0), row, mask=row > 0)


def count(flags, counts, BN: ws.constexpr):
    """Each program adds its 1-D tile of ones (int32) to counts[0:BN]."""
    ones = ws.load(flags, (0,), (BN,))
    ws.atomic_add(counts, (0,), ones)


def test_masked_atomic_add_from_many_programs():
    P, BN = 96, 128
    x = torch.randn(4, 256, device="cuda", dtype=torch.float32)
    y = torch.zeros(1, 256, device="cuda", dtype=torch.float32)
    ws.jit(accumulate_rows)[(P,)](x, y, BN=BN)
    torch.cuda.synchronize()
    ref = (x.double().clamp(min=0)[:, :BN] * (P // 4)).sum(0)
    assert torch.allclose(y[0, :BN].double(), ref, rtol=1e-5, atol=1e-4)
    assert bool((y[0, BN:] == 0).all())


def test_int32_atomic_add_counts_exactly():
    P, BN = 500, 128
    flags = torch.ones(BN, device="cuda", dtype=torch.int32)
    counts = torch.full((BN + 16,), 0, device="cuda", dtype=torch.int32)
    ws.jit(count)[(P,)](flags, counts, BN=BN)
    torch.cuda.synchronize()
    assert bool((counts[:BN] == P).all()) and bool((counts[BN:] == 0).all())
