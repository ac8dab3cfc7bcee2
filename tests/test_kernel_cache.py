"""The compiled-kernel cache across processes: a second process gets the GEMM from disk
without compiling; NUMBA_WS_ALWAYS_COMPILE bypasses it; a corrupt entry is rebuilt."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = textwrap.dedent("""
    import sys, time, numpy as np
    sys.path.insert(0, {tests!r})
    import numba_ws as ws, kernels
    from numba_ws.runtime import interop
    from numba_ws.runtime.binding import bind
    k = ws.jit(kernels.matmul)
    a = np.zeros((256, 128), np.float16); b = np.zeros((128, 512), np.float16)
    c = np.zeros((256, 512), np.float16)
    bound = bind(k.fn, (a, b, c), dict(BM=128, BN=256, BK=64))
    described = {{n: interop.describe(v, n)._replace(host=False)
                 for n, v in bound.args.items() if n in "abc"}}
    t = time.perf_counter()
    key, art, cached = k.artifact(bound, described, (9, 0, "a"))
    print("CACHED" if cached else "COMPILED", key, round(time.perf_counter() - t, 3),
          "wgmma.mma_async" in art.ptx)
""")


def _run(home, **env):
    code = SCRIPT.format(tests=os.path.join(ROOT, "tests"))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "NUMBA_WS_HOME": str(home),
                              "PYTHONPATH": ROOT, **env}, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.split()


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("ws_home")


def test_second_process_loads_without_compiling(home):
    first = _run(home)
    second = _run(home)
    assert first[0] == "COMPILED" and second[0] == "CACHED"
    assert first[1] == second[1] and first[3] == second[3] == "True"
    assert float(second[2]) < float(first[2])


def test_always_compile_bypasses_the_cache(home):
    assert _run(home, NUMBA_WS_ALWAYS_COMPILE="1")[0] == "COMPILED"


def test_corrupt_entry_is_rebuilt(home):
    key = _run(home)[1]
    path = os.path.join(str(home), "cache", key[:2], key + ".bin")
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"garbage")
    assert _run(home)[0] == "COMPILED"
    assert _run(home)[0] == "CACHED"
