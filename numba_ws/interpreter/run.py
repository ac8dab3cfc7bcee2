"""Running a tile program in NumPy, one program instance at a time.

The user's Python function runs unchanged: while an instance runs,
``numba_ws.language.core._ACTIVE`` holds an :class:`Interpreter`, so every ``ws.*`` op
dispatches to its rule in :data:`numba_ws.interpreter.ops.INTERPRET`. Breakpoints and
``print`` inside the kernel work. NumPy's floating-point warnings are off while a
program runs (overflow gives inf, 0/0 NaN, silently, as on the GPU). Array arguments
are used in place: ``ws.store`` writes into the caller's NumPy arrays.
"""
import contextlib
import functools
import inspect
import types
import itertools

import numpy as np

from ..language import core
from ..errors import WSUsageError
from ..passes.array_ranks import rank_message
from ..runtime.sources import is_library
from ..runtime.binding import bind, resolve_grid
from .ops import INTERPRET


class Interpreter:
    """The state of one interpreted launch: its ``grid`` and the current program ``pid``."""

    def __init__(self, grid, arrays=None):
        """``arrays``: the launch's array arguments by name (named in errors)."""
        self.grid = resolve_grid(grid, {})
        self.pid = (0,) * len(self.grid)
        self.array_names = {id(v): n for n, v in (arrays or {}).items()}

    def call(self, name, *args):
        try:
            rule = INTERPRET[name]
        except KeyError:
            raise WSUsageError(f"numba_ws has no op named {name!r}") from None
        if name in _ARRAY_OPS and len(args) > 1 and id(args[0]) in self.array_names \
                and isinstance(args[1], tuple):
            shape = args[2] if name == "load" and len(args) > 2 else None
            msg = rank_message(name, self.array_names[id(args[0])], args[0].ndim,
                               len(args[1]), len(shape) if isinstance(shape, tuple) else None)
            if msg is not None:
                raise WSUsageError(msg)
        return rule(*args)

    def program_ids(self):
        """Every program id of the grid, row-major (the last axis varies fastest)."""
        return itertools.product(*(range(n) for n in self.grid))

    @contextlib.contextmanager
    def program(self, pid):
        """Make this interpreter the active one, running program instance ``pid``."""
        pid = tuple(pid)
        if len(pid) != len(self.grid) or not all(0 <= p < n for p, n in zip(pid, self.grid)):
            raise WSUsageError(f"program id {pid} is outside the grid {self.grid}")
        self.pid = pid
        token = core._ACTIVE.set(self)
        try:
            yield self
        finally:
            core._ACTIVE.reset(token)


#: Ops whose first argument is an array (their errors name the argument).
_ARRAY_OPS = ("load", "store", "atomic_add")


def _host_value(value):
    """A launch value as the interpreter uses it: NumPy scalars as Python scalars, host
    arrays that are not NumPy (torch CPU tensors, DLPack CPU arrays) as NumPy views of
    the same memory (stores write through them)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return value.item()
    from ..runtime import interop
    if interop.is_array(value):
        view = interop.host_view(value)
        return value if view is None else view
    return value


def _checked(name, stub):
    """``stub`` raising WSUsageError naming the op, not Python's bare TypeError, when its
    arguments do not bind (``ws.dot(x, y, accumulator=acc)``); the compile path's words
    (:mod:`numba_ws.language.typing`) for an unknown keyword."""
    sig = inspect.signature(stub)
    call = f"ws.{name}{sig}"

    @functools.wraps(stub)
    def checked(*args, **kwargs):
        try:
            sig.bind(*args, **kwargs)
        except TypeError as err:
            words = str(err)
            raise WSUsageError(f"{call} {words}" if words.startswith("got ")
                               else f"{call}: {words}") from None
        return stub(*args, **kwargs)
    return checked


#: op name -> its stub with checked arguments (the ops called by name, not operators)
_CHECKED = {name: _checked(name, getattr(core, name)) for name in core.OP_NAMES
            if callable(getattr(core, name, None))}


class _CheckedModule(types.ModuleType):
    """Stands for the numba_ws module (or numba_ws.language.core) in an interpreted
    kernel's globals: the module's attributes, with the op stubs of :data:`_CHECKED`."""

    def __init__(self, module):
        super().__init__(module.__name__, module.__doc__)
        self._module = module

    def __getattr__(self, attr):
        value = getattr(self._module, attr)
        return _CHECKED[attr] if attr in _CHECKED and value is getattr(core, attr) else value


def _checked_global(value, seen):
    """The interpreter's stand-in for a kernel global, or None to keep it. ``seen``:
    the helpers being mapped (function -> its clone), for recursion."""
    import numba_ws
    from numba.cuda.dispatcher import CUDADispatcher
    from ..runtime.jit import Kernel
    if isinstance(value, CUDADispatcher):
        return functools.partial(core.map, value)
    if value is numba_ws or value is core:
        return _CheckedModule(value)
    name = getattr(value, "__name__", None)
    if name in _CHECKED and value is getattr(core, name):
        return _CHECKED[name]
    if isinstance(value, Kernel):       # a @ws.jit function called as a helper
        value = value.fn
    if isinstance(value, types.FunctionType) and not is_library(value):
        mapped = _mapped(value, seen)   # a helper: its own globals are mapped too
        return mapped if mapped is not value else None
    return None


def with_device_functions_mapped(fn):
    """``fn`` as the interpreter runs it: every ``@numba.cuda.jit(device=True)`` global it
    calls replaced by its element-wise form (a device function cannot run on the host),
    and the ws op stubs it reaches (through the numba_ws module or imported by name)
    checking their arguments (:func:`_checked`); the same for the helper functions it
    calls (plain functions and ``@ws.jit`` ones, called as functions), recursively.
    Same code objects, so breakpoints and prints still work."""
    return _mapped(fn, {})


def _mapped(fn, seen):
    if fn in seen:
        return seen[fn]
    seen[fn] = fn           # a recursive helper calls the unmapped one
    swaps = {}
    for name, value in fn.__globals__.items():
        if name in fn.__code__.co_names:
            stand_in = _checked_global(value, seen)
            if stand_in is not None:
                swaps[name] = stand_in
    if not swaps:
        return fn
    glb = dict(fn.__globals__)
    glb.update(swaps)
    clone = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    seen[fn] = clone
    return clone


def interpret(fn, grid, bound_args):
    """Run ``fn(**bound_args)`` once per program instance of ``grid`` (1 to 3 axes).

    NumPy scalar arguments are passed as Python scalars, so that, as in compiled code,
    ``tile * scale`` keeps the tile's dtype whatever the type of ``scale``; torch CPU
    tensors (and other host arrays) as NumPy views (:func:`_host_value`).
    """
    fn = with_device_functions_mapped(fn)
    bound_args = {name: _host_value(value) for name, value in bound_args.items()}
    interp = Interpreter(grid, {n: v for n, v in bound_args.items()
                                if isinstance(v, np.ndarray)})
    for pid in interp.program_ids():
        with interp.program(pid), np.errstate(all="ignore"):
            result = fn(**bound_args)
        if result is not None:
            raise WSUsageError(
                f"{getattr(fn, '__name__', 'kernel')}() returned {type(result).__name__}; "
                "kernels return nothing (store results into an array argument)")


class InterpretedKernel:
    """A kernel launched through the interpreter: ``InterpretedKernel(fn)[grid](*args, **meta)``.

    ``meta`` holds constexprs, warp-spec options and ``stream``; options and stream are
    checked and then ignored (there is one "warp group" here).
    """

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid):
        def launch(*args, **meta):
            bound = bind(self.fn, args, meta)
            interpret(self.fn, resolve_grid(grid, bound.meta), bound.args)
        launch.__name__ = f"{self.fn.__name__}[grid]"
        return launch

    def __call__(self, *args, **kwargs):
        raise WSUsageError(
            f"launch {self.fn.__name__} with a grid: {self.fn.__name__}[grid](*args, **meta)")

    def __repr__(self):
        return f"<InterpretedKernel {self.fn.__qualname__}>"
