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
| NUMBA_WS_PTXAS | path | "" | the ptxas that makes whole-program cubins (runtime/ptxas.py); "" finds ptxas on PATH or in $CUDA_HOME/bin, "0" never runs one (the driver compiles the PTX) |
| NUMBA_WS_NATIVE_LAUNCH | str | "" | the C compiler that builds the native launch call (runtime/native_launch.py); "" finds cc / gcc / clang, "0" launches through ctypes only |
| NUMBA_WS_DEFER_ML_DTYPES | bool | True | read at `import numba_ws`: numba-cuda's and cuda.core's import-time `import ml_dtypes` waits until something else imports it (numba_ws/defer_ml_dtypes.py) |
| NUMBA_WS_CC | str | "" | compile GPU launches for this compute capability ("8.0", "9.0a") instead of the device's; not above the device's |
| NUMBA_WS_DISABLE | bool | False | no warp specialization: one warp group loads, waits and computes in turn (A/B baseline) |
| NUMBA_WS_DEBUG_BARRIERS | bool | False | every mbarrier wait is bounded by a clock64 timeout; a wait that times out is recorded and the launch raises WSBarrierTimeout (codegen/debug.py) |
| NUMBA_WS_DEBUG_TIMEOUT_CYCLES | int | 4000000000 | the timeout of a debug wait, in SM clock cycles (about 2 s at the H200's 1.98 GHz) |
| NUMBA_WS_DEBUG_DROP_RELEASE | str | "" | break a schedule on purpose: the consumers never release this channel's slots (a channel id, or the name of a variable loaded into it) |

The three NUMBA_WS_DEBUG_* knobs change the generated code: they are part of the launch
fingerprint and of every on-disk cache key (:func:`debug_build`), so debug and normal
builds never mix.
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
    Knob("NUMBA_WS_PTXAS", str, "", "ptxas for whole-program cubins ('0': none)"),
    Knob("NUMBA_WS_NATIVE_LAUNCH", str, "", "C compiler of the native launch call ('0': ctypes)"),
    Knob("NUMBA_WS_DEFER_ML_DTYPES", bool, True, "defer numba-cuda's import of ml_dtypes"),
    Knob("NUMBA_WS_CC", str, "", "target compute capability of GPU launches ('8.0')"),
    Knob("NUMBA_WS_DISABLE", bool, False, "compile without warp specialization"),
    Knob("NUMBA_WS_DEBUG_BARRIERS", bool, False, "bounded mbarrier waits that report a hang"),
    Knob("NUMBA_WS_DEBUG_TIMEOUT_CYCLES", int, 4_000_000_000,
         "timeout of a debug mbarrier wait, SM clock cycles"),
    Knob("NUMBA_WS_DEBUG_DROP_RELEASE", str, "",
         "a channel (id or loaded variable) whose consumers never release (test knob)"),
]}

#: The knobs that change the generated code for debugging (see :func:`debug_build`).
DEBUG_KNOBS = ("NUMBA_WS_DEBUG_BARRIERS", "NUMBA_WS_DEBUG_TIMEOUT_CYCLES",
               "NUMBA_WS_DEBUG_DROP_RELEASE")


#: The knobs that decide what a launch runs (interpreter or GPU, which specialization).
LAUNCH_KNOBS = ("NUMBA_WS_INTERPRET", "NUMBA_WS_DISABLE") + DEBUG_KNOBS + ("NUMBA_WS_CC",)
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


def launch_guard(fingerprint):
    """``(test, argument)``: ``test(argument)`` is true while :func:`launch_fingerprint`
    would still return ``fingerprint``. With no launch knob set (the common case) ``test``
    is the environment's live key view's ``isdisjoint`` and ``argument`` those knobs'
    keys: one C call, no tuple built (~40 % of the fingerprint's time on a CPU VM,
    2026-12-04; the bound method without a ``functools.partial`` around it: 154 -> 128 ns
    there, 2026-12-05)."""
    if _RAW_KEYS is not None and all(value is None for value in fingerprint):
        return _RAW_ENV.keys().isdisjoint, frozenset(_RAW_KEYS)
    return (lambda expected: launch_fingerprint() == expected), fingerprint


def unset_launch_knobs(fingerprint):
    """``(the environment's own dict, the launch knobs' keys in it)`` when ``fingerprint``
    has no launch knob set and CPython's raw mapping is there, else None: what the native
    bound launch (runtime/native_launch.py) checks, key by key, in C on every launch."""
    if _RAW_KEYS is not None and all(value is None for value in fingerprint):
        return _RAW_ENV, _RAW_KEYS
    return None


def interpret() -> bool:
    return KNOBS["NUMBA_WS_INTERPRET"].get()


def dump_enabled(kernel_name: str) -> bool:
    value = KNOBS["NUMBA_WS_DUMP"].get()
    return value in ("1", "true", "all") or (value != "" and value == kernel_name)


def timing() -> bool:
    return KNOBS["NUMBA_WS_TIMING"].get()


def print_autotuning() -> bool:
    return KNOBS["NUMBA_WS_PRINT_AUTOTUNING"].get()


def report_time(what, seconds, kernel_name):
    """With NUMBA_WS_TIMING=1, one line per compile phase (passes print their own)."""
    if timing():
        print(f"numba_ws: {what:<44} {seconds * 1e3:8.1f} ms ({kernel_name})")


def always_compile() -> bool:
    return KNOBS["NUMBA_WS_ALWAYS_COMPILE"].get()


def home() -> str:
    return os.path.expanduser(KNOBS["NUMBA_WS_HOME"].get())


def ptxas() -> str:
    return KNOBS["NUMBA_WS_PTXAS"].get()


def native_launch() -> str:
    """NUMBA_WS_NATIVE_LAUNCH, stripped: "" (find a C compiler), "0" (ctypes only) or a
    compiler. Read when a kernel's launch call is chosen (once per loaded kernel)."""
    return KNOBS["NUMBA_WS_NATIVE_LAUNCH"].get().strip()


def defer_ml_dtypes() -> bool:
    return KNOBS["NUMBA_WS_DEFER_ML_DTYPES"].get()


def cuda_home() -> str:
    """The CUDA toolkit's root as CUDA_HOME (or CUDA_PATH) names it; "" when unset."""
    return os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or ""


def disable() -> bool:
    return KNOBS["NUMBA_WS_DISABLE"].get()


def debug_barriers() -> bool:
    return KNOBS["NUMBA_WS_DEBUG_BARRIERS"].get()


def debug_timeout_cycles() -> int:
    """NUMBA_WS_DEBUG_TIMEOUT_CYCLES, checked: a positive int below 2**63."""
    raw = os.environ.get("NUMBA_WS_DEBUG_TIMEOUT_CYCLES", "")
    try:
        value = KNOBS["NUMBA_WS_DEBUG_TIMEOUT_CYCLES"].get()
    except ValueError:
        value = None
    if value is None or not 0 < value < 2 ** 63:
        raise ValueError(f"NUMBA_WS_DEBUG_TIMEOUT_CYCLES={raw!r}: expected a positive "
                         "number of SM clock cycles, e.g. 4000000000 (about 2 s)")
    return value


def debug_drop_release() -> str:
    return KNOBS["NUMBA_WS_DEBUG_DROP_RELEASE"].get().strip()


def debug_build() -> tuple:
    """``(name, value)`` of each debug knob that changes the generated code, () in a
    normal build: the on-disk cache adds it to every key (runtime/cache.key_for). The
    timeout matters only with NUMBA_WS_DEBUG_BARRIERS."""
    out = []
    if debug_barriers():
        out += [("NUMBA_WS_DEBUG_BARRIERS", True),
                ("NUMBA_WS_DEBUG_TIMEOUT_CYCLES", debug_timeout_cycles())]
    if debug_drop_release():
        out.append(("NUMBA_WS_DEBUG_DROP_RELEASE", debug_drop_release()))
    return tuple(out)


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
