"""Every NUMBA_WS_* environment variable, typed, in one place.

Nothing else in numba_ws reads ``os.environ``. Values are read at each access, so a
variable set after import takes effect; tests use :func:`scope` to set knobs for a block.
The launch fast path compares :func:`launch_fingerprint` instead of parsing each knob.

| variable | type | default | meaning |
|---|---|---|---|
| NUMBA_WS_INTERPRET | bool | False | run kernels in the NumPy interpreter, even with a GPU |
| NUMBA_WS_DUMP | str | "" | "1" dumps the IR before every pass for every kernel; a kernel name dumps only that one |
| NUMBA_WS_TIMING | bool | False | print each pass's time and each compile phase's (front end, NVVM, driver JIT) |
| NUMBA_WS_PRINT_AUTOTUNING | bool | False | print the autotuner's winner and time spent |
| NUMBA_WS_ALWAYS_COMPILE | bool | False | bypass the on-disk cache |
| NUMBA_WS_HOME | path | ~/.numba_ws | cache home |
| NUMBA_WS_CC | str | "" | compile GPU launches for this compute capability ("8.0", "9.0a") instead of the device's; not above the device's |
| NUMBA_WS_DISABLE | bool | False | no warp specialization: one warp group loads, waits and computes in turn (A/B baseline) |
"""
import contextlib
import os
from dataclasses import dataclass

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Knob:
    name: str
    kind: type
    default: object
    doc: str

    def get(self):
        raw = os.environ.get(self.name)
        if raw is None or raw == "":
            return self.default
        if self.kind is bool:
            return raw.strip().lower() in _TRUE
        if self.kind is int:
            return int(raw)
        return raw


KNOBS = {k.name: k for k in [
    Knob("NUMBA_WS_INTERPRET", bool, False, "run kernels in the NumPy interpreter"),
    Knob("NUMBA_WS_DUMP", str, "", "dump IR before each pass ('1' or a kernel name)"),
    Knob("NUMBA_WS_TIMING", bool, False, "print per-pass time"),
    Knob("NUMBA_WS_PRINT_AUTOTUNING", bool, False, "print autotuning winner and time"),
    Knob("NUMBA_WS_ALWAYS_COMPILE", bool, False, "bypass the on-disk cache"),
    Knob("NUMBA_WS_HOME", str, "~/.numba_ws", "cache home"),
    Knob("NUMBA_WS_CC", str, "", "target compute capability of GPU launches ('8.0')"),
    Knob("NUMBA_WS_DISABLE", bool, False, "compile without warp specialization"),
]}


#: The knobs that decide what a launch runs (interpreter or GPU, which specialization).
LAUNCH_KNOBS = ("NUMBA_WS_INTERPRET", "NUMBA_WS_DISABLE", "NUMBA_WS_CC")
_RAW_ENV = getattr(os.environ, "_data", None)      # CPython: the mapping os.environ writes
_RAW_KEYS = tuple(map(os.environ.encodekey, LAUNCH_KNOBS)) \
    if _RAW_ENV is not None and hasattr(os.environ, "encodekey") else None


def launch_fingerprint() -> tuple:
    """The raw values of :data:`LAUNCH_KNOBS`, read on every launch: equal fingerprints
    mean the launch decisions made under the first still hold. One C-level lookup per
    knob in the environment's own dict (Python-level ``os.environ.get`` costs ~1 us each)."""
    if _RAW_KEYS is not None:
        return tuple(map(_RAW_ENV.get, _RAW_KEYS))
    return tuple(map(os.environ.get, LAUNCH_KNOBS))


def interpret() -> bool:
    return KNOBS["NUMBA_WS_INTERPRET"].get()


def dump_enabled(kernel_name: str) -> bool:
    value = KNOBS["NUMBA_WS_DUMP"].get()
    return value in ("1", "true", "all") or (value != "" and value == kernel_name)


def timing() -> bool:
    return KNOBS["NUMBA_WS_TIMING"].get()


def print_autotuning() -> bool:
    return KNOBS["NUMBA_WS_PRINT_AUTOTUNING"].get()


def always_compile() -> bool:
    return KNOBS["NUMBA_WS_ALWAYS_COMPILE"].get()


def home() -> str:
    return os.path.expanduser(KNOBS["NUMBA_WS_HOME"].get())


def disable() -> bool:
    return KNOBS["NUMBA_WS_DISABLE"].get()


def target_cc():
    """NUMBA_WS_CC as a cc tuple: "8.0" -> (8, 0), "9.0" or "9.0a" -> (9, 0, "a") (the
    only form of 9.0 numba_ws compiles for); None when unset."""
    raw = KNOBS["NUMBA_WS_CC"].get().strip().lower()
    if not raw:
        return None
    major, _, minor = raw.partition(".")
    suffix = minor.lstrip("0123456789")
    minor = minor[:len(minor) - len(suffix)]
    if not (major.isdigit() and minor.isdigit() and suffix in ("", "a")):
        raise ValueError(f"NUMBA_WS_CC={raw!r}: expected major.minor such as '8.0' or '9.0a'")
    cc = (int(major), int(minor))
    return cc + ("a",) if cc == (9, 0) or suffix else cc


@contextlib.contextmanager
def scope(**values):
    """Set knobs for a block: ``with knobs.scope(NUMBA_WS_INTERPRET=True): ...``.

    A value of None unsets the variable; the previous environment is restored on exit.
    """
    saved = {}
    for name, value in values.items():
        if name not in KNOBS:
            raise KeyError(f"unknown knob {name!r}; known: {sorted(KNOBS)}")
        saved[name] = os.environ.get(name)
        if value is None:
            os.environ.pop(name, None)
        elif isinstance(value, bool):
            os.environ[name] = "1" if value else "0"
        else:
            os.environ[name] = str(value)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
