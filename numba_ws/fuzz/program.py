"""A fuzzed tile program as data: its source, arrays, scalars, constexprs, options, grid
and target, and the host arguments one launch of it gets.

Everything a run needs is in :class:`Program` (JSON-serialisable with
:meth:`Program.to_dict`): the generator (:mod:`numba_ws.fuzz.generator`) makes one from a
seed, the minimizer edits copies of it. :func:`host_arguments` builds the NumPy arguments
from the program and a data seed: inputs drawn uniformly from each array's ``[lo, hi]``
(integers for int dtypes) and seen through the array's ``view`` (contiguous, a row pitch
wider than the array -- a multiple of 16 bytes, or of 4 but not 16 -- or the transpose
of a column-major base); outputs NaN-poisoned (ints: :data:`INT_POISON`) with
:data:`GUARD` poisoned rows after them (the output is a leading-rows view of its base).
"""
import dataclasses
import importlib.util
import json
import sys
from dataclasses import dataclass, field

import numpy as np

#: what an int output starts as (no generated program computes it)
INT_POISON = -999_999_937
#: poisoned rows (1-D: elements) after every output, which no kernel may write
GUARD = 3
VIEWS = ("contig", "pitch16", "pitch4", "T")


@dataclass
class ArraySpec:
    """One array argument as the kernel sees it: ``shape`` and ``dtype`` (a numba_ws dtype
    name), ``role`` 'in' or 'out', values in ``[lo, hi]`` (inputs), ``view`` of VIEWS."""
    name: str
    shape: tuple
    dtype: str
    role: str = "in"
    lo: float = -1.0
    hi: float = 1.0
    view: str = "contig"

    def __post_init__(self):
        self.shape = tuple(int(s) for s in self.shape)


@dataclass
class Program:
    """A tile program and one launch configuration of it.

    The kernel is ``def <name>(<arrays>, <scalars>, <constexprs>: ws.constexpr)`` in
    ``source``; it is launched as ``kernel[grid](*arrays, *scalars, **constexprs,
    **options)``, compiled for ``cc`` ('9.0a', or '8.0' through ``NUMBA_WS_CC``).
    ``family`` and ``notes`` describe what the generator built; ``features`` are the
    optional language features it was allowed to use.
    """
    seed: int
    name: str
    family: str
    source: str
    arrays: list
    scalars: dict
    constexprs: dict
    options: dict
    grid: tuple
    cc: str = "9.0a"
    features: tuple = ()
    notes: list = field(default_factory=list)

    def __post_init__(self):
        self.arrays = [a if isinstance(a, ArraySpec) else ArraySpec(**a) for a in self.arrays]
        self.grid = tuple(int(g) for g in self.grid)
        self.features = tuple(self.features)

    @property
    def meta(self):
        return {**self.constexprs, **self.options}

    def array(self, name):
        return next(a for a in self.arrays if a.name == name)

    def to_dict(self):
        d = dataclasses.asdict(self)
        d["arrays"] = [dataclasses.asdict(a) for a in self.arrays]
        return d

    @classmethod
    def from_dict(cls, d):
        return cls(**d)

    def replace(self, **changes):
        """A copy with ``changes`` (arrays and dicts copied, so edits do not leak back)."""
        d = json.loads(json.dumps(self.to_dict()))
        d.update(changes)
        return Program.from_dict(d)

    def describe(self):
        opts = ", ".join(f"{k}={v}" for k, v in {**self.constexprs, **self.options}.items())
        arrays = ", ".join(f"{a.name}: {a.dtype}{list(a.shape)}"
                           + (f" {a.view}" if a.view != "contig" else "")
                           + (" out" if a.role == "out" else "") for a in self.arrays)
        scalars = ", ".join(f"{k}={v!r}" for k, v in self.scalars.items())
        return (f"{self.family} seed {self.seed}: grid {self.grid}, cc {self.cc}, {opts}\n"
                f"  arrays: {arrays}" + (f"\n  scalars: {scalars}" if scalars else ""))


_LOADED = {}


def load_kernel(program, folder):
    """The program's function, from ``source`` written to ``folder`` and imported (so
    ``inspect.getsource`` works, as the compiler needs). Cached per source."""
    import hashlib
    digest = hashlib.sha1(program.source.encode()).hexdigest()[:12]
    key = (program.name, digest)
    if key not in _LOADED:
        modname = f"{program.name}_{digest}"
        path = folder / f"{modname}.py"
        path.write_text(program.source)
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        spec.loader.exec_module(module)
        _LOADED[key] = getattr(module, program.name)
    return _LOADED[key]


def np_dtype(name):
    import numba_ws as ws
    return getattr(ws, name).dtype


def poison(dtype):
    return INT_POISON if np.dtype(dtype).kind in "iu" else np.nan


def _pitch(cols, itemsize, view):
    """Row pitch (elements) of a base whose leading ``cols`` columns are the array."""
    extra = 1
    while True:
        pitch = (cols + extra) * itemsize
        if view == "pitch16" and pitch % 16 == 0:
            return cols + extra
        if view == "pitch4" and pitch % 4 == 0 and pitch % 16:
            return cols + extra
        extra += 1


def _values(rng, spec, shape):
    dt = np_dtype(spec.dtype)
    if np.dtype(dt).kind in "iu":
        return rng.integers(int(spec.lo), int(spec.hi) + 1, size=shape).astype(dt)
    from ..interpreter.casts import _cast
    return _cast(rng.uniform(spec.lo, spec.hi, size=shape), dt)


def base_and_view(spec, rng):
    """(base, recipe): the host base array of an argument and how its view is cut out of
    it -- ``("rows", n)`` the leading n rows/elements, ``("cols", n)`` the leading n
    columns, ``("T",)`` the transpose. Outputs: poisoned, with GUARD rows."""
    dt = np_dtype(spec.dtype)
    shape = spec.shape
    if spec.role == "out":
        base = np.full((shape[0] + GUARD,) + shape[1:], poison(dt), dt)
        return base, ("rows", shape[0])
    if spec.view == "T" and len(shape) == 2:
        return np.ascontiguousarray(_values(rng, spec, shape[::-1])), ("T",)
    if spec.view in ("pitch16", "pitch4") and len(shape) == 2:
        pitch = _pitch(shape[1], np.dtype(dt).itemsize, spec.view)
        return _values(rng, spec, (shape[0], pitch)), ("cols", shape[1])
    return _values(rng, spec, shape), ("rows", shape[0])


def cut(base, recipe):
    """The view ``recipe`` of :func:`base_and_view` applied to ``base`` (NumPy, CuPy or
    torch alike: slicing and ``.T``)."""
    if recipe[0] == "T":
        return base.T
    if recipe[0] == "cols":
        return base[:, :recipe[1]]
    return base[:recipe[1]]


def host_arguments(program, data_seed):
    """{name: (base, recipe)} of every array argument, inputs drawn from ``data_seed``."""
    rng = np.random.default_rng(data_seed)
    return {a.name: base_and_view(a, rng) for a in program.arrays}
