"""Binding a launch ``kernel[grid](*args, **kwargs)`` to the kernel's parameters.

:func:`bind` splits the keywords into parameters, warp-spec options
(:class:`~numba_ws.runtime.options.Options`) and ``stream``, and checks every one, so
that a wrong launch fails here with an error naming the argument, before any compiling.
:func:`resolve_grid` turns a tuple, an int or ``callable(meta)`` into a checked grid.
"""
import functools
import inspect
import numbers
from dataclasses import dataclass, field

from ..errors import WSUsageError
from ..language.core import constexpr
from ..language.dtypes import DType, numpy_instance
from .options import Options

_CONSTEXPR_STRINGS = ("constexpr", "ws.constexpr", "numba_ws.constexpr")
#: Launch keywords that are not kernel parameters.
RESERVED = frozenset(Options.names()) | {"stream"}
#: CUDA's limits on grid dimensions x, y, z.
GRID_LIMITS = (2**31 - 1, 65535, 65535)


@dataclass
class Bound:
    """A checked launch. ``args`` holds every parameter in order (constexprs included)."""
    args: dict
    constexprs: dict
    options: Options = field(default_factory=Options)
    stream: object = None

    @property
    def meta(self):
        """What a grid callable receives: every constexpr and every option."""
        return {**self.constexprs, **self.options.as_dict()}


def is_constexpr(annotation):
    """True for ``ws.constexpr``, ``ws.constexpr(...)`` or its string forms."""
    if annotation is constexpr or isinstance(annotation, constexpr):
        return True
    return isinstance(annotation, str) and annotation.strip() in _CONSTEXPR_STRINGS


def _constexpr_value(fname, name, value):
    if isinstance(value, constexpr):
        value = value.value
    if isinstance(value, bool) or numpy_instance(value, "bool_"):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float) or numpy_instance(value, "floating"):
        return float(value)
    if isinstance(value, (str, DType)):
        return value
    raise WSUsageError(
        f"{fname}(): constexpr parameter {name!r} must be an int, bool, float, str or "
        f"numba_ws dtype, got {type(value).__name__} {value!r}")


@functools.lru_cache(maxsize=256)
def _parameters(fn):
    """(parameters, names, constexpr flags) of ``fn``, checked once per function."""
    fname = getattr(fn, "__name__", "kernel")
    params = list(inspect.signature(fn).parameters.values())
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise WSUsageError(f"{fname}(): kernels cannot take *args or **kwargs ({p})")
        if p.name in RESERVED:
            raise WSUsageError(
                f"{fname}(): parameter name {p.name!r} is reserved for launch options")
    return tuple(params), tuple(p.name for p in params), tuple(
        is_constexpr(p.annotation) for p in params)


@functools.lru_cache(maxsize=256)
def _cached_options(items):
    return Options(**{n: v for n, _, v in items})


def _options(kwargs):
    """Options from the option keywords of ``kwargs`` (removed from it); cached per value."""
    items = tuple((n, type(v), kwargs.pop(n)) for n in Options.names() if n in kwargs
                  for v in [kwargs[n]])
    try:
        hash(items)
    except TypeError:
        return Options(**{n: v for n, _, v in items})
    return _cached_options(items)


def bind(fn, args, kwargs):
    """Check a launch of ``fn`` with positional ``args`` and keywords ``kwargs``.

    Parameters may be given positionally or by keyword; constexprs usually come as
    keywords (``BM=128``). Option keywords and ``stream`` are taken out of ``kwargs``.
    ``kwargs`` itself is not modified.
    """
    fname = getattr(fn, "__name__", "kernel")
    params, names, flags = _parameters(fn)
    kwargs = dict(kwargs)
    stream = kwargs.pop("stream", None)
    options = _options(kwargs)
    if len(args) > len(params):
        raise WSUsageError(
            f"{fname}() takes {len(params)} arguments ({', '.join(names)}) "
            f"but {len(args)} were given positionally")
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            valid = list(names) + list(Options.names()) + ["stream"]
            raise WSUsageError(
                f"{fname}(): unknown keyword argument {key!r}; valid names are: "
                f"{', '.join(valid)}")
        if key in values:
            raise WSUsageError(f"{fname}(): got multiple values for argument {key!r}")
        values[key] = value
    bound, constexprs = {}, {}
    for p, ce in zip(params, flags):
        if p.name in values:
            value = values[p.name]
        elif p.default is not p.empty:
            value = p.default
        else:
            kind = "constexpr " if ce else ""
            hint = f" (pass it as {p.name}=...)" if ce else ""
            raise WSUsageError(f"{fname}(): missing {kind}argument {p.name!r}{hint}")
        if ce:
            value = constexprs[p.name] = _constexpr_value(fname, p.name, value)
        bound[p.name] = value
    return Bound(args=bound, constexprs=constexprs, options=options, stream=stream)


def _grid_dim(v):
    return (isinstance(v, numbers.Integral)
            and not (isinstance(v, bool) or numpy_instance(v, "bool_")))


def resolve_grid(grid, meta):
    """The launch grid as a tuple of 1 to 3 positive ints.

    ``grid`` is a tuple (or list), an int, or ``callable(meta)`` returning one of those;
    ``meta`` is :attr:`Bound.meta`.
    """
    given = grid
    if callable(grid):
        grid = grid(dict(meta))
    if _grid_dim(grid):
        grid = (grid,)
    if isinstance(grid, list):
        grid = tuple(grid)
    src = f"grid {given!r} returned {grid!r}" if callable(given) else f"grid {grid!r}"
    if not isinstance(grid, tuple) or not 1 <= len(grid) <= 3:
        raise WSUsageError(f"{src}: expected a tuple of 1 to 3 positive ints")
    for axis, (v, limit) in enumerate(zip(grid, GRID_LIMITS)):
        if not _grid_dim(v):
            raise WSUsageError(f"{src}: axis {axis} is {v!r}, expected an int")
        if not 1 <= v <= limit:
            raise WSUsageError(f"{src}: axis {axis} is {v}, expected 1..{limit}")
    return tuple(int(v) for v in grid)
