"""The notebooks in notebooks/ run headless, top to bottom, without errors.

Each notebook is executed in memory with nbclient (the files on disk are not touched) in
a fresh ``python3`` kernel whose environment has ``NUMBA_WS_INTERPRET=1``, so kernels run
in the NumPy interpreter and the ``# gpu`` cells do nothing, GPU or not. The repository
root is put on the kernel's PYTHONPATH so that ``import numba_ws`` finds this checkout
even when it is not installed.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import nbclient
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = ["01_first_tile_kernel.ipynb", "02_warp_specialized_gemm.ipynb",
             "03_custom_epilogue.ipynb"]
KERNEL = "python3"
CELL_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def kernel_name():
    """The ``python3`` kernel spec, installed for this user once if no spec exists."""
    from jupyter_client.kernelspec import find_kernel_specs
    if KERNEL not in find_kernel_specs():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user"], check=True,
                       stdout=subprocess.DEVNULL)
        assert KERNEL in find_kernel_specs(), "ipykernel install did not register python3"
    return KERNEL


def _kernel_env():
    env = dict(os.environ)
    env["NUMBA_WS_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    env.pop("MPLBACKEND", None)   # matplotlib (if installed) uses the inline backend
    return env


def test_notebook_list_is_complete():
    assert sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_outputs_are_cleared(name):
    nb = nbformat.read(str(NOTEBOOK_DIR / name), as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{name}: cells {dirty} have outputs; clear them before committing"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, kernel_name):
    nb = nbformat.read(str(NOTEBOOK_DIR / name), as_version=4)
    gpu_cells = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# gpu")]
    assert all("if gpu_available():" in c.source for c in gpu_cells), \
        f"{name}: a '# gpu' cell is not guarded by 'if gpu_available():'"
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name=kernel_name, allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    start = time.perf_counter()
    try:
        client.execute(env=_kernel_env())
    except nbclient.exceptions.CellExecutionError as e:
        pytest.fail(f"{name}: a cell raised\n{e}", pytrace=False)
    elapsed = time.perf_counter() - start
    print(f"{name}: {elapsed:.1f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"{name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
