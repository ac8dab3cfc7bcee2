"""``ws.dot`` of float32 tiles on the GPU: tf32 tensor-core MMAs (``wgmma ...
m64nNk8.f32.tf32.tf32``, K-major operands only). CPU checks: the PTX form and ptxas
without spills for each operand form, the operand buffer for a row-major B, the schedule
simulator against the interpreter, and the clear errors (a transposed A; sm_80).
The GPU runs are tests/gpu/test_tf32_gpu.py."""
import re

import numpy as np
import pytest

import numba_ws as ws
from kernels import matmul, matmul_nt, matmul_tn
from ptx_tools import assemble, resources

TF32_MMA = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k8\.f32\.tf32\.tf32")


def _f32(shape, order="C"):
    return np.zeros(shape, np.float32, order=order)


@pytest.mark.parametrize("groups,BM,BN,BK", [(1, 64, 128, 32), (2, 128, 128, 32),
                                             (2, 128, 256, 32), (2, 128, 64, 16)])
@pytest.mark.parametrize("b_order", ["C", "F"])
def test_fp32_gemm_assembles(tmp_path, groups, BM, BN, BK, b_order):
    """Row-major B ("C") is staged K-major through the operand buffer (``st.shared``,
    the async-proxy fence); a column-major B ("F") is read straight from its slot."""
    kern = ws.jit(matmul)
    args = (_f32((300, 136)), _f32((136, 200), b_order), _f32((300, 200)))
    meta = dict(BM=BM, BN=BN, BK=BK, num_consumer_groups=groups, shared_operand_buffer=1)
    ptx = kern.inspect_ptx(*args, **meta)
    assert {int(n) for n in TF32_MMA.findall(ptx)} == {BN}      # M split: each group all N
    assert "k16" not in "".join(re.findall(r"wgmma\.mma_async\S*", ptx))
    staged = "fence.proxy.async.shared::cta;" in ptx and "st.shared" in ptx
    assert staged == (b_order == "C")
    plan = kern.partition(*args, **meta).ws
    assert plan.stage_bytes == (BK * BN * 4 + 1023) // 1024 * 1024 * (b_order == "C")
    assert any("b is a float32 tile stored N-major: copied K-major" in n
               for n in plan.notes) == (b_order == "C")
    # two groups split M: one buffer, each group copies half, named barrier 6 over both
    shared = staged and groups == 2 and plan.partition_dim == "M"
    assert plan.stage_shared == (2 if shared else 0)
    assert ("bar.sync 6, 256;" in ptx) == shared
    regs, spills, stack = resources(assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_three_groups_share_one_buffer(tmp_path):
    """BM = 192 over three groups: one buffer, written by all 384 consumer threads."""
    kern = ws.jit(matmul)
    args = (_f32((400, 136)), _f32((136, 200)), _f32((400, 200)))
    meta = dict(BM=192, BN=128, BK=32, num_consumer_groups=3, shared_operand_buffer=1)
    ptx = kern.inspect_ptx(*args, **meta)
    plan = kern.partition(*args, **meta).ws
    assert plan.stage_shared == 3 and plan.stage_regions == 1
    assert "bar.sync 6, 384;" in ptx
    regs, spills, stack = resources(assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_each_group_has_its_own_buffer_by_default(tmp_path):
    kern = ws.jit(matmul)
    args = (_f32((300, 136)), _f32((136, 200)), _f32((300, 200)))
    meta = dict(BM=128, BN=128, BK=32)
    ptx = kern.inspect_ptx(*args, **meta)
    plan = kern.partition(*args, **meta).ws
    assert plan.stage_shared == 0 and plan.stage_regions == 2
    assert "bar.sync 6," not in ptx and "st.shared.v4" in ptx
    assemble(ptx, tmp_path)


def test_fp32_gemm_b_transposed_in_the_kernel_reads_the_slot(tmp_path):
    kern = ws.jit(matmul_nt)
    ptx = kern.inspect_ptx(_f32((260, 200)), _f32((136, 200)), _f32((260, 136)),
                           BM=128, BN=128, BK=32)
    assert TF32_MMA.search(ptx) and "fence.proxy.async.shared::cta;" not in ptx
    assemble(ptx, tmp_path)


@pytest.mark.parametrize("shared", [0, 1])
@pytest.mark.parametrize("b_order", ["C", "F"])
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_fp32_gemm_schedule_matches_the_interpreter(groups, b_order, shared):
    rng = np.random.default_rng(7)
    M, N, K = 200, 136, 100
    BM = 192 if groups == 3 else 128
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = np.asarray(rng.standard_normal((K, N)), np.float32, order=b_order)
    c = np.full((M, N), np.nan, np.float32)
    report = ws.verify(matmul, (ws.cdiv(M, BM) * ws.cdiv(N, 128),), a, b, c, BM=BM, BN=128,
                       BK=32, num_consumer_groups=groups, shared_operand_buffer=shared,
                       seeds=1)
    assert report.ok, str(report)


def test_fp32_transposed_a_is_a_clear_error():
    """wgmma has no transpose for tf32: an M-major A is refused at the dot's line."""
    with pytest.raises(ws.WSCompileError, match=r"(?s)float32 \(tf32\).*K contiguous.*"
                                                r"kernels.py.*ws.dot"):
        ws.jit(matmul_tn).inspect_ptx(_f32((64, 256)), _f32((64, 128)), _f32((256, 128)),
                                      BM=128, BN=128, BK=32)


def test_fp32_dot_on_sm80_is_a_clear_error():
    with pytest.raises(ws.WSCompileError, match=r"sm_80: float32 \(tf32\) operands"):
        ws.jit(matmul).inspect_ptx(_f32((256, 64)), _f32((64, 128)), _f32((256, 128)),
                                   BM=128, BN=128, BK=32, cc=(8, 0))


def test_mixed_dtypes_are_a_clear_error():
    with pytest.raises(ws.WSCompileError,
                       match=r"dot\(a, b\) need the same dtype, got float16 and float32"):
        ws.jit(matmul).inspect_ptx(np.zeros((256, 64), np.float16), _f32((64, 128)),
                                   _f32((256, 128)), BM=128, BN=128, BK=32)


def _scaled_a_dot(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (0, k * BK), (BM, BK)) * 2.0
        acc = ws.dot(x, ws.load(b, (k * BK, 0), (BK, BN)), acc)
    ws.store(c, (0, 0), acc)


@pytest.mark.parametrize("cc", [(9, 0, "a"), (8, 0)])
def test_fp32_register_a_is_a_clear_error(cc):
    """A computed float32 A (a register tile): the advice names tf32's shared-memory A
    and the dot's line."""
    with pytest.raises(ws.WSCompileError, match=r"(?s)float32 \(tf32\) tiles with A computed "
                                                r"in registers.*test_tf32.py.*ws.dot"):
        ws.jit(_scaled_a_dot).inspect_ptx(_f32((128, 64)), _f32((64, 128)), _f32((128, 128)),
                                          BM=128, BN=128, BK=32, cc=cc)
