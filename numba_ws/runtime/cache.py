"""On-disk cache of compiled kernels under ``knobs.home()/cache``.

Invariants:
- a key is the sha256 (hex) of a canonical text of its parts plus the numba_ws and
  numba-cuda versions, the cache format and, in a debug build, the debug knobs
  (``knobs.debug_build``: debug and normal kernels never share an entry); equal parts
  give equal keys in any process;
- an entry is ``header + body``: header = magic, body length, sha256(body); body is a
  pickle of ``(key, payload)``. ``load`` returns a payload only if all of these check out
  and the stored key is the one asked for; anything else is deleted and is a miss;
- entries appear through ``os.replace`` of a temp file in the same directory, so a
  reader sees the old entry, the new one, or none, never a partial one; concurrent
  writers of one key all succeed (last rename wins, every version is valid);
- cache failures never break a launch: ``load`` misses, ``store`` returns False.
"""
import dataclasses
import enum
import functools
import glob
import hashlib
import logging
import os
import pickle
import struct
import tempfile

from .. import knobs
from ..errors import WSUsageError
from ..language.dtypes import DType, numpy_instance

#: 2: cubins are whole-program ptxas outputs (runtime/ptxas.py); format-1 launch records
#: held cuLink cubins (relocatable: setmaxnreg dropped, every wgmma serialised).
FORMAT = 2
MAGIC = b"NBWSK\x00\x01\n"
_HEADER = struct.Struct("<8sQ32s")  # magic, body length, sha256(body)
_log = logging.getLogger("numba_ws.cache")

#: Counters for tests and diagnostics: hits, misses, corrupt (deleted), stores, failures.
stats = {"hits": 0, "misses": 0, "corrupt": 0, "stores": 0, "failures": 0}


_RESERVED = ("__format__", "__numba_ws__", "__numba_cuda__", "__sources__",
             "__debug_build__")


@functools.lru_cache(maxsize=None)
def compiler_fingerprint() -> str:
    """sha256 of numba_ws's own sources (every .py file under the package, path and
    text): an edited or upgraded compiler never loads what an older one stored, version
    number or not. ~7 ms, once per process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        digest.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def _versions():
    """The parts every key gets besides the caller's (names in :data:`_RESERVED`); the
    debug knobs only when set, so normal keys stay what they were before they existed."""
    import numba_cuda
    import numba_ws
    out = {"__format__": FORMAT, "__numba_ws__": numba_ws.__version__,
           "__numba_cuda__": numba_cuda.__version__, "__sources__": compiler_fingerprint()}
    debug = knobs.debug_build()
    if debug:
        out["__debug_build__"] = debug
    return out


def _canon(v) -> str:
    """Deterministic text of a value; distinct types give distinct texts (1, 1.0, '1')."""
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, (tuple, list)):
        return f"{type(v).__name__}(" + ",".join(_canon(x) for x in v) + ")"
    if isinstance(v, dict):
        items = sorted((_canon(k), _canon(x)) for k, x in v.items())
        return "dict{" + ",".join(f"{k}={x}" for k, x in items) + "}"
    if isinstance(v, (set, frozenset)):
        return "set{" + ",".join(sorted(_canon(x) for x in v)) + "}"
    if isinstance(v, DType):
        return f"ws.{v.name}"
    if numpy_instance(v, "generic"):
        return f"np.{v.dtype}:{v.item()!r}"
    if numpy_instance(v, "dtype"):
        return f"np.dtype:{v.str}"
    if isinstance(v, enum.Enum):
        return f"enum:{type(v).__qualname__}.{v.name}"
    if isinstance(v, type):
        return f"class:{v.__module__}.{v.__qualname__}"
    if dataclasses.is_dataclass(v):
        fields = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
        return f"dc:{type(v).__qualname__}" + _canon(fields)
    from numba.cuda import types
    if isinstance(v, types.Type):
        return f"nb:{type(v).__name__}:{v}"
    raise WSUsageError(f"cannot build a cache key from {type(v).__qualname__} value {v!r}; "
                       f"use ints, floats, strings, tuples, dicts, dtypes or Numba types")


def key_for(**parts) -> str:
    """sha256 hex key of ``parts`` (source, constexprs, options, argtypes, cc, ...)."""
    reserved = set(parts) & set(_RESERVED)
    if reserved:
        raise WSUsageError(f"cache key parts {sorted(reserved)} are reserved")
    text = _canon({**parts, **_versions()})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_dir() -> str:
    return os.path.join(knobs.home(), "cache")


def path_for(key: str) -> str:
    if not (isinstance(key, str) and len(key) == 64
            and all(c in "0123456789abcdef" for c in key)):
        raise WSUsageError(f"cache key {key!r}: expected 64 lowercase hex digits (key_for)")
    return os.path.join(cache_dir(), key[:2], key + ".bin")


def _decode(data: bytes, key: str):
    """The payload in ``data`` if it is a whole, untampered entry for ``key``, else None."""
    if len(data) < _HEADER.size:
        return None
    magic, length, digest = _HEADER.unpack_from(data)
    body = data[_HEADER.size:]
    if magic != MAGIC or length != len(body) or hashlib.sha256(body).digest() != digest:
        return None
    try:
        stored_key, payload = pickle.loads(body)
    except Exception:
        return None
    if stored_key != key or not isinstance(payload, dict):
        return None
    return payload


def _discard(path, seen):
    """Delete ``path`` if it is still the file we read (not a newer valid entry)."""
    try:
        now = os.stat(path)
        if (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns) == \
                (seen.st_ino, seen.st_dev, seen.st_size, seen.st_mtime_ns):
            os.remove(path)
    except OSError:
        pass


def load(key: str):
    """The payload stored under ``key``, or None (miss, corrupt, or always_compile)."""
    path = path_for(key)
    if knobs.always_compile():
        return None
    try:
        with open(path, "rb") as f:
            seen = os.fstat(f.fileno())
            data = f.read()
    except OSError:
        stats["misses"] += 1
        return None
    payload = _decode(data, key)
    if payload is None:
        stats["corrupt"] += 1
        stats["misses"] += 1
        _log.warning("numba_ws cache: discarding corrupt entry %s", path)
        _discard(path, seen)
        return None
    stats["hits"] += 1
    return payload


def store(key: str, payload: dict) -> bool:
    """Write ``payload`` under ``key`` atomically; True if written, False on an OS error."""
    path = path_for(key)
    if not isinstance(payload, dict):
        raise WSUsageError(f"cache payload must be a dict, got {type(payload).__qualname__}")
    try:
        body = pickle.dumps((key, payload), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        raise WSUsageError(f"cache payload cannot be pickled: {e}") from None
    data = _HEADER.pack(MAGIC, len(body), hashlib.sha256(body).digest()) + body
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp",
                                   dir=os.path.dirname(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        stats["failures"] += 1
        _log.warning("numba_ws cache: cannot write %s (%s)", path, e)
        return False
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass
    stats["stores"] += 1
    return True


def clear() -> int:
    """Remove every entry under ``cache_dir()``; returns how many files were removed."""
    removed = 0
    for root, _, files in os.walk(cache_dir()):
        for name in files:
            try:
                os.remove(os.path.join(root, name))
                removed += 1
            except OSError:
                pass
    return removed
