"""The warp-specialized GEMM compiled by numba_ws, on the GPU, against float64.

Every case draws fresh random inputs and NaN-poisons the output first; the check is
``max|c - ref| / max|ref| <= 1e-2`` with ``ref`` computed in float64.
"""
import numpy as np
import pytest

import numba_ws as ws
from gemm_checks import check_gemm, column_major, gemm_inputs
from kernels import matmul

cp = pytest.importorskip("cupy")
gemm = ws.jit(matmul)


def _launch(a, b, c, **meta):
    M, N = c.shape
    grid = lambda m: (ws.cdiv(M, m["BM"]) * ws.cdiv(N, m["BN"]),)  # noqa: E731
    gemm[grid](a, b, c, **meta)
    cp.cuda.runtime.deviceSynchronize()


def test_unaligned_rows_take_the_cp_async_path():
    """N = 300 fp16: b's rows are 600 bytes, not a multiple of 16, so no TMA for b."""
    a, b, c, ref = gemm_inputs(130, 300, 200, "float16")
    _launch(a, b, c, BM=128, BN=256, BK=64)
    check_gemm(c, ref)


@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (4096, 4096, 1024)])
def test_persistent_gemm(M, N, K):
    from kernels import matmul_persistent
    a, b, c, ref = gemm_inputs(M, N, K, "float16")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    ws.jit(matmul_persistent)[(sms,)](a, b, c, BM=128, BN=256, BK=64, GROUP_M=8)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(1024, 1024, 1024), (1000, 1000, 1000), (256, 512, 64),
                                   (384, 256, 128), (136, 264, 72)])
@pytest.mark.parametrize("shared", [1, 0])
def test_gemm_two_consumers(dtype, M, N, K, shared):
    """Both code layouts: one consumer body for the two groups (the default) and one
    clone per group."""
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    _launch(a, b, c, BM=128, BN=256, BK=64, num_consumer_groups=2, num_buffers_warp_spec=3,
            shared_consumer_body=shared)
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (136, 264, 72)])
def test_gemm_nvvm_opt_1(dtype, groups, M, N, K):
    """NVVM -opt=1 (the producer loop not unrolled) on ragged shapes."""
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    _launch(a, b, c, BM=64 * groups, BN=256, BK=64, num_consumer_groups=groups,
            num_buffers_warp_spec=4, nvvm_opt=1)
    check_gemm(c, ref)


@pytest.mark.parametrize("M,N,K", [(576, 384, 256), (500, 130, 200)])
def test_gemm_three_consumers_share_one_body(M, N, K):
    """Three groups of 64 rows in one consumer body: each finds its slot part and output
    rows by its warp-group index."""
    a, b, c, ref = gemm_inputs(M, N, K, "float16")
    _launch(a, b, c, BM=192, BN=128, BK=64, num_consumer_groups=3, reg_inc_consumer=152)
    check_gemm(c, ref)


@pytest.mark.parametrize("in_flight", [0, 1])
@pytest.mark.parametrize("buffers", [1, 2, 3, 4])
@pytest.mark.parametrize("groups", [1, 2])
def test_gemm_options(groups, buffers, in_flight):
    M, N, K = 512, 512, 320
    a, b, c, ref = gemm_inputs(M, N, K, "float16")
    BN = 256 if groups == 2 else 128
    _launch(a, b, c, BM=128, BN=BN, BK=64, num_consumer_groups=groups,
            num_buffers_warp_spec=buffers, dot_in_flight=in_flight)
    check_gemm(c, ref)


def test_gemm_4096():
    a, b, c, ref = gemm_inputs(4096, 4096, 4096, "float16")
    _launch(a, b, c, BM=128, BN=256, BK=64)
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K,groups", [(1000, 1000, 1000, 2), (136, 264, 72, 2),
                                          (512, 384, 256, 1), (64, 128, 64, 1)])
def test_gemm_column_major_b(dtype, M, N, K, groups):
    """b column-major: TMA reads its transposed (row-major) view, the tile lands K-major
    and wgmma reads B without transposition (tnspB = 0)."""
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    bf = column_major(b)
    BN = 256 if groups == 2 else 128
    _launch(a, bf, c, BM=128, BN=BN, BK=64, num_consumer_groups=groups)
    check_gemm(c, ref)


@pytest.mark.parametrize("M,N,K", [(256, 300, 1002), (130, 200, 66)])
def test_gemm_column_major_b_cp_async(M, N, K):
    """b column-major with K*2 bytes not a multiple of 16: TMA cannot read the transposed
    view, so the cp.async path copies it along K (4-byte pieces), K-major in shared memory."""
    a, b, c, ref = gemm_inputs(M, N, K, "float16")
    bf = column_major(b)
    info = gemm.partition(a, bf, c, BM=128, BN=256, BK=64).ws.channels[0]
    assert info.lowering == "cp.async"
    _launch(a, bf, c, BM=128, BN=256, BK=64)
    check_gemm(c, ref)


@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (512, 512, 320), (256, 256, 64)])
def test_gemm_bk128(M, N, K):
    """BK=128 (two 64-column boxes per A row, 96 KB slots), K not a multiple of 128."""
    a, b, c, ref = gemm_inputs(M, N, K, "float16")
    _launch(a, b, c, BM=128, BN=256, BK=128, num_consumer_groups=2, num_buffers_warp_spec=2)
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (512, 384, 96), (130, 264, 40)])
@pytest.mark.parametrize("BK,buffers,in_flight", [(32, 8, 1), (32, 6, 0), (16, 8, 1)])
def test_gemm_narrow_k_tiles(dtype, M, N, K, BK, buffers, in_flight):
    """BK=32 / 16: A's 64 / 32-byte rows in the 64 / 32-byte swizzle (TMA boxes and wgmma
    descriptors agree), persistent, K not a multiple of BK included."""
    from kernels import matmul_persistent
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    ws.jit(matmul_persistent)[(132,)](
        a, b, c, BM=128, BN=256, BK=BK, GROUP_M=8, num_consumer_groups=2,
        num_buffers_warp_spec=buffers, dot_in_flight=in_flight)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("BN", [16, 32, 48, 96])
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("M,N,K", [(300, 200, 136), (128, 96, 64)])
def test_gemm_narrow_n_row_major_b(dtype, BN, groups, M, N, K):
    """Row-major b with BN * itemsize not a multiple of 128 bytes: its tile is N-major in
    the 32 / 64-byte swizzle (BN = 16, 48 / 32, 96), the wgmma B descriptor's LBO the next
    box of 16 / 32 columns; ragged M, N and K."""
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    _launch(a, b, c, BM=64 * groups, BN=BN, BK=64, num_consumer_groups=groups,
            num_buffers_warp_spec=3)
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("groups,BM", [(1, 64), (1, 128), (2, 128), (2, 256)])
@pytest.mark.parametrize("M,N,K", [(300, 200, 136), (1000, 1000, 1000)])
def test_gemm_m_major_a(dtype, groups, BM, M, N, K):
    """A read M-major: a column-major ``a`` through examples.matmul, and ``ws.trans`` of a
    loaded (BK, BM) tile of ``at`` (kernels.matmul_tn); wgmma's imm-trans-a; ragged."""
    from kernels import matmul_tn
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    _launch(column_major(a), b, c, BM=BM, BN=128, BK=64, num_consumer_groups=groups)
    check_gemm(c, ref)
    c[...] = float("nan")
    at = column_major(a).T          # (K, M), row-major: the same values as a.T
    grid = (ws.cdiv(M, BM), ws.cdiv(N, 128))
    ws.jit(matmul_tn)[grid](at, b, c, BM=BM, BN=128, BK=64, num_consumer_groups=groups)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)


@pytest.mark.filterwarnings(
    "ignore::numba_ws.passes.data_partition.PartitionFallbackWarning")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(300, 200, 136), (64, 64, 64)])
def test_gemm_too_small_to_split_falls_back_to_one_group(dtype, M, N, K):
    """64 x 64 tiles with the default two consumer groups: neither dim splits into
    wgmma-sized halves, so the kernel compiles with one group (the warning is checked on
    the CPU, tests/test_partition_nodot.py; a cached kernel does not repeat it)."""
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    assert gemm.partition(a, b, c, BM=64, BN=64, BK=64).ws.num_consumers == 1
    _launch(a, b, c, BM=64, BN=64, BK=64)
    check_gemm(c, ref)


@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (256, 384, 96)])
def test_gemm_narrow_k_column_major_b(M, N, K):
    """Column-major b with BK=32: its tile lands K-major with 64-byte rows (64-byte
    swizzle on both operands)."""
    a, b, c, ref = gemm_inputs(M, N, K, "float16")
    _launch(a, column_major(b), c, BM=128, BN=256, BK=32, num_buffers_warp_spec=8)
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K,programs", [(1000, 1000, 1000, 132), (1024, 768, 320, 5),
                                            (384, 256, 64, 7), (128, 128, 128, 3),
                                            (4096, 4096, 1024, 132)])
@pytest.mark.parametrize("in_flight,buffers", [(0, 2), (1, 6)])
def test_ping_pong_gemm(dtype, M, N, K, programs, in_flight, buffers):
    """Ping-pong consumers: group g computes whole tiles of iterations g, g+2, ... of the
    persistent loop, the groups taking turns at the ring; odd tile counts per program,
    programs without a tile for group 1 and grids larger than the tile count included."""
    from kernels import matmul_persistent
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    ws.jit(matmul_persistent)[(programs,)](
        a, b, c, BM=128, BN=128, BK=64, GROUP_M=8, num_consumer_groups=2,
        num_buffers_warp_spec=buffers, dot_in_flight=in_flight, ping_pong=1)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)


@pytest.mark.parametrize("groups,BM,BN,buffers", [(2, 64, 256, 5), (3, 64, 128, 3)])
def test_ping_pong_gemm_shapes(groups, BM, BN, buffers):
    from kernels import matmul_persistent
    a, b, c, ref = gemm_inputs(1000, 1000, 1000, "float16")
    ws.jit(matmul_persistent)[(132,)](
        a, b, c, BM=BM, BN=BN, BK=64, GROUP_M=8, num_consumer_groups=groups,
        num_buffers_warp_spec=buffers, dot_in_flight=1, ping_pong=1,
        reg_inc_consumer=232 if groups == 2 else 152)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)


def test_the_loaded_cubin_keeps_the_wgmma_pipeline(tmp_path):
    """The launched module is the whole-program cubin (runtime/ptxas.py): wgmmas issue
    back to back, one wait per K step, setmaxnreg kept. A relocatable (linked) compile
    puts a WARPGROUP.DEPBAR after every HGMMA (seen on the H200, 2026-12-04). Both
    consumer groups run one body (shared_consumer_body): 4 HGMMA m64n256k16 per K step,
    one wait in the loop and one drain (8 and 4 with a clone per group)."""
    import shutil
    import subprocess
    if shutil.which("cuobjdump") is None or shutil.which("ptxas") is None:
        pytest.fail("the GPU machine has ptxas and cuobjdump (CUDA 13.0)")
    a, b, c, ref = gemm_inputs(1024, 1024, 1024, "float16")
    fresh = ws.jit(matmul)        # its only specialization is this launch's, compiled now
    with ws.knobs.scope(NUMBA_WS_HOME=str(tmp_path / "cache")):
        fresh[(ws.cdiv(1024, 128) * ws.cdiv(1024, 256),)](
            a, b, c, BM=128, BN=256, BK=64, num_consumer_groups=2, num_buffers_warp_spec=4)
    check_gemm(c, ref)
    images = [ld.art.image for ld in fresh._loaded.values()]
    assert len(images) == 1 and images[0][:4] == b"\x7fELF", [i[:8] for i in images]
    (tmp_path / "k.cubin").write_bytes(images[0])
    sass = subprocess.run(["cuobjdump", "-sass", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, check=True).stdout
    hgmma, waits = sass.count("HGMMA."), sass.count("WARPGROUP.DEPBAR")
    assert hgmma >= 4 and waits <= hgmma // 2, (hgmma, waits)
    assert "USETMAXREG" in sass
