"""Issue 17 item 4: kernels without source files (``exec``, ``python -c``, a REPL) compile,
run and explain themselves; they are cached in memory only (the disk cache is keyed by
source text, which they lack)."""
import subprocess
import sys

import numpy as np

import numba_ws as ws
from numba_ws.runtime.binding import bind
from numba_ws.runtime.specialize import cache_key

SOURCE = '''
def scale(x, y, BM: ws.constexpr, BN: ws.constexpr):
    r = ws.program_id(0) * BM
    t = ws.load(x, (r, 0), (BM, BN))
    ws.store(y, (r, 0), t * FACTOR)
'''


def _exec_kernel(factor):
    ns = {"ws": ws, "FACTOR": factor}
    exec(SOURCE, ns)
    return ns["scale"]


def test_an_exec_kernel_runs_compiles_and_explains():
    fn = _exec_kernel(2.0)
    x = np.random.default_rng(0).standard_normal((100, 64)).astype(np.float32)
    y = np.full_like(x, np.nan)
    ws.jit(fn)[(2,)](x, y, BM=64, BN=64)
    assert np.array_equal(y, x * 2.0)
    assert ".entry" in ws.jit(fn).inspect_ptx(x, y, BM=64, BN=64)
    text = str(ws.jit(fn).explain(x, y, BM=64, BN=64))
    assert "no source text for 'scale'" in text
    assert "t = ws.load(...) # async_task 0" in text


def test_kernels_without_source_stay_out_of_the_disk_cache_and_apart():
    keys = []
    for factor in (2.0, 3.0):
        fn = _exec_kernel(factor)
        key, on_disk = cache_key(fn, [], bind(fn, (None, None), {"BM": 64, "BN": 64}),
                                 (9, 0), {})
        assert not on_disk
        keys.append(key)
    assert keys[0] != keys[1]


def test_python_dash_c():
    code = ("import numpy as np, numba_ws as ws\n"
            "def k(x, y, B: ws.constexpr):\n"
            "    ws.store(y, (0,), ws.load(x, (0,), (B,)) + 1.0)\n"
            "x = np.arange(8, dtype=np.float32); y = np.zeros(8, np.float32)\n"
            "ws.jit(k)[(1,)](x, y, B=8)\n"
            "print(y.tolist()); print(len(ws.jit(k).inspect_ptx(x, y, B=8)) > 0)\n"
            "print('no source text' in str(ws.jit(k).explain(x, y, B=8)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:3] == [str([float(i + 1) for i in range(8)]), "True", "True"]
