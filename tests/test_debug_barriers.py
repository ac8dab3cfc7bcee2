"""Debug builds on the CPU (issue 19): NUMBA_WS_DEBUG_BARRIERS bounds every mbarrier wait
(PTX checked and assembled for sm_90a and sm_80), a normal build is unchanged, the debug
knobs keep debug and normal kernels apart, NUMBA_WS_DEBUG_DROP_RELEASE breaks the schedule
the way the simulator sees it, the host decodes the device record; and two processes
compiling one kernel at the same time into a fresh cache both get the right kernel.
The GPU side is tests/gpu/test_debug_barriers_gpu.py."""
import os
import re
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.codegen import debug
from numba_ws.errors import WSUsageError
from numba_ws.runtime import cache
from numba_ws.runtime.launcher import WSBarrierTimeout
from numba_ws.verify_api import check_state
from numba.cuda.core import ir
from ptx_tools import assemble, same_code
import kernels

F16 = np.float16
OFF = dict(NUMBA_WS_DEBUG_BARRIERS=None, NUMBA_WS_DEBUG_TIMEOUT_CYCLES=None,
           NUMBA_WS_DEBUG_DROP_RELEASE=None)
UNBOUNDED = ("WS_WAIT_LOOP:", "WS_TEST_WAIT_LOOP:")     # the normal build's wait loops


def _zeros(*shape):
    return np.zeros(shape, F16)


# name -> (kernel, args, meta, ptxas arch)
CASES = {
    "tma_g2": (kernels.matmul, (_zeros(256, 256), _zeros(256, 256), _zeros(256, 256)),
               dict(BM=128, BN=256, BK=64, num_buffers_warp_spec=3), "sm_90a"),
    "ping_pong": (kernels.matmul_persistent, (_zeros(256, 256),) * 3,
                  dict(BM=128, BN=128, BK=64, GROUP_M=8, ping_pong=1), "sm_90a"),
    # N = 300: b's rows are 600 bytes, not a multiple of 16, so b goes through cp.async
    "cp_async": (kernels.matmul, (_zeros(130, 200), _zeros(200, 300), _zeros(130, 300)),
                 dict(BM=128, BN=256, BK=64), "sm_90a"),
    # N = 301: 602-byte rows of b, read by ld.global (a by cp.async) in one channel
    "ld_global": (kernels.matmul, (_zeros(130, 200), _zeros(200, 301), _zeros(130, 301)),
                  dict(BM=128, BN=256, BK=64), "sm_90a"),
    "sm80": (kernels.matmul, (_zeros(256, 256),) * 3,
             dict(BM=128, BN=128, BK=64, cc=(8, 0)), "sm_80"),
}


def _ptx(case, **knob_values):
    fn, args, meta, _ = CASES[case]
    with knobs.scope(**{**OFF, **knob_values}):
        return same_code(ws.jit(fn).inspect_ptx(*args, **meta))


@pytest.fixture(scope="module")
def normal():
    return {}


def _normal(normal, case):
    if case not in normal:
        normal[case] = _ptx(case)
    return normal[case]


def _info(ptx):
    """The ``__ws_debug_info`` JSON from its PTX initializer."""
    m = re.search(r"__ws_debug_info\[\d+\] = \{([\d, ]+)\}", ptx)
    assert m, "no __ws_debug_info in the PTX"
    return debug.decode_info(bytes(int(x) for x in m.group(1).split(",")))


@pytest.mark.parametrize("case", list(CASES))
def test_debug_build_bounds_every_wait_and_assembles(case, normal, tmp_path):
    plain = _normal(normal, case)
    ptx = _ptx(case, NUMBA_WS_DEBUG_BARRIERS=True, NUMBA_WS_DEBUG_TIMEOUT_CYCLES=123456789)
    assert any(plain.count(label) for label in UNBOUNDED), "the normal build has no wait?"
    assert not any(label in ptx for label in UNBOUNDED), "an unbounded wait is left"
    probe = "try_wait" if CASES[case][3] == "sm_90a" else "test_wait"
    waits = ptx.count(f"mbarrier.{probe}.parity")
    assert waits >= 2 and ptx.count("%clock64") >= waits and ptx.count("\texit;") >= 1
    assert "123456789" in ptx                                  # the timeout is the knob's
    assert ".visible .global .align 8 .b8 __ws_debug_record[64];" in ptx
    for op in ("atom.global.cas.b32", "red.global.add.u32", "ld.volatile.global.u32"):
        assert op in ptx, op
    info = _info(ptx)
    assert info["kernel"] == CASES[case][0].__name__ and info["timeout_cycles"] == 123456789
    assert info["channels"] and info["channels"][0].startswith("channel 0:")
    assemble(ptx, tmp_path, CASES[case][3])


WAITS = {"gpu_producer_acquire", "gpu_consumer_wait", "gpu_cp_async_acquire", "gpu_turn_wait"}


def _lowered_calls(case, **knob_values):
    """Names of the intrinsics the kernel calls after ws_lower_tiles."""
    fn, args, meta, _ = CASES[case]
    with knobs.scope(**{**OFF, **knob_values}):
        state = ws.jit(fn).partition(*args, stop_after="ws_lower_tiles", **meta)
    return {s.value.name for blk in state.func_ir.blocks.values() for s in blk.body
            if isinstance(s, ir.Assign) and isinstance(s.value, ir.Global)}


@pytest.mark.parametrize("case,kinds", [
    ("tma_g2", {"gpu_producer_acquire", "gpu_consumer_wait"}),
    ("ping_pong", {"gpu_producer_acquire", "gpu_consumer_wait", "gpu_turn_wait"}),
    ("cp_async", {"gpu_cp_async_acquire", "gpu_consumer_wait"}),   # one channel: a and b
    ("ld_global", {"gpu_cp_async_acquire", "gpu_consumer_wait"}),
    ("sm80", {"gpu_cp_async_acquire", "gpu_consumer_wait"}),
])
def test_every_wait_kind_has_its_bounded_form(case, kinds):
    assert _lowered_calls(case) & WAITS == kinds
    bounded = _lowered_calls(case, NUMBA_WS_DEBUG_BARRIERS=True)
    assert not bounded & WAITS, "a wait kept its unbounded form"
    assert {n + "_debug" for n in WAITS} & bounded == {n + "_debug" for n in kinds}
    assert "gpu_debug_info" in bounded


def test_normal_build_is_unchanged(normal):
    """Knobs off, set to 0, or only the timeout (which needs DEBUG_BARRIERS): the same
    PTX; a debug build in between leaves nothing behind."""
    plain = _normal(normal, "tma_g2")
    assert "__ws_debug" not in plain and "%clock64" not in plain
    assert _ptx("tma_g2", NUMBA_WS_DEBUG_BARRIERS=False) == plain
    assert _ptx("tma_g2", NUMBA_WS_DEBUG_TIMEOUT_CYCLES=1000) == plain
    assert _ptx("tma_g2", NUMBA_WS_DEBUG_BARRIERS=True) != plain
    assert _ptx("tma_g2") == plain


def test_debug_knobs_enter_the_launch_fingerprint_and_every_cache_key():
    with knobs.scope(**OFF):
        base_fp, base_key = knobs.launch_fingerprint(), cache.key_for(source="k", cc=[9, 0])
        assert knobs.debug_build() == ()
        seen = {base_key}
        for values in ({"NUMBA_WS_DEBUG_BARRIERS": True},
                       {"NUMBA_WS_DEBUG_BARRIERS": True, "NUMBA_WS_DEBUG_TIMEOUT_CYCLES": 10},
                       {"NUMBA_WS_DEBUG_DROP_RELEASE": "0"}):
            with knobs.scope(**values):
                assert knobs.launch_fingerprint() != base_fp
                seen.add(cache.key_for(source="k", cc=[9, 0]))
        assert len(seen) == 4, "a debug build would share a cache entry"
        with knobs.scope(NUMBA_WS_DEBUG_TIMEOUT_CYCLES=10):    # no effect on the code alone
            assert cache.key_for(source="k", cc=[9, 0]) == base_key
        with knobs.scope(NUMBA_WS_DEBUG_BARRIERS=True, NUMBA_WS_DEBUG_TIMEOUT_CYCLES="2s"):
            with pytest.raises(ValueError, match="NUMBA_WS_DEBUG_TIMEOUT_CYCLES"):
                cache.key_for(source="k")
    with pytest.raises(WSUsageError, match="reserved"):
        cache.key_for(__debug_build__=1)


def _gemm(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    return ((rng.random((M, K)) - 0.5).astype(F16), (rng.random((K, N)) - 0.5).astype(F16),
            np.full((M, N), np.nan, F16))


@pytest.mark.parametrize("spec", ["0", "a", "y"])
def test_dropped_release_deadlocks_in_the_simulator(spec):
    """The IR change the GPU build makes (debug.drop_releases) is a deadlock the schedule
    simulator reports on the channel: the producer waits for a slot nobody released."""
    args, meta = _gemm(256, 256, 256), dict(BM=128, BN=128, BK=64, num_buffers_warp_spec=2)
    k = ws.jit(kernels.matmul)
    clean = check_state(k.partition(*args, **meta), k.fn, (4,), args, meta, seeds=1)
    assert clean.ok, str(clean)
    state = k.partition(*args, **meta)
    with knobs.scope(NUMBA_WS_DEBUG_DROP_RELEASE=spec):
        assert debug.drop_releases(state) == 1     # in the shared consumer body
    report = check_state(state, k.fn, (4,), args, meta, seeds=1)
    dead = [f for f in report.findings if f.kind == "deadlock"]
    assert dead and dead[0].channel == 0 and dead[0].phase == 1, str(report)
    assert "ws_producer_acquire" in dead[0].message and "empty barrier of channel 0" in \
        dead[0].message


def test_verify_under_the_drop_knob_reports_the_deadlock():
    """``ws.verify`` simulates what the GPU build gets: with the knob, the dropped
    release."""
    args, meta = _gemm(256, 256, 256), dict(BM=128, BN=128, BK=64, num_buffers_warp_spec=2)
    with knobs.scope(NUMBA_WS_DEBUG_DROP_RELEASE="0"):
        report = ws.verify(kernels.matmul, (4,), *args, seeds=1, **meta)
    assert not report.ok and any(f.kind == "deadlock" and f.channel == 0
                                 for f in report.findings), str(report)


def test_dropped_release_reaches_the_ptx(normal):
    plain = _normal(normal, "tma_g2")
    broken = _ptx("tma_g2", NUMBA_WS_DEBUG_DROP_RELEASE="0")
    arrive = "mbarrier.arrive.shared::cta.b64 _,"
    assert plain.count(arrive) >= 1 and broken.count(arrive) == 0
    assert "__ws_debug" not in broken          # no bounded waits without DEBUG_BARRIERS


def test_drop_release_names_a_channel_or_fails_clearly():
    args, meta = _gemm(256, 256, 128), dict(BM=128, BN=128, BK=64)
    state = ws.jit(kernels.matmul).partition(*args, **meta)
    assert debug.dropped_channel(state.ws, "") is None
    assert debug.dropped_channel(state.ws, "b") == 0
    for bad in ("3", "zz"):
        with pytest.raises(WSUsageError, match=r"NUMBA_WS_DEBUG_DROP_RELEASE=.* names no "
                                               r"channel of kernel matmul \(channels: channel 0"):
            debug.dropped_channel(state.ws, bad)


def _record(**fields):
    raw = bytearray(debug.RECORD_BYTES)
    for name, value in fields.items():
        off, code = debug.RECORD[name]
        struct.pack_into("<" + code, raw, off, value)
    return bytes(raw)


def test_record_decodes_into_a_schedule_error():
    assert debug.decode_record(bytes(debug.RECORD_BYTES)) is None      # nothing timed out
    raw = _record(status=1, timeouts=3, wait=debug.PRODUCER_ACQUIRE, channel=1, slot=2,
                  phase=1, parity=0, warp_group=0, thread=0, cta_x=5, cycles=4_000_000_123,
                  timeout=4_000_000_000)
    info = {"kernel": "attention_fwd", "channels": ["channel 0: q_tile", "channel 1: k_tile"],
            "dropped_release": 1}
    err = WSBarrierTimeout(debug.decode_record(raw), info, "_Z3attn")
    assert isinstance(err, ws.errors.WSScheduleError)
    assert (err.kernel, err.wait, err.channel, err.slot, err.phase, err.cta) == \
        ("attention_fwd", "producer acquire", 1, 2, 1, (5, 0, 0))
    text = str(err)
    for part in ("kernel attention_fwd (_Z3attn)", "producer acquire timed out after "
                 "4000000123 SM cycles", "channel 1: k_tile; slot 2, phase 1", "parity 0",
                 "CTA (5, 0, 0)", "3 wait(s) timed out", "dropped channel 1"):
        assert part in text, (part, text)
    turn = debug.decode_record(_record(status=1, wait=debug.TURN_WAIT, channel=-1, slot=1,
                                       phase=0))
    assert turn["channel"] == -1
    assert "consumer group 1's turn" in debug.describe_timeout(turn, {}, "_Z1k")
    with pytest.raises(ValueError, match="64 bytes"):
        debug.decode_record(b"\0" * 8)


# -- two processes compiling the same kernel at the same time -------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RACE = textwrap.dedent("""
    import hashlib, re, sys, time, numpy as np
    sys.path.insert(0, {tests!r})
    import numba_ws as ws, kernels
    from numba_ws.runtime import interop
    from numba_ws.runtime.binding import bind
    k = ws.jit(kernels.matmul)
    a = np.zeros((256, 128), np.float16); b = np.zeros((128, 256), np.float16)
    c = np.zeros((256, 256), np.float16)
    bound = bind(k.fn, (a, b, c), dict(BM=128, BN=128, BK=64))
    described = {{n: interop.describe(v, n)._replace(host=False)
                 for n, v in bound.args.items() if n in "abc"}}
    while time.time() < {start}:      # both processes start compiling at the same moment
        time.sleep(0.001)
    key, art, cached = k.artifact(bound, described, (9, 0, "a"))
    fresh = k.inspect_ptx(a, b, c, BM=128, BN=128, BK=64)
    same = lambda p: re.sub(r"B\\d+v\\d+(?=B)", "Bv", p).encode()   # tests: same_code
    print("CACHED" if cached else "COMPILED", key, hashlib.sha1(same(art.ptx)).hexdigest(),
          hashlib.sha1(same(fresh)).hexdigest())
""")


def test_two_processes_compiling_one_kernel_both_get_it(tmp_path):
    import time
    env = {**os.environ, "NUMBA_WS_HOME": str(tmp_path), "NUMBA_WS_ALWAYS_COMPILE": "0",
           "PYTHONPATH": ROOT}
    code = RACE.format(tests=os.path.join(ROOT, "tests"), start=time.time() + 8)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    runs = [out.split() for out, _ in outs]
    assert all(r[2] == r[3] for r in runs), "a process got another PTX than it compiles"
    assert runs[0][1:] == runs[1][1:], runs        # one key, one PTX
    entries = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "cache") for f in fs]
    assert [os.path.basename(e) for e in entries] == [runs[0][1] + ".bin"], entries
    third = subprocess.run([sys.executable, "-c", RACE.format(tests=os.path.join(ROOT, "tests"),
                                                              start=0)],
                           capture_output=True, text=True, env=env, timeout=600)
    assert third.returncode == 0, third.stderr[-2000:]
    assert third.stdout.split() == ["CACHED"] + runs[0][1:]


class _FakeDriver:
    """The driver calls DebugRecord makes, on host buffers standing in for the module's
    globals (device pointers are their addresses)."""

    def __init__(self, globals_):
        import ctypes
        self.ctypes, self.synced = ctypes, []
        self.mem = {name: ctypes.create_string_buffer(data, len(data))
                    for name, data in globals_.items()}

    def CUstream(self, handle):
        return handle

    def cuModuleGetGlobal(self, module, name):
        buf = self.mem.get(name.decode())
        if buf is None:
            return (500, None, 0)          # CUDA_ERROR_NOT_FOUND
        return (0, self.ctypes.addressof(buf), self.ctypes.sizeof(buf))

    def cuStreamSynchronize(self, stream):
        self.synced.append(stream)
        return (0,)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        self.ctypes.memmove(dst, src, nbytes)
        return (0,)

    def cuMemsetD8(self, ptr, value, nbytes):
        self.ctypes.memset(ptr, value, nbytes)
        return (0,)


def test_launcher_reads_clears_and_reports_the_record(monkeypatch):
    from numba_ws.runtime import launcher
    info = b'{"kernel":"matmul","channels":["channel 0: x, y -> tasks [1, 2]"]}\0'
    fake = _FakeDriver({debug.RECORD_SYMBOL: bytes(debug.RECORD_BYTES),
                        debug.INFO_SYMBOL: info})
    monkeypatch.setattr(launcher, "_driver", lambda: fake)
    record = launcher.DebugRecord.find("module")
    record.check("_Z6matmul", 7)                       # nothing timed out: no error
    assert fake.synced == [7]
    raw = _record(status=1, timeouts=1, wait=debug.CONSUMER_WAIT, channel=0, slot=1,
                  phase=1, parity=1, warp_group=2, thread=300, cycles=5, timeout=4)
    fake.ctypes.memmove(record.ptr, raw, len(raw))
    with pytest.raises(WSBarrierTimeout) as err:
        record.check("_Z6matmul", 7)
    e = err.value
    assert (e.kernel, e.wait, e.channel, e.slot, e.phase, e.warp_group, e.thread) == \
        ("matmul", "consumer wait", 0, 1, 1, 2, 300)
    assert "channel 0: x, y -> tasks [1, 2]; slot 1, phase 1" in str(e)
    record.check("_Z6matmul", 7)                       # cleared: the module is usable again
    assert launcher.DebugRecord.find("module") is not None
    fake.mem.pop(debug.RECORD_SYMBOL)
    assert launcher.DebugRecord.find("module") is None  # a normal build: no record
