"""runtime/ptxas.py: the whole-program cubin the launcher loads and the launch index
stores. A relocatable compile (what the driver's cuLink* does to PTX) serialises every
wgmma and drops setmaxnreg; the command the launcher runs must not."""
import subprocess

import numpy as np
import pytest

import numba_ws as ws
import kernels
from numba_ws import knobs
from numba_ws.runtime import ptxas
from ptx_tools import PTXAS


def _gemm_ptx():
    a = np.zeros((512, 512), np.float16)
    return ws.jit(kernels.matmul).inspect_ptx(a, a, a, BM=128, BN=256, BK=64)


@pytest.fixture(scope="module")
def gemm_ptx():
    if PTXAS is None:
        pytest.fail("ptxas is not on PATH (CI has CUDA 13.0's)")
    return _gemm_ptx()


def test_the_cubin_is_an_elf_for_the_ptx_target(gemm_ptx):
    with knobs.scope(NUMBA_WS_PTXAS=None):
        image = ptxas.cubin(gemm_ptx)
    assert image[:4] == b"\x7fELF"


def test_the_launcher_compiles_the_whole_program(gemm_ptx, tmp_path):
    """The launcher's command keeps setmaxnreg and the wgmma pipeline; the relocatable
    compile (``-c``, as a linker input is compiled) loses both."""
    src = tmp_path / "k.ptx"
    src.write_text(gemm_ptx)
    out = str(tmp_path / "k.cubin")
    whole = subprocess.run(ptxas.command(PTXAS, "sm_90a", str(src), out) + ["-v"],
                           capture_output=True, text=True)
    relocatable = subprocess.run([PTXAS, "-arch=sm_90a", "-c", "-v", str(src), "-o", out],
                                 capture_output=True, text=True)
    assert whole.returncode == 0 and relocatable.returncode == 0
    assert "C7509" in relocatable.stderr and "C7504" in relocatable.stderr
    assert "C7509" not in whole.stderr and "C7504" not in whole.stderr, whole.stderr


def test_no_ptxas_means_no_cubin(gemm_ptx, tmp_path):
    with knobs.scope(NUMBA_WS_PTXAS="0"):
        assert ptxas.find_ptxas() is None and ptxas.cubin(gemm_ptx) == b""
    with knobs.scope(NUMBA_WS_PTXAS=str(tmp_path / "missing")):
        assert ptxas.cubin(gemm_ptx) == b""


def test_ptx_ptxas_rejects_gives_no_cubin():
    if PTXAS is None:
        pytest.fail("ptxas is not on PATH (CI has CUDA 13.0's)")
    bad = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k() { bogus; }\n"
    assert ptxas.cubin(bad) == b""
    assert ptxas.cubin("no target line") == b""
