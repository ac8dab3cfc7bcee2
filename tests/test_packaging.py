"""The wheel (issue 20 item 2): ``python -m build`` of the checkout gives a pure-Python
wheel with every module, the dependency pins of setup.cfg and the extras cupy / torch /
notebooks / test; installed into a fresh virtual environment outside the checkout, it
runs ``python -m numba_ws``.

The build is the one ``python -m build`` makes (an sdist, then the wheel from the sdist,
so a file the sdist leaves out is missing from the wheel too), from a copy of the files
git tracks or would track, without build isolation (the installed setuptools: no
download). The environment is made with ``--system-site-packages`` so numba-cuda, NumPy
and torch need not be installed again; the wheel goes in with ``--no-deps``, and the test
checks that ``import numba_ws`` finds the wheel's copy, not this checkout.
"""
import configparser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = {"cupy", "torch", "notebooks", "test"}


def _source_files(root):
    """Paths (relative) git tracks or would track; the whole tree less caches without git."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
        return [p for p in out.decode().split("\0") if p and (root / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", "build", "dist", "__pycache__", ".whl", ".venv"}
        return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                and not skip & set(p.relative_to(root).parts)
                and not any(part.endswith(".egg-info") for part in p.parts)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(source copy, wheel path) of one ``python -m build`` run."""
    base = tmp_path_factory.mktemp("packaging")
    src, dist = base / "src", base / "dist"
    for rel in _source_files(ROOT):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    run = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                          str(dist), str(src)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"python -m build failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
    return src, wheels[0]


def _metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        info = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(info).decode()
    headers = text.split("\n\n", 1)[0].splitlines()
    return [line.split(": ", 1) for line in headers if ": " in line]


def test_the_wheel_is_pure_python(built):
    _, wheel = built
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        tags = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    assert "Root-Is-Purelib: true" in tags
    assert not [n for n in names if n.endswith((".so", ".pyd", ".dll", ".dylib"))]


def test_the_wheel_has_every_module_of_the_package(built):
    """Every .py file under numba_ws/ (a subpackage without __init__.py would be left out
    by setup.cfg's find:), and nothing but the package and its dist-info."""
    src, wheel = built
    modules = {str(p.relative_to(src)) for p in (src / "numba_ws").rglob("*.py")}
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    packaged = {n for n in names if n.startswith("numba_ws/")}
    assert modules == packaged, {"missing": sorted(modules - packaged),
                                 "extra": sorted(packaged - modules)}
    assert {n.split("/")[0] for n in names} == {"numba_ws", f"{wheel.name.split('-')[0]}-"
                                                f"{wheel.name.split('-')[1]}.dist-info"}
    subpackages = {str(p.parent.relative_to(src)) for p in (src / "numba_ws").rglob("*.py")}
    assert {"numba_ws/codegen", "numba_ws/passes", "numba_ws/runtime", "numba_ws/language",
            "numba_ws/interpreter"} <= subpackages


def test_the_wheel_carries_setup_cfgs_pins_and_extras(built):
    src, wheel = built
    fields = _metadata(wheel)
    required = {str(Requirement(v)) for k, v in fields
                if k == "Requires-Dist" and "extra ==" not in v}
    cfg = configparser.ConfigParser()
    cfg.read(src / "setup.cfg")
    declared = {str(Requirement(line)) for line in cfg["options"]["install_requires"].splitlines()
                if line.strip() and not line.strip().startswith("#")}
    assert required == declared
    pins = {Requirement(r).name: str(Requirement(r).specifier) for r in required}
    # numba-cuda 0.30.4 calls np.row_stack (gone in NumPy 2.5); NVVM 13.5's PTX 9.5 is
    # rejected by ptxas 13.0 and the CUDA 13.0 driver: these pins must stay.
    assert "<2.5" in pins["numpy"].split(",")
    assert pins["numba-cuda"] == "==0.30.4"
    assert pins["cuda-toolkit"] == pins["nvidia-nvjitlink"] == "==13.0.*"
    assert {v for k, v in fields if k == "Provides-Extra"} == EXTRAS
    torch_extra = [v for k, v in fields if k == "Requires-Dist" and 'extra == "torch"' in v]
    assert torch_extra and torch_extra[0].startswith("torch")


def test_the_installed_wheel_runs_the_demo_outside_the_checkout(built, tmp_path):
    _, wheel = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # the interpreter's pip (seen through --system-site-packages) installs into the venv
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                              str(wheel)], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    where = subprocess.run([python, "-c", "import numba_ws, numba_ws.torch, numba_ws.plan_view; "
                            "print(numba_ws.__file__)"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert where.returncode == 0, where.stderr
    path = Path(where.stdout.strip()).resolve()
    assert path.is_relative_to(venv.resolve()) and not path.is_relative_to(ROOT)
    demo = subprocess.run([python, "-m", "numba_ws"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert demo.stdout.strip().splitlines()[-1] == "OK"
