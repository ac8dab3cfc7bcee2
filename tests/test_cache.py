"""The on-disk kernel cache: keys, round trips, corruption, knobs, concurrent processes."""
import multiprocessing as mp
import os

import numpy as np
import pytest
from numba.cuda import types

from numba_ws import knobs
from numba_ws.errors import WSUsageError
from numba_ws.language import dtypes
from numba_ws.runtime import cache
from numba_ws.runtime.options import Options

PAYLOAD = {"cubin": b"\x7fELF" + bytes(range(256)) * 40, "ptx": ".version 9.0\n",
           "entry": "_Z6kernel", "smem": 196608, "argtypes": ("array(float16, 2d, C)",)}


@pytest.fixture
def home(tmp_path):
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path), NUMBA_WS_ALWAYS_COMPILE=None):
        yield tmp_path


def _key(**over):
    parts = dict(source="def k(a): pass", constexprs={"BM": 128, "BN": 256},
                 options=Options(), argtypes=(types.Array(types.float16, 2, "C"), types.int32),
                 cc=(9, 0))
    parts.update(over)
    return cache.key_for(**parts)


def test_key_is_deterministic_and_sensitive():
    k = _key()
    assert len(k) == 64 and k == _key()
    assert k == _key(constexprs={"BN": 256, "BM": 128})           # dict order is irrelevant
    others = [_key(source="def k(a): return"), _key(constexprs={"BM": 64, "BN": 256}),
              _key(constexprs={"BM": 128.0, "BN": 256}), _key(constexprs={"BM": "128", "BN": 256}),
              _key(options=Options(num_consumer_groups=1)), _key(cc=(8, 0)),
              _key(argtypes=(types.Array(types.bfloat16, 2, "C"), types.int32)),
              _key(argtypes=(types.Array(types.float16, 2, "A"), types.int32))]
    assert len({k, *others}) == len(others) + 1
    assert cache.key_for(a=dtypes.float16, b=np.float32(1.5), c=np.dtype("f2"), d={1, 2},
                         e=None, f=b"x", g=[1, (2, 3)]) == \
        cache.key_for(g=[1, (2, 3)], f=b"x", e=None, d={2, 1}, c=np.dtype("f2"),
                      b=np.float32(1.5), a=dtypes.float16)


def test_key_includes_versions(monkeypatch):
    import numba_ws
    k = _key()
    monkeypatch.setattr(numba_ws, "__version__", "999.0")
    assert _key() != k


def test_key_includes_the_compiler_sources(monkeypatch):
    """An edited numba_ws (same version number) never loads what the old one stored."""
    fp = cache.compiler_fingerprint()
    assert len(fp) == 64 and fp == cache.compiler_fingerprint()
    k = _key()
    monkeypatch.setattr(cache, "compiler_fingerprint", lambda: "0" * 64)
    assert _key() != k


def test_key_rejects_unkeyable_values():
    with pytest.raises(WSUsageError, match="cannot build a cache key"):
        cache.key_for(fn=lambda: 0)
    with pytest.raises(WSUsageError, match="reserved"):
        cache.key_for(__numba_ws__="1")


def test_round_trip(home):
    k = _key()
    assert cache.load(k) is None
    assert cache.store(k, PAYLOAD) is True
    assert cache.load(k) == PAYLOAD
    path = cache.path_for(k)
    assert path.startswith(str(home)) and os.path.isfile(path)
    assert not [f for f in os.listdir(os.path.dirname(path)) if f.endswith(".tmp")]
    assert cache.store(k, {"cubin": b"new"}) and cache.load(k) == {"cubin": b"new"}


def test_home_knob_respected(tmp_path):
    k = _key()
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path / "one")):
        cache.store(k, PAYLOAD)
        assert cache.path_for(k).startswith(str(tmp_path / "one"))
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path / "two")):
        assert cache.load(k) is None
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path / "one")):
        assert cache.load(k) == PAYLOAD


@pytest.mark.parametrize("where", [0, 9, 20, 48, -1, -100])
def test_corrupt_byte_is_a_miss_and_removed(home, where):
    k = _key()
    cache.store(k, PAYLOAD)
    path = cache.path_for(k)
    data = bytearray(open(path, "rb").read())
    data[where] ^= 0x41
    open(path, "wb").write(bytes(data))
    before = cache.stats["corrupt"]
    assert cache.load(k) is None
    assert not os.path.exists(path) and cache.stats["corrupt"] == before + 1
    assert cache.load(k) is None                                  # plain miss afterwards


@pytest.mark.parametrize("keep", [0, 5, 47, 48, 100, -1])
def test_truncated_file_is_a_miss(home, keep):
    k = _key()
    cache.store(k, PAYLOAD)
    path = cache.path_for(k)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:keep] if keep >= 0 else data[:len(data) + keep])
    assert cache.load(k) is None and not os.path.exists(path)


def test_entry_of_another_key_is_rejected(home):
    a, b = _key(), _key(cc=(8, 0))
    cache.store(a, PAYLOAD)
    os.makedirs(os.path.dirname(cache.path_for(b)), exist_ok=True)
    os.replace(cache.path_for(a), cache.path_for(b))
    assert cache.load(b) is None


def test_always_compile_bypasses_load(home):
    k = _key()
    cache.store(k, PAYLOAD)
    with knobs.scope(NUMBA_WS_ALWAYS_COMPILE=True):
        assert cache.load(k) is None
    with knobs.scope(NUMBA_WS_ALWAYS_COMPILE="0"):
        assert cache.load(k) == PAYLOAD


def test_unwritable_home_fails_softly(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with knobs.scope(NUMBA_WS_HOME=str(blocker / "home")):
        assert cache.store(_key(), PAYLOAD) is False
        assert cache.load(_key()) is None


def test_bad_inputs(home):
    with pytest.raises(WSUsageError, match="64 lowercase hex"):
        cache.load("../../etc/passwd")
    with pytest.raises(WSUsageError, match="must be a dict"):
        cache.store(_key(), [1, 2])
    with pytest.raises(WSUsageError, match="cannot be pickled"):
        cache.store(_key(), {"f": lambda: 0})


def test_clear(home):
    cache.store(_key(), PAYLOAD)
    cache.store(_key(cc=(8, 0)), PAYLOAD)
    assert cache.clear() == 2 and cache.load(_key()) is None


def _hammer(home, key, who, rounds, queue):
    """Store and load the same key ``rounds`` times; report every anomaly."""
    os.environ["NUMBA_WS_HOME"] = home
    cache.stats.update(dict.fromkeys(cache.stats, 0))   # forked: drop the parent's counts
    bad = []
    mine = {"cubin": bytes([who]) * (1000 + who * 777), "who": who}
    for i in range(rounds):
        if not cache.store(key, mine):
            bad.append(f"store failed at {i}")
        got = cache.load(key)
        if got is None:
            bad.append(f"miss at {i}")
        elif got["cubin"] != bytes([got["who"]]) * (1000 + got["who"] * 777):
            bad.append(f"wrong payload at {i}")
    queue.put((who, bad, dict(cache.stats)))


def test_two_processes_same_key(tmp_path):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    key = _key()
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), key, who, 300, queue))
             for who in (1, 2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    for who, bad, stats in results:
        assert bad == [], (who, bad[:5])
        assert stats["corrupt"] == 0
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path)):
        final = cache.load(key)
    assert final is not None and final["who"] in (1, 2)
    assert os.listdir(tmp_path / "cache" / key[:2]) == [key + ".bin"]   # no temp files left
