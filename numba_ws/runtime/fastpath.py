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
from . import fastcode, interop
from .binding import resolve_grid

#: Plans kept per kernel; the cache is emptied when full (signatures rarely vary).
MAX_PLANS = 256


def signature(grid, args, meta):
    """The plan key of a launch (hashable only when grid and keyword values are; arrays
    passed by keyword take the slow path: see ``Kernel.run``)."""
    return grid, tuple(map(type, args)), tuple(meta.items())


def grid_launcher(kernel, grid):
    """``kernel[grid]``: a function of ``(*args, **meta)`` that launches through a plan's
    generated launcher and calls ``kernel.run`` otherwise; the same as
    ``kernel.run(grid, args, meta)`` with fewer Python calls. First it tries the kernel's
    last fast-launched plan (``kernel._last_fast[0]``), whose launcher checks the
    signature itself (grid, argument types, meta: what :func:`signature` keys), so a loop
    of like launches builds and hashes no key; then the plan :func:`signature` finds
    (``kernel._plans`` is only ever cleared, never replaced)."""
    plans, run, last = kernel._plans, kernel.run, kernel._last_fast

    def launch(*args, **meta):
        fast = last[0]
        if fast is not None and fast(args, grid, meta):
            return None
        try:
            plan = plans.get((grid, tuple(map(type, args)), tuple(meta.items())))
        except TypeError:           # an unhashable grid or keyword value
            plan = None
        if plan is not None and plan.fast is not None and plan.fast(args):
            last[0] = plan.fast
            return None
        return run(grid, args, meta)
    launch.__name__ = f"{kernel.fn.__name__}[grid]"
    return launch


def find_plan(plans, key):
    """``(plan or None, key or None)``: key None when it is unhashable (no fast path)."""
    try:
        return plans.get(key), key
    except TypeError:
        return None, None


def alignment(arr):
    """The largest of 16, 8, 4, 2, 1 bytes dividing the base pointer and every stride of
    an extent > 1 dimension other than a unit one (what TMA, cp.async and ld.global
    pieces depend on)."""
    bits = arr.ptr | 16
    item = arr.dtype.itemsize
    for n, stride in zip(arr.shape, arr.strides):
        if n > 1 and stride != item:
            bits |= stride
    return bits & -bits


def array_layout(arr):
    """What a specialization depends on of one array: dtype, rank, per dimension (extent
    1, negative stride, unit stride), alignment. Negative strides must never share a
    build with positive ones (specialize.array_info refuses TMA for them)."""
    item = arr.dtype.itemsize
    dims = tuple((n == 1, s < 0, s == item) for n, s in zip(arr.shape, arr.strides))
    return arr.dtype, len(arr.shape), dims, alignment(arr)


def placement_key(arr):
    """A finer key than :func:`array_layout`, cheaper to compute on every launch: the
    layout is a function of dtype, strides, which dimensions have extent 1, and the
    pointer's low 4 bits."""
    return arr.dtype, arr.strides, tuple(n == 1 for n in arr.shape), arr.ptr & 15


def layout_key(described):
    """The part of a specialization key that changes with the arrays themselves (in the
    kernel's parameter order, as the fast path computes it)."""
    return tuple([array_layout(a) for a in described.values()])


def dim3(dims):
    return dims + (1,) * (3 - len(dims))


def knob_key():
    """The knobs a specialization depends on besides its arguments."""
    return knobs.launch_fingerprint()


def _stream_finder(bound, described, slot):
    """``(function of the launch values giving the stream handle, as resolve_stream;
    what the generated launcher reads instead: fastcode.make's stream_of)``."""
    if bound.stream is not None:
        handle = interop.resolve_stream(bound.stream)
        return (lambda values: handle), ("const", handle)
    for k, (name, arr) in enumerate(described.items()):
        mod = interop.root_module(arr.obj)
        if mod == "cupy":
            import cupy
            current = cupy.cuda.get_current_stream
            return (lambda values: current().ptr), ("cupy",)
        if mod == "torch" and getattr(arr.obj, "is_cuda", False):
            import torch
            j, current = slot[name], torch.cuda.current_stream
            return (lambda values: current(values[j].obj.device).cuda_stream), ("torch", k)
    return (lambda values: 0), ("zero",)


class LaunchPlan:
    """One signature's fixed decisions; ``launch(args)`` runs one launch or returns False."""

    def __init__(self, grid, args, bound, described, template, key):
        #: the :func:`signature` this plan was made for (its launcher can check it)
        self.signature = key
        position = {name: i for i, name in enumerate(bound.args) if i < len(args)}
        slot = {n: j for j, n in enumerate(bound.args)}
        #: (position in args, position in the launch values, name) per array argument
        self.arrays = tuple((position[n], slot[n], n) for n in described)
        self.constexprs = tuple((position[n], v) for n, v in bound.constexprs.items()
                                if n in position)
        self.scalars = tuple((i, slot[n]) for n, i in position.items()
                             if n not in described and n not in bound.constexprs)
        self.template = template
        self.knobs = knob_key()
        self.grid = grid if callable(grid) else dim3(resolve_grid(grid, bound.meta))
        self.meta = bound.meta
        self.stream, self._stream_of = _stream_finder(bound, described, slot)
        self.loaded = {}
        self.nargs = len(args)
        #: the generated launcher (fastcode.make), its entries and their binder, made on
        #: the first remember(); ``_fast_layout``: the parameter layout it packs
        self.fast, self._entries, self._bind, self._fast_layout = None, None, None, None

    def remember(self, described, loaded, values=None):
        """Record that ``loaded`` is the specialization for ``described``'s layout (the
        slow path just launched it with launch ``values``)."""
        if len(self.loaded) >= MAX_PLANS:
            self.loaded.clear()
        self.loaded[tuple([placement_key(a) for a in described.values()])] = loaded
        if values is not None:
            self._remember_fast(described, loaded, values)

    def _remember_fast(self, described, loaded, values):
        """Give the generated launcher (made on first use) an entry for this launch when
        ``loaded`` packs the parameter layout it was generated for."""
        if getattr(loaded, "fast_entry", None) is None:
            return
        layout = (loaded.omitted, tuple(loaded.packer.specs))
        if self._fast_layout is None:
            made = fastcode.make(self, self.nargs, described, loaded, self._stream_of)
            if made is None:
                return
            self.fast, self._entries, self._bind = made
            self._fast_layout = layout
        if layout == self._fast_layout:
            fastcode.remember(self._entries, described, loaded, values, self._bind)

    def launch(self, args):
        if self.fast is not None and self.fast(args):
            return True
        if knobs.launch_fingerprint() != self.knobs:
            return False
        for i, value in self.constexprs:
            if args[i] != value:
                return False
        values = self.template.copy()
        describe = interop.describe
        layout = []
        for i, j, name in self.arrays:
            arr = values[j] = describe(args[i], name)
            if arr.host:          # host memory runs in the interpreter: the slow path
                return False
            layout.append((arr.dtype, arr.strides, tuple(n == 1 for n in arr.shape),
                           arr.ptr & 15))   # placement_key, inlined
        loaded = self.loaded.get(tuple(layout))
        if loaded is None:
            return False
        for i, j in self.scalars:
            values[j] = args[i]
        dims = dim3(resolve_grid(self.grid, self.meta)) if callable(self.grid) else self.grid
        loaded.launch(dims, self.stream(values), list(values))
        if self._entries is not None:     # the next launch like this one is fast
            self._remember_fast({n: values[j] for _, j, n in self.arrays}, loaded, values)
        return True
