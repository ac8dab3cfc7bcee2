"""The launch index (runtime/warm.py) on the CPU: its key changes with everything the
specialization depends on and nothing else, and a second process launches a kernel from
it with numba-cuda made unimportable (a fake driver stands in for the GPU: the cubin the
first process "linked" is what the second loads)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.runtime import binding, interop, launcher, warm
from test_interop import CAI

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def scale(x, y, n, alpha: ws.constexpr, B: ws.constexpr):
    i = ws.program_id(0) * B
    ws.store(y, (i,), ws.load(x, (i,), (B,)) * alpha)


def scale_other(x, y, n, alpha: ws.constexpr, B: ws.constexpr):
    i = ws.program_id(0) * B
    ws.store(y, (i,), ws.load(x, (i,), (B,)) * alpha + 1.0)


def _key(fn=scale, x=None, n=7, cc=(9, 0, "a"), **meta):
    x = CAI((1024,), "<f4", ptr=0x7F0000100000) if x is None else x
    y = CAI((1024,), "<f4", ptr=0x7F0000200000)
    meta = {"alpha": 2.0, "B": 256, **meta}
    bound = binding.bind(fn, (x, y, n), meta)
    described = {k: interop.describe(v, k) for k, v in bound.args.items() if k in "xy"}
    return warm.launch_key(fn, bound, described, cc)


@pytest.fixture(autouse=True)
def driver(monkeypatch):
    monkeypatch.setattr(launcher, "driver_version", lambda: 12080)


def test_key_is_stable_and_changes_with_what_the_code_depends_on():
    base = _key()
    assert base == _key() == _key(x=CAI((1024,), "<f4", ptr=0x7F0000300000))  # new pointer
    assert base == _key(n=9)                                   # a scalar's value
    variants = [_key(fn=scale_other), _key(n=7.0), _key(n=np.float32(7)), _key(alpha=3.0),
                _key(B=128), _key(x=CAI((1024,), "<f2", ptr=0x7F0000100000)),
                _key(x=CAI((1024,), "<f4", ptr=0x7F0000100004)),     # 4-byte aligned
                _key(cc=(8, 0)), _key(num_consumer_groups=1)]
    with knobs.scope(NUMBA_WS_DISABLE="1"):
        variants.append(_key())
    with knobs.scope(NUMBA_WS_DEBUG_BARRIERS="1"):
        variants.append(_key())
    assert base not in variants
    assert _key(n=np.int64(3)) == base                       # a NumPy int types as int
    assert len(set(variants)) == len(variants) - 1           # n=7.0 and np.float32: float


def test_other_driver_other_key(monkeypatch):
    base = _key()
    monkeypatch.setattr(launcher, "driver_version", lambda: 13000)
    assert _key() != base


def test_a_kernel_without_source_has_no_key():
    ns = {"ws": ws}
    exec(textwrap.dedent('''
        def k(x, y, n, alpha: ws.constexpr, B: ws.constexpr):
            pass
    '''), ns)
    assert _key(fn=ns["k"]) is None


SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    if {block_numba}:
        sys.modules["numba"] = None                 # any import of numba-cuda fails
    sys.path.insert(0, {tests!r})
    import numba_ws as ws
    from numba_ws.runtime import jit as jit_mod, launcher, ptxas
    from test_interop import CAI
    from test_launch_index import scale
    log = {{"linked": 0, "loaded": [], "launches": []}}

    class Function:
        def set_max_dynamic_smem(self, n):
            pass
        def raw_launch(self):
            return None                           # launches through launch() only
        def launch(self, grid, block, smem, stream, params):
            log["launches"].append([list(grid), list(block), smem])

    class Module:
        def __init__(self, image, name):
            log["loaded"].append(hashlib.sha256(image).hexdigest())
        def get_function(self, entry):
            return Function()

    def compile_cubin(ptx):
        log["linked"] += 1
        return b"cubin of " + hashlib.sha256(ptx.encode()).digest()

    launcher.driver_version = lambda: 12080
    ptxas.cubin, launcher.CudaModule = compile_cubin, Module
    jit_mod._device_cc = lambda: (9, 0, "a")
    jit_mod._Loaded.tmap_pointer = lambda self, values: 0x1000
    k = ws.jit(scale)
    x = CAI((1024,), "<f4", ptr=0x7F0000100000); y = CAI((1024,), "<f4", ptr=0x7F0000200000)
    k[(4,)](x, y, 5, alpha=2.0, B=256)
    k[(4,)](x, y, 6, alpha=2.0, B=256)
    log["numba"] = "numba.cuda" in sys.modules
    print(json.dumps(log))
""")


def _run(home, block_numba):
    code = SCRIPT.format(tests=os.path.join(ROOT, "tests"), block_numba=block_numba)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "NUMBA_WS_HOME": str(home), "PYTHONPATH": ROOT},
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    import json
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_second_process_launches_from_the_index_without_numba(tmp_path):
    first = _run(tmp_path, block_numba=False)
    assert first["numba"] and first["linked"] == 1 and len(first["loaded"]) == 1
    second = _run(tmp_path, block_numba=True)
    assert not second["numba"] and second["linked"] == 0
    assert second["loaded"] == first["loaded"]             # the first process's cubin
    assert second["launches"] == first["launches"] and len(second["launches"]) == 2
    assert second["launches"][0][0] == [4, 1, 1]
