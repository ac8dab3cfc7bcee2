"""Every NUMBA_WS_* knob: typed parsing, scoped setting, and that the interpreter switch
takes effect on the launch path."""
import os

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.runtime.binding import bind
import kernels


def test_every_knob_is_documented_and_typed():
    assert set(knobs.KNOBS) == {
        "NUMBA_WS_INTERPRET", "NUMBA_WS_DUMP", "NUMBA_WS_TIMING", "NUMBA_WS_PRINT_AUTOTUNING",
        "NUMBA_WS_ALWAYS_COMPILE", "NUMBA_WS_HOME", "NUMBA_WS_DISABLE", "NUMBA_WS_CC",
        "NUMBA_WS_PTXAS", "NUMBA_WS_NATIVE_LAUNCH", "NUMBA_WS_DEFER_ML_DTYPES",
        "NUMBA_WS_DEBUG_BARRIERS", "NUMBA_WS_DEBUG_TIMEOUT_CYCLES",
        "NUMBA_WS_DEBUG_DROP_RELEASE"}
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    for name in knobs.KNOBS:
        assert f"`{name}" in readme, name


def test_scope_sets_and_restores():
    before = os.environ.get("NUMBA_WS_TIMING")
    with knobs.scope(NUMBA_WS_TIMING=True, NUMBA_WS_HOME="/tmp/x", NUMBA_WS_DUMP="k"):
        assert knobs.timing() and knobs.home() == "/tmp/x"
        assert knobs.dump_enabled("k") and not knobs.dump_enabled("other")
    assert os.environ.get("NUMBA_WS_TIMING") == before
    with pytest.raises(KeyError):
        with knobs.scope(NUMBA_WS_NOPE=1):
            pass


@pytest.mark.parametrize("raw,value", [("1", True), ("true", True), ("0", False), ("", False)])
def test_bool_parsing(raw, value):
    with knobs.scope(NUMBA_WS_ALWAYS_COMPILE=raw or None):
        assert knobs.always_compile() is value


class _DeviceLike:
    """An object that looks like a device array (no host interface)."""

    def __init__(self, shape):
        self.shape, self.ndim, self.dtype = shape, len(shape), np.dtype(np.float16)
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f2", "version": 3,
                                         "data": (1 << 20, False), "strides": None}


def test_interpret_knob_forces_the_interpreter():
    k = ws.jit(kernels.matmul)
    args = (_DeviceLike((64, 64)), _DeviceLike((64, 64)), _DeviceLike((64, 64)))
    bound = bind(k.fn, args, dict(BM=64, BN=64, BK=32))
    with knobs.scope(NUMBA_WS_INTERPRET=False):
        assert not k._runs_interpreted(bound)
    with knobs.scope(NUMBA_WS_INTERPRET=True):
        assert k._runs_interpreted(bound)


def test_cc_knob_parsing():
    with knobs.scope(NUMBA_WS_CC="8.0"):
        assert knobs.target_cc() == (8, 0)
    with knobs.scope(NUMBA_WS_CC="9.0"):
        assert knobs.target_cc() == (9, 0, "a")
    with knobs.scope(NUMBA_WS_CC="nine"):
        with pytest.raises(ValueError, match="NUMBA_WS_CC"):
            knobs.target_cc()


def test_launch_fingerprint_sees_every_launch_knob(monkeypatch):
    for name in knobs.LAUNCH_KNOBS:
        monkeypatch.delenv(name, raising=False)
    base = knobs.launch_fingerprint()
    assert base == (None,) * len(knobs.LAUNCH_KNOBS)
    for i, name in enumerate(knobs.LAUNCH_KNOBS):
        with knobs.scope(**{name: "1"}):
            changed = knobs.launch_fingerprint()
            assert changed != base and changed[i] is not None
        monkeypatch.setenv(name, "8.0")
        assert knobs.launch_fingerprint()[i] is not None
        monkeypatch.delenv(name)
    assert knobs.launch_fingerprint() == base
    monkeypatch.setattr(knobs, "_RAW_KEYS", None)       # no os.environ._data: plain reads
    monkeypatch.setenv("NUMBA_WS_CC", "8.0")
    assert knobs.launch_fingerprint()[-1] == "8.0"


def test_timing_knob_prints_each_pass_and_each_compile_phase(capsys):
    import numpy as np
    import numba_ws as ws
    import kernels
    z = np.zeros((256, 256), np.float16)
    with knobs.scope(NUMBA_WS_TIMING=True):
        ws.jit(kernels.matmul).inspect_ptx(z, z, z, BM=128, BN=128, BK=64)
    out = capsys.readouterr().out
    from numba_ws.passes.pipeline import pass_names
    for name in pass_names():
        assert f"numba_ws: pass {name}" in out
    assert "Numba front end" in out and "NVVM (LLVM IR -> PTX)" in out
    ws.jit(kernels.matmul).inspect_ptx(z, z, z, BM=128, BN=128, BK=64)
    assert "numba_ws:" not in capsys.readouterr().out           # off by default
