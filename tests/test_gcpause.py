"""The cyclic collector is paused over a compile and enabled again after it, also when the
compile raises and when a caller had paused it already."""
import gc

import numpy as np
import pytest

import numba_ws as ws
from numba_ws.runtime import specialize
from numba_ws.runtime.gcpause import collector_paused


def test_paused_inside_enabled_after_and_after_an_error():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the inner block must not enable the outer one's pause"
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError):
        with collector_paused():
            1 / 0
    assert gc.isenabled()


def test_a_caller_that_disabled_the_collector_keeps_it_disabled():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_compile_runs_without_the_collector_and_restores_it(monkeypatch):
    seen = []
    real = specialize.run_stage

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(specialize, "run_stage", spy)

    @ws.jit
    def copy(x, y, B: ws.constexpr):
        i = ws.program_id(0) * B
        ws.store(y, (i,), ws.load(x, (i,), (B,)))

    x = np.zeros(256, np.float32)
    assert ".entry" in copy.inspect_ptx(x, x.copy(), B=128)
    assert seen == [False]
    assert gc.isenabled()
