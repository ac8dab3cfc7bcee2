"""The launch index: a kernel's first launch in a new process from the disk cache,
without importing numba-cuda or compiling the PTX again (where ptxas made a cubin).

:func:`launch_key` keys an entry by what a launch knows before any typing: the kernel's
source, name and helpers' sources, constexpr values, options, per parameter its kind
(array: dtype and rank; scalar: its Python type), what the GPU may do with each array
(:func:`.targets.array_info`), the target cc, the driver version and the code-changing
knobs (fusion; the debug knobs through ``cache.key_for``). Every input of the
specialization key (:func:`.specialize.cache_key`) is a function of these, so equal
launch keys compile to the same PTX and loading the entry launches what compiling would.

The entry's payload is ``{"record": LaunchRecord}``: plain data only (no Numba type), so
unpickling it imports nothing heavy.
"""
from dataclasses import dataclass

from .. import knobs
from ..language.dtypes import numpy_instance
from . import cache
from .sources import called_sources, source_text
from .targets import array_info, target_cc


@dataclass
class LaunchRecord:
    """What the launcher needs of one specialization. ``image``: the whole-program cubin
    of ``ptx`` (``runtime/ptxas.py``; b"" until loaded once, or without ptxas); ``params``:
    ``launcher.param_spec`` specs of the packed parameters (omitted constexprs dropped,
    the tensor-map pointer last); ``omitted``: positions of the launch values that are no
    parameter; ``tmaps``: (array, box, transposed, swizzle) per tensor map."""
    ptx: str
    entry: str
    num_threads: int
    smem_bytes: int
    tmaps: list
    params: list
    omitted: frozenset
    image: bytes = b""


def _scalar_kind(value):
    """What a scalar parameter's Numba type is a function of: its Python type, NumPy
    scalars as the Python scalar they hold (``compiler.numba_type_of``'s rule)."""
    if numpy_instance(value, "generic"):
        value = value.item()
    return f"{type(value).__module__}.{type(value).__qualname__}"


def launch_key(fn, bound, described, cc):
    """The launch index key of a GPU launch, or None when ``fn`` has no source text
    (exec, ``python -c``: such kernels are cached in memory only)."""
    source = source_text(fn)
    if source is None:
        return None
    from .launcher import driver_version
    params = []
    for name, value in bound.args.items():
        if name in bound.constexprs:
            continue
        arr = described.get(name)
        params.append((name, "array", arr.dtype.name, arr.ndim) if arr is not None
                      else (name, "scalar", _scalar_kind(value)))
    info = array_info(bound, described)
    return cache.key_for(
        kind="launch", source=source, name=fn.__qualname__, helpers=called_sources(fn),
        fused=knobs.disable(), constexprs=sorted((k, repr(v)) for k, v in
                                                 bound.constexprs.items()),
        options=bound.options.as_dict(), params=params, cc=list(target_cc(cc)),
        driver=driver_version(),
        arrays=sorted((k, v["tma_ok"], v["vec"], v["transposed"]) for k, v in info.items()))


def load(key):
    """The LaunchRecord stored under ``key``, or None (no key, a miss, always_compile)."""
    payload = cache.load(key) if key is not None else None
    record = payload.get("record") if payload is not None else None
    return record if isinstance(record, LaunchRecord) else None


def store(key, record):
    """Store ``record`` (with its cubin where ptxas made one) under ``key``; False when
    not stored."""
    if key is None:
        return False
    return cache.store(key, {"record": record})
