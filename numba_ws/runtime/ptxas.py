"""A whole-program cubin of a kernel's PTX, made by ``ptxas`` when one is installed.

Why not the driver's linker (``cuLinkAddData`` of the PTX, the first way the launch index
got its cubin): a linker input is compiled as relocatable code, like ``ptxas -c``, and
relocatable code ignores ``setmaxnreg`` (ptxas C7504, "to maintain compatibility across
compilation units") and serialises every ``wgmma.mma_async`` (C7509, "presence of Extern
calls"): a wait after each wgmma. On the H200 (2026-12-04) that cost the 4096^3 GEMM 7 %
(0.87x vs 0.93x cuBLAS) and attention 1-2 %. ``cuModuleLoadData`` of the PTX and this
module's ``ptxas`` run both compile the whole program; only ``ptxas`` hands back the
cubin, which the launch index stores so a later process skips the compile.

``NUMBA_WS_PTXAS`` (knobs.py) names the ptxas; empty: ``ptxas`` on PATH, then
``$CUDA_HOME/bin``; ``0``: never (the driver compiles the PTX at every first load, its
own ComputeCache permitting).
"""
import os
import re
import shutil
import subprocess
import tempfile

from .. import knobs

_TARGET = re.compile(r"^\s*\.target\s+(sm_\w+)", re.M)


def find_ptxas():
    """The ptxas to run, or None."""
    chosen = knobs.ptxas()
    if chosen == "0":
        return None
    if chosen:
        return chosen if os.path.isfile(chosen) else None
    found = shutil.which("ptxas")
    home = knobs.cuda_home()
    if not found and home and os.path.isfile(os.path.join(home, "bin", "ptxas")):
        found = os.path.join(home, "bin", "ptxas")
    return found


def command(exe, arch, src, out):
    """The ptxas command line: whole program (no ``-c``), default optimisation."""
    return [exe, f"-arch={arch}", src, "-o", out]


#: PTX text -> Future of its cubin, for the runs :func:`start` began (cubin pops them)
_STARTED = {}
_POOL = []
#: started runs kept at most; when full, all are forgotten (a later cubin() runs ptxas again)
MAX_STARTED = 64


def start(ptx: str):
    """Begin :func:`cubin` of ``ptx`` on a background thread; the next ``cubin(ptx)``
    waits for that run instead of starting another. ptxas is a subprocess, so runs begun
    one after another compile in parallel with each other and with the caller's Python
    (the autotuner compiles config i+1 while ptxas assembles config i)."""
    if ptx in _STARTED or find_ptxas() is None:
        return
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor
        _POOL.append(ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1)),
                                        thread_name_prefix="numba_ws_ptxas"))
    if len(_STARTED) >= MAX_STARTED:
        _STARTED.clear()
    _STARTED[ptx] = _POOL[0].submit(_assemble, ptx)


def cubin(ptx: str) -> bytes:
    """The cubin of ``ptx`` for its own ``.target`` (e.g. sm_90a), compiled as one whole
    program; b"" when there is no ptxas or it fails (an older ptxas than the PTX
    version, say): the caller then loads the PTX itself. A run :func:`start` began for
    the same text is waited for, not repeated."""
    started = _STARTED.pop(ptx, None)
    if started is not None:
        return started.result()
    return _assemble(ptx)


def _assemble(ptx: str) -> bytes:
    exe = find_ptxas()
    target = _TARGET.search(ptx)
    if exe is None or target is None:
        return b""
    with tempfile.TemporaryDirectory(prefix="numba_ws_ptxas") as tmp:
        src, out = os.path.join(tmp, "kernel.ptx"), os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        try:
            res = subprocess.run(command(exe, target.group(1), src, out),
                                 capture_output=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired):
            return b""
        if res.returncode or not os.path.isfile(out):
            return b""
        with open(out, "rb") as f:
            return f.read()
