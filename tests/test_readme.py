"""The README's first example runs as written: on this CPU machine with NumPy arrays in
the interpreter (it picks CuPy and the compiled kernel where a GPU is present)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def first_kernel_example():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## A first kernel"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_first_example_runs_and_computes_the_product(tmp_path):
    code = first_kernel_example()
    assert "@ws.jit" in code and "explain(" in code
    script = tmp_path / "readme_example.py"
    check = (
        "\nimport numpy as _np\n"
        "_a, _b, _c = (x.get() if hasattr(x, 'get') else x for x in (a, b, c))\n"
        "_ref = _a.astype(_np.float64) @ _b.astype(_np.float64)\n"
        "_err = _np.abs(_c.astype(_np.float64) - _ref).max() / _np.abs(_ref).max()\n"
        "print('README-EXAMPLE-ERROR', _err)\n")
    script.write_text(code + check)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("NUMBA_WS_INTERPRET", None)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "# async_task" in out.stdout          # explain() printed the task listing
    err = float(re.search(r"README-EXAMPLE-ERROR (\S+)", out.stdout).group(1))
    assert np.isfinite(err) and err < 1e-2, err
