"""The launch fast path (runtime/fastpath.py) on the CPU: a fake specialization records
what each launch would send to the driver; the fast path must send exactly what the slow
path sends, and fall back to it whenever a decision could change."""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.runtime import binding, jit as jit_mod
from test_interop import CAI


def scale_rows(x, y, n, alpha: ws.constexpr, BM: ws.constexpr):
    pass


class FakeLoaded:
    def __init__(self, layout, log):
        self.layout, self.log = layout, log

    def launch(self, dims, stream, values):
        self.log.append((dims, stream, [getattr(v, "ptr", v) for v in values]))


@pytest.fixture
def kernel(monkeypatch):
    k = ws.jit(scale_rows)
    k.slow_paths, k.specializations, k.log = 0, {}, []

    def specialize(bound, described, cc):
        k.slow_paths += 1
        layout = jit_mod.fastpath.layout_key(described)
        return k.specializations.setdefault((layout, knobs.disable()), FakeLoaded(layout, k.log))
    monkeypatch.setattr(k, "specialize", specialize)
    monkeypatch.setattr(jit_mod, "_device_cc", lambda: (9, 0, "a"))
    return k


def launches(k):
    return k.log


def test_same_signature_skips_binding(kernel, monkeypatch):
    x, y = CAI((64, 8), "<f2", ptr=0x1000), CAI((64, 8), "<f2", ptr=0x2000)
    kernel[(4,)](x, y, 7, alpha=0.5, BM=64)
    calls = []
    monkeypatch.setattr(jit_mod, "bind", lambda *a: calls.append(a) or binding.bind(*a))
    x2 = CAI((64, 8), "<f2", ptr=0x3000)
    kernel[(4,)](x2, y, 9, alpha=0.5, BM=64)
    assert calls == [] and kernel.slow_paths == 1
    (dims1, s1, v1), (dims2, s2, v2) = launches(kernel)
    assert dims1 == dims2 == (4, 1, 1) and s1 == s2 == 0
    assert v1 == [0x1000, 0x2000, 7, 0, 64] and v2 == [0x3000, 0x2000, 9, 0, 64]


def test_new_layout_or_knob_or_constexpr_takes_the_slow_path(kernel):
    y = CAI((64, 8), "<f2", ptr=0x2000)
    kernel[(4,)](CAI((64, 8), "<f2", ptr=0x1000), y, 1, alpha=0.5, BM=64)
    kernel[(4,)](CAI((64, 8), "<f2", ptr=0x1002), y, 1, alpha=0.5, BM=64)   # 2-B aligned
    assert kernel.slow_paths == 2 and len(kernel.specializations) == 2
    with knobs.scope(NUMBA_WS_DISABLE="1"):
        kernel[(4,)](CAI((64, 8), "<f2", ptr=0x1000), y, 1, alpha=0.5, BM=64)
    assert kernel.slow_paths == 3 and len(kernel.specializations) == 3
    kernel[(4,)](CAI((64, 8), "<f2", ptr=0x1000), y, 1, 0.5, 128)           # positional
    kernel[(4,)](CAI((64, 8), "<f2", ptr=0x1000), y, 1, 0.5, 64)            # BM changed
    assert kernel.slow_paths == 5
    assert [v[-1] for _, _, v in launches(kernel)][-2:] == [128, 64]


def test_new_strides_with_the_same_layout_reuse_the_specialization(kernel):
    y = CAI((64, 8), "<f2", ptr=0x2000)
    kernel[(4,)](CAI((64, 8), "<f2", ptr=0x1000), y, 1, alpha=0.5, BM=64)
    wider = CAI((64, 8), "<f2", ptr=0x1000, strides=(32, 2))      # same layout key
    kernel[(4,)](wider, y, 1, alpha=0.5, BM=64)
    kernel[(4,)](wider, y, 2, alpha=0.5, BM=64)
    assert kernel.slow_paths == 2 and len(kernel.specializations) == 1
    assert [v[0] for _, _, v in launches(kernel)] == [0x1000] * 3


def test_callable_grid_is_called_on_every_launch(kernel):
    x = CAI((64, 8), "<f2", ptr=0x1000)
    sizes = iter([3, 5])
    grid = lambda meta: (next(sizes) * meta["BM"] // 64,)   # noqa: E731
    kernel[grid](x, x, 1, alpha=0.5, BM=64)
    kernel[grid](x, x, 1, alpha=0.5, BM=64)
    assert [d for d, _, _ in launches(kernel)] == [(3, 1, 1), (5, 1, 1)] and kernel.slow_paths == 1


def test_bad_arguments_still_fail_on_the_fast_path(kernel):
    x = CAI((64, 8), "<f2", ptr=0x1000)
    kernel[(4,)](x, x, 1, alpha=0.5, BM=64)
    with pytest.raises(Exception, match="'x'"):
        kernel[(4,)](CAI((64, 8), "<c8", ptr=0x1000), x, 1, alpha=0.5, BM=64)
    with pytest.raises(Exception, match="host"):
        kernel[(4,)](np.zeros((64, 8), np.float16), x, 1, alpha=0.5, BM=64)
