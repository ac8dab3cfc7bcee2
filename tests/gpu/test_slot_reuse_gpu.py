"""A persistent loop whose consumers read TMA-filled slots into registers (``ld.shared``,
generic proxy) while the producer refills them (TMA, async proxy): the H200 fuzzer's seed
16450580 (2026-12-03) read the next tile's bytes into this tile's registers (int64 and
float64 loads, one slot) until the release got ``fence.proxy.async.shared::cta``.
NaN-poisoned outputs, float64 references, 1 and 2 consumer groups."""
import numpy as np
import pytest

import numba_ws as ws

cp = pytest.importorskip("cupy")


def scaled_rows(a, x, out, B: ws.constexpr):
    for t in range(ws.program_id(0), ws.cdiv(out.shape[0], B), ws.num_programs(0)):
        off = t * B
        v = ws.load(x, (off,), (B,)).astype(ws.float32)
        w = ws.load(a, (off,), (B,), mask=ws.arange(0, B) < a.shape[0] - off, other=0.5)
        ws.store(out, (off,), v * w)


@pytest.mark.parametrize("groups,buffers", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("B", [1024, 256])
@pytest.mark.parametrize("dtype", ["int64", "float64", "int32"])
def test_persistent_loop_reads_each_tile_once(dtype, B, groups, buffers):
    rng = np.random.default_rng()
    n = 8192 + 300
    a = rng.uniform(-2, 2, n).astype(np.float16)
    x = rng.integers(-100, 100, n).astype(dtype)
    out = cp.full(n, cp.nan, cp.float16)
    ws.jit(scaled_rows)[(2,)](cp.asarray(a), cp.asarray(x), out, B=B,
                              num_consumer_groups=groups, num_buffers_warp_spec=buffers)
    ref = x.astype(np.float64) * a.astype(np.float64)
    got = cp.asnumpy(out).astype(np.float64)
    assert not np.isnan(got).any()
    bad = np.flatnonzero(np.abs(got - ref) > 2e-3 * np.abs(ref) + 1e-3)
    assert bad.size == 0, f"{bad.size} wrong, first at {bad[:8]}: {got[bad[:4]]} vs {ref[bad[:4]]}"
