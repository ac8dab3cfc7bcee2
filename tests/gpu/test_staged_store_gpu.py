"""Options tma_store=1 and 3 (the default) (passes/staged_stores.py,
codegen/staged_store.py) on the GPU: GEMMs whose accumulator goes out through shared
memory + TMA, outputs in the input dtype (fp16 / bf16), ragged shapes, 1 and 2 consumer
groups, persistent / one tile per CTA / ping-pong, one chunk and several; fresh random
inputs, NaN-poisoned outputs, float64 reference (``max|c - ref| / max|ref| <= 1e-2``)."""
import pytest

import numba_ws as ws
from gemm_checks import TOL
from kernels import accumulate_matmul, matmul, matmul_persistent, shifted_matmul

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

gemm = ws.jit(matmul)
gemm_persistent = ws.jit(matmul_persistent)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _inputs(M, N, K, dtype, c_pitch=None):
    """a, b of ``dtype``; c (M, N) of ``dtype`` NaN-filled, a view of rows of
    ``c_pitch`` elements when given (the columns past N hold 7.0 and must keep it)."""
    a = torch.randn(M, K, device="cuda", dtype=DTYPES[dtype])
    b = torch.randn(K, N, device="cuda", dtype=DTYPES[dtype])
    pitch = c_pitch or N
    parent = torch.full((M, pitch), 7.0, device="cuda", dtype=DTYPES[dtype])
    c = parent[:, :N]
    c.fill_(float("nan"))
    return a, b, c, parent


def _check(a, b, c, parent=None):
    ref = a.double() @ b.double()
    out = c.double()
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} outputs never written"
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    assert err <= TOL, f"relative error {err:.3e}"
    if parent is not None and parent.shape[1] > c.shape[1]:
        pad = parent[:, c.shape[1]:]
        assert bool((pad == 7.0).all()), "the store wrote past the view's columns"
    return err


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (4096, 4096, 1024), (136, 264, 72)])
@pytest.mark.parametrize("groups,BN,buffers", [(2, 256, 4), (2, 256, 3), (1, 128, 6)])
def test_persistent_gemm_staged(dtype, M, N, K, groups, BN, buffers):
    """2 groups x 4 slots of 48 KB leave room for two 64x128 chunks per group; 3 slots
    for the whole 64x256 tile; one group with 6 slots of 32 KB stages its 128x128 tile
    in two chunks."""
    a, b, c, _ = _inputs(M, N, K, dtype)
    kern = gemm_persistent[(_sms(),)]
    kern(a, b, c, BM=128, BN=BN, BK=64, GROUP_M=8, num_consumer_groups=groups,
         num_buffers_warp_spec=buffers, tma_store=1)
    torch.cuda.synchronize()
    _check(a, b, c)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (130, 200, 66)])
@pytest.mark.parametrize("BN", [256, 128])
def test_one_tile_per_cta_staged(dtype, M, N, K, BN):
    """The last store of a CTA: the copies must have read shared memory before it ends."""
    a, b, c, _ = _inputs(M, N, K, dtype)
    gemm[(ws.cdiv(M, 128) * ws.cdiv(N, BN),)](a, b, c, BM=128, BN=BN, BK=64,
                                              num_buffers_warp_spec=3, tma_store=1)
    torch.cuda.synchronize()
    _check(a, b, c)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_staged_store_keeps_to_a_strided_view(dtype):
    """c is (1000, 1000) of rows 1024 long: TMA writes only the view's columns."""
    a, b, c, parent = _inputs(1000, 1000, 512, dtype, c_pitch=1024)
    gemm_persistent[(_sms(),)](a, b, c, BM=128, BN=256, BK=64, GROUP_M=8,
                               num_buffers_warp_spec=3, tma_store=1)
    torch.cuda.synchronize()
    _check(a, b, c, parent)


def test_odd_pitch_output_falls_back_to_direct_stores():
    """Rows of 1001 fp16 elements (2002 bytes) are no TMA target: the direct store runs,
    and explain says why."""
    a, b, c, parent = _inputs(700, 1000, 256, "float16", c_pitch=1001)
    meta = dict(BM=128, BN=256, BK=64, GROUP_M=8, num_buffers_warp_spec=3, tma_store=1)
    gemm_persistent[(_sms(),)](a, b, c, **meta)
    torch.cuda.synchronize()
    _check(a, b, c, parent)
    text = gemm_persistent.explain(a, b, c, **meta)
    assert "direct store (TMA cannot write 'c'" in str(text)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_ping_pong_gemm_staged(dtype):
    """Ping-pong groups each store whole 128x128 tiles from their own region."""
    a, b, c, _ = _inputs(1000, 1000, 1000, dtype)
    gemm_persistent[(_sms(),)](a, b, c, BM=128, BN=128, BK=64, GROUP_M=8,
                               num_buffers_warp_spec=2, ping_pong=1, tma_store=1)
    torch.cuda.synchronize()
    _check(a, b, c)


def test_staged_and_direct_agree_bit_for_bit():
    """The same fp32 accumulator rounded once either way: identical outputs."""
    a, b, c, _ = _inputs(1000, 1000, 1000, "bfloat16")
    out = []
    for flag in (0, 1):
        c.fill_(float("nan"))
        gemm_persistent[(_sms(),)](a, b, c, BM=128, BN=256, BK=64, GROUP_M=8,
                                   num_buffers_warp_spec=3, tma_store=flag)
        torch.cuda.synchronize()
        out.append(c.clone())
    assert torch.equal(out[0], out[1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (130, 200, 66), (1024, 1000, 256)])
@pytest.mark.parametrize("groups,BN", [(2, 256), (1, 128)])
def test_edge_tiles_through_tma_match_direct_stores(dtype, M, N, K, groups, BN):
    """tma_store=2: edge tiles through TMA, interior ones direct; the
    output equals tma_store=0's bit for bit and matches float64."""
    a, b, c, parent = _inputs(M, N, K, dtype, c_pitch=N + 24)
    grid = (ws.cdiv(M, 128) * ws.cdiv(N, BN),)
    out = []
    for flag in (2, 0):
        c.fill_(float("nan"))
        gemm[grid](a, b, c, BM=128, BN=BN, BK=64, num_consumer_groups=groups,
                   tma_store=flag)
        torch.cuda.synchronize()
        _check(a, b, c, parent)
        out.append(c.clone())
    assert torch.equal(out[0], out[1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (130, 200, 66)])
def test_default_stages_the_one_tile_gemm(dtype, M, N, K):
    """The default (tma_store=3) stages the one-tile-per-program GEMM's store: the plan
    says so, the output equals tma_store=0's bit for bit and matches float64 on a
    strided view whose padding must stay."""
    a, b, c, parent = _inputs(M, N, K, dtype, c_pitch=N + 24)
    assert gemm.partition(a, b, c, BM=128, BN=256, BK=64).ws.staged
    grid = (ws.cdiv(M, 128) * ws.cdiv(N, 256),)
    out = []
    for meta in ({}, {"tma_store": 0}):
        c.fill_(float("nan"))
        gemm[grid](a, b, c, BM=128, BN=256, BK=64, **meta)
        torch.cuda.synchronize()
        _check(a, b, c, parent)
        out.append(c.clone())
    assert torch.equal(out[0], out[1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_default_keeps_a_read_back_array_direct(dtype):
    """c += a @ b reads the array it stores: the default keeps the store direct and
    the sum matches float64 (c starts random, not poisoned: it is an input)."""
    M, N, K = 520, 600, 192
    a = torch.randn(M, K, device="cuda", dtype=DTYPES[dtype])
    b = torch.randn(K, N, device="cuda", dtype=DTYPES[dtype])
    c = torch.randn(M, N, device="cuda", dtype=DTYPES[dtype])
    ref = c.double() + a.double() @ b.double()
    kern = ws.jit(accumulate_matmul)
    assert kern.partition(a, b, c, BM=128, BN=256, BK=64).ws.staged == {}
    kern[(ws.cdiv(M, 128), ws.cdiv(N, 256))](a, b, c, BM=128, BN=256, BK=64)
    torch.cuda.synchronize()
    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= TOL, f"relative error {err:.3e}"



@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shift", [1, 8])
def test_default_store_at_a_shifted_column(dtype, shift):
    """A store at column ``pid_n * BN + shift`` with the default: shift 1 stays direct
    (a TMA box at a 2-byte column faults: the GPU fuzzer's illegal instruction,
    2026-12-07), shift 8 (16 bytes) is staged; both match float64 on a ragged shape and
    leave the columns outside the view (pitch N + 16) alone."""
    M, N, K = 300, 520, 136
    a = torch.randn(M, K, device="cuda", dtype=DTYPES[dtype])
    b = torch.randn(K, N, device="cuda", dtype=DTYPES[dtype])
    parent = torch.full((M, N + 16), 7.0, device="cuda", dtype=DTYPES[dtype])
    c = parent[:, :N + shift]
    c[:, shift:] = float("nan")
    kern = ws.jit(shifted_matmul)
    meta = dict(BM=128, BN=256, BK=64, SHIFT=shift)
    assert bool(kern.partition(a, b, c, **meta).ws.staged) == (shift == 8)
    kern[(ws.cdiv(M, 128), ws.cdiv(N, 256))](a, b, c, **meta)
    torch.cuda.synchronize()
    _check(a, b, c[:, shift:])
    assert bool((parent[:, :shift] == 7.0).all()), "the store wrote left of its offset"
    assert bool((parent[:, N + shift:] == 7.0).all()), "the store wrote past the view"
