"""The launch fast path: what one launch *signature* decides, worked out once.

A signature is ``(grid, type of each positional argument, keyword items)``. The first GPU
launch with a signature goes through :func:`~.binding.bind`, the interpreter check and
the specialization lookup; :class:`LaunchPlan` then remembers, for later launches with
the same signature: which positional arguments are arrays and which scalars, the values
of every constexpr, option and keyword argument (they are part of the signature), the
grid when it is not a callable, and how to find the stream. A later launch only
describes its arrays, picks the specialization by the arrays' layout (dtype, rank,
contiguity, alignment), packs and launches.

Invariant: a plan launches exactly what the slow path would for the same arguments; when
it cannot tell (a positional constexpr changed, a layout not seen yet), ``launch``
returns ``False`` and the caller takes the slow path.
"""
from .. import knobs
from . import interop
from .binding import resolve_grid

#: Plans kept per kernel; the cache is emptied when full (signatures rarely vary).
MAX_PLANS = 256


def signature(grid, args, meta):
    """The plan key of a launch, or None when a part is unhashable (then no fast path;
    arrays passed by keyword also take the slow path: see ``Kernel.run``)."""
    key = (grid, tuple(map(type, args)), tuple(meta.items()))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def alignment(arr):
    """The largest of 16, 8, 4, 2, 1 bytes dividing the base pointer and every outer stride."""
    bits = arr.ptr | 16
    for stride in arr.strides[:-1]:
        bits |= stride
    return bits & -bits


def layout_key(described):
    """The part of a specialization key that changes with the arrays themselves."""
    return tuple((n, a.dtype.name, len(a.shape), a.strides[-1] == a.dtype.itemsize,
                  alignment(a)) for n, a in described.items())


def dim3(dims):
    return dims + (1,) * (3 - len(dims))


def knob_key():
    """The knobs a specialization depends on besides its arguments."""
    return knobs.disable(), knobs.target_cc()


def _stream_finder(bound, described):
    """A function of the described arrays giving the stream handle, as resolve_stream."""
    if bound.stream is not None:
        handle = interop.resolve_stream(bound.stream)
        return lambda arrays: handle
    for name, arr in described.items():
        mod = interop.root_module(arr.obj)
        if mod == "cupy":
            import cupy
            return lambda arrays: cupy.cuda.get_current_stream().ptr
        if mod == "torch" and getattr(arr.obj, "is_cuda", False):
            import torch
            return lambda arrays: torch.cuda.current_stream(arrays[name].obj.device).cuda_stream
    return lambda arrays: 0


class LaunchPlan:
    """One signature's fixed decisions; ``launch(args)`` runs one launch or returns False."""

    def __init__(self, grid, args, bound, described, template):
        position = {name: i for i, name in enumerate(bound.args) if i < len(args)}
        self.arrays = tuple((position[n], n) for n in described)
        self.constexprs = tuple((position[n], v) for n, v in bound.constexprs.items()
                                if n in position)
        self.scalars = tuple((i, j) for j, n in enumerate(bound.args)
                             if n in position and n not in described
                             and n not in bound.constexprs for i in [position[n]])
        self.template = template
        self.slot = {n: j for j, n in enumerate(bound.args)}
        self.knobs = knob_key()
        self.grid = grid if callable(grid) else dim3(resolve_grid(grid, bound.meta))
        self.meta = bound.meta
        self.stream = _stream_finder(bound, described)
        self.loaded = {}

    def remember(self, described, loaded):
        self.loaded[layout_key(described)] = loaded

    def launch(self, args):
        for i, value in self.constexprs:
            if args[i] != value:
                return False
        described = {}
        values = list(self.template)
        for i, name in self.arrays:
            arr = described[name] = interop.describe(args[i], name)
            values[self.slot[name]] = arr
        for i, j in self.scalars:
            values[j] = args[i]
        loaded = self.loaded.get(layout_key(described))
        if loaded is None or knob_key() != self.knobs:
            return False
        dims = dim3(resolve_grid(self.grid, self.meta)) if callable(self.grid) else self.grid
        loaded.launch(dims, self.stream(described), values, described)
        return True
