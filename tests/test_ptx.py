"""PTX of the warp-specialized GEMM for sm_90a, built without a GPU and assembled by ptxas."""
import re
import shutil
import subprocess

import numpy as np
import pytest

import numba_ws as ws
import kernels

PTXAS = shutil.which("ptxas")


def f16(*shape):
    return np.zeros(shape, np.float16)


def _assemble(ptx, tmp_path):
    if PTXAS is None:
        pytest.fail("ptxas is not on PATH (CI has CUDA 13.0's)")
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    res = subprocess.run([PTXAS, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stderr


def _resources(log):
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill", log)]
    stack = int(re.search(r"(\d+) bytes stack frame", log).group(1))
    return regs, spills, stack


@pytest.mark.parametrize("kernel,extra", [(kernels.matmul, {}),
                                          (kernels.matmul_persistent, {"GROUP_M": 8})])
def test_gemm_ptx_has_the_hopper_instructions_and_no_spills(tmp_path, kernel, extra):
    ptx = ws.jit(kernel).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512),
                                      BM=128, BN=256, BK=64, **extra)
    assert ".target sm_90a" in ptx
    for instr in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", "cp.async.bulk.tensor",
                  "mbarrier.try_wait.parity", "setmaxnreg.dec.sync.aligned.u32 40",
                  "setmaxnreg.inc.sync.aligned.u32 232", "mbarrier.arrive.expect_tx",
                  "wgmma.wait_group.sync.aligned"):
        assert instr in ptx, instr
    assert ".maxntid 384" in ptx and ".minnctapersm 1" in ptx
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0 and regs <= 168


def test_one_branch_per_warp_group(tmp_path):
    ptx = ws.jit(kernels.matmul).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512),
                                             BM=192, BN=128, BK=64, num_consumer_groups=3,
                                             reg_inc_consumer=152)
    # the producer's dec and one inc per consumer branch: one setmaxnreg per branch
    assert ptx.count("setmaxnreg.dec") == 1 and ptx.count("setmaxnreg.inc") == 3
    _assemble(ptx, tmp_path)


def test_bf16_and_cp_async_paths_assemble(tmp_path):
    bf = np.zeros((130, 200), dtype=ws.bfloat16.dtype)
    ptx = ws.jit(kernels.matmul).inspect_ptx(bf, np.zeros((200, 300), ws.bfloat16.dtype),
                                             f16(130, 300), BM=128, BN=256, BK=64)
    assert "f32.bf16.bf16" in ptx
    assert "cp.async.ca.shared.global" in ptx       # b's 600-byte rows: 8-byte pieces
    assert "cp.async.bulk.tensor" not in ptx
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0]


def test_unsupported_op_on_gpu_is_a_clear_error():
    q = f16(1024, 64)
    with pytest.raises(ws.WSCompileError, match=r"ws\.max has no GPU lowering|ws\.exp has no"):
        ws.jit(kernels.attention_fwd).inspect_ptx(q, q, q, q, 512, 0.125, BM=128, BN=64, D=64)


def test_accumulator_over_the_register_limit_is_a_compile_error():
    with pytest.raises(ws.WSResourceError, match="accumulator"):
        ws.jit(kernels.matmul).partition(f16(512, 256), f16(256, 512), f16(512, 512),
                                         BM=192, BN=256, BK=64, num_consumer_groups=3,
                                         reg_inc_consumer=152)
