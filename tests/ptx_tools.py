"""Assembling PTX with the CUDA 13.0 ptxas on PATH and reading its resource report."""
import re
import shutil
import subprocess

import pytest

PTXAS = shutil.which("ptxas")


def same_code(ptx):
    """PTX without the function uid Numba mangles into names (``B2v34B``: it counts the
    compiles of a process), so two compiles of one kernel in one process compare equal."""
    return re.sub(r"B\d+v\d+(?=B)", "Bv", ptx)


def assemble(ptx, tmp_path, arch="sm_90a"):
    """ptxas -v the PTX; returns ptxas's report (stderr). Fails the test if it errors."""
    if PTXAS is None:
        pytest.fail("ptxas is not on PATH (CI has CUDA 13.0's)")
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    res = subprocess.run([PTXAS, f"-arch={arch}", "-v", str(src), "-o",
                          str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stderr


def resources(log):
    """(registers, [spill store bytes, spill load bytes], stack frame bytes) from ptxas -v."""
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill", log)]
    stack = int(re.search(r"(\d+) bytes stack frame", log).group(1))
    return regs, spills, stack
