"""``@numba_ws.jit``: the kernel object users launch as ``kernel[grid](*args, **meta)``.

Where it runs: the NumPy interpreter when ``NUMBA_WS_INTERPRET=1`` or when the array
arguments live on the host (NumPy arrays, torch CPU tensors); otherwise the GPU. A GPU launch binds and checks the
arguments, finds the specialization (memory, then the on-disk cache, else compiles),
encodes the TMA descriptors the kernel needs into a device buffer (cached by content),
and launches on the given stream, or the current CuPy / torch stream of the arrays.
"""
import functools
import inspect
import threading
import time

from .. import knobs
from ..errors import WSUsageError
from ..language import core
from . import cache, fastpath, interop, targets, warm
from .gcpause import collector_paused
from .binding import bind, resolve_grid


def _specialize():
    """runtime.specialize, imported on the first compile or cache lookup: it imports
    numba-cuda's compiler, which ``import numba_ws`` must not pay for (issue 17); with the
    cyclic collector paused, as in a compile."""
    with collector_paused():
        from . import specialize
    return specialize


def _device_cc():
    """The cc launches compile for (``targets.device_cc``; tests replace this name)."""
    return targets.device_cc()


#: Tensor-map element types for dtypes the driver has no name for (TMA copies bits).
_TMA_DTYPE = {"bool": "uint8"}


class _Loaded:
    """A specialization ready to launch: module, function, parameter packer. ``art`` is
    its :class:`.warm.LaunchRecord`; its ``image`` is the whole-program cubin ptxas made
    of the PTX (``runtime/ptxas.py``), or b"" where there is none: then the driver
    compiles the PTX at load (never its linker: linked code serialises wgmma)."""

    def __init__(self, art, params):
        """``params``: the kernel's parameter names, in the order of the launch values."""
        from . import ptxas
        from .launcher import CudaDriverError, CudaModule
        from .params import ParamPacker
        self.art = art
        self.tmap_slots = [list(params).index(name) for name, _, _, _ in art.tmaps]
        start = time.perf_counter()
        module = None
        if not art.image:
            art.image = ptxas.cubin(art.ptx)
        if art.image:
            try:
                module = CudaModule(art.image, art.entry[:40])
            except CudaDriverError:      # e.g. a cubin an older driver cannot load
                art.image = b""
        if module is None:
            module = CudaModule(art.ptx, art.entry[:40])
        knobs.report_time("ptxas / driver JIT + module load" if art.image else
                          "driver PTX JIT (module load)", time.perf_counter() - start,
                          art.entry[:40])
        self.module = module
        self.function = self.module.get_function(art.entry)
        if art.smem_bytes > 48 * 1024:
            self.function.set_max_dynamic_smem(art.smem_bytes)
        names = [n for j, n in enumerate(params) if j not in art.omitted]
        self.packer = ParamPacker(art.params, names + ["<tensor maps>"])
        self.omitted = art.omitted   # launch values not packed
        self.tmap_buffers = {}
        self.buffer_extra = None     # the buffer launch's ``extra`` (fast_entry), kept alive

    def tmap_pointer(self, values):
        """Device address of this launch's tensor maps (encoded once per array placement;
        the dtypes are fixed by the specialization). ``art.tmaps`` entries are (array,
        (box rows, box cols), transposed, swizzle bytes); a 1-D array is mapped as (1, N),
        a column-major one through its transposed view (``tensormap.tiled_2d_view``)."""
        if not self.tmap_slots:
            return 0
        arrays = [values[j] for j in self.tmap_slots]
        key = tuple([part for a in arrays for part in (a.ptr, a.shape, a.strides)])
        ptr = self.tmap_buffers.get(key)
        if ptr is None:
            from .launcher import CudaDriverError, _check, _driver
            from .tensormap import encode_tiled_2d, tiled_2d_view
            blob = b""
            for entry, a in zip(self.art.tmaps, arrays):
                name, box, tr, swizzle = entry
                if isinstance(box, int):   # an older cached artifact: (array, rows, cols, tr)
                    name, rows, cols, tr = entry
                    box, swizzle = (rows, cols), cols * a.dtype.itemsize
                shape, stride = tiled_2d_view(a.shape, a.strides, a.dtype.itemsize, tr)
                blob += encode_tiled_2d(a.ptr, a.dtype.itemsize, shape, stride, box, swizzle,
                                        dtype=_TMA_DTYPE.get(a.dtype.name, a.dtype.name),
                                        name=name)
            d = _driver()
            try:
                ptr = int(_check(d.cuMemAlloc(len(blob)), "cuMemAlloc(tensor maps)"))
                _check(d.cuMemcpyHtoD(ptr, blob, len(blob)), "cuMemcpyHtoD(tensor maps)")
            except CudaDriverError as e:
                if "CAPTURE" not in str(e.result):
                    raise
                raise WSUsageError(
                    f"kernel {self.art.entry[:40]!r}: arrays at addresses it has not seen "
                    f"need new TMA descriptors, which are copied to the GPU synchronously, "
                    f"and stream capture forbids that ({e.result}); launch it once with "
                    f"these arrays before capturing (a warm-up launch)") from None
            if len(self.tmap_buffers) > 512:
                self.tmap_buffers.clear()   # buffers are small; never freed while in use
            self.tmap_buffers[key] = ptr
        return ptr

    def fast_entry(self):
        """What the generated launcher (``fastcode.make``) needs to launch this
        specialization from the calling thread with no checks: ``(call, handle, threads,
        smem, pack_into, buffer, params argument, thread id, launch, params address,
        pointer, extra)`` (``CudaFunction.raw_launch``'s call, handle argument and
        ``pointer``); ``launch`` is the checked ``CudaFunction.launch`` (it retries a
        failed call and raises). When the packer's buffer has the kernel's own parameter
        layout (``CudaFunction.param_layout``), the call passes that one buffer
        (``extra``, params argument None) instead of a pointer per parameter. None for a
        debug module."""
        raw = self.function.raw_launch()
        if raw is None:
            return None
        call, handle, pointer = raw
        buf, params = self.packer.storage()
        args, extra = pointer(params), None
        if self._buffer_launch():
            from .launcher import buffer_extra
            if self.buffer_extra is None:
                self.buffer_extra = buffer_extra(buf, self.packer.nbytes)
            args, extra = None, pointer(self.buffer_extra)
        return (call, handle, self.art.num_threads, self.art.smem_bytes,
                self.packer.pack_into, buf, args, threading.get_ident(),
                self.function.launch, params, pointer, extra)

    def _buffer_launch(self):
        """Does the packed buffer have the kernel's parameter layout (asked once)?"""
        if not hasattr(self, "_same_layout"):
            layout = getattr(self.function, "param_layout", lambda: None)()
            self._same_layout = bool(layout) and layout == self.packer.layout()
        return self._same_layout

    def launch(self, dims, stream, values):
        """One launch: ``values`` per kernel argument (ArrayArgs for arrays), in order;
        omitted constexprs are dropped here."""
        tmaps = self.tmap_pointer(values)
        if self.omitted:
            values = [v for i, v in enumerate(values) if i not in self.omitted]
        values.append(tmaps)
        self.function.launch(dims, (self.art.num_threads, 1, 1), self.art.smem_bytes,
                             stream, self.packer.pack(values))


class Launchable:
    """The launch surface shared by kernels and autotuners: ``obj[grid](*args, **meta)``
    calls ``obj.run(grid, args, meta)``; calling without a grid is an error."""

    def __call__(self, *args, **kwargs):
        raise WSUsageError(f"launch {self.fn.__name__} with a grid: "
                           f"{self.fn.__name__}[grid](*args, **meta)")

    def __getitem__(self, grid):
        def launch(*args, **meta):
            return self.run(grid, args, meta)
        launch.__name__ = f"{self.fn.__name__}[grid]"
        return launch


class Kernel(Launchable):
    """A tile program. ``kernel[grid](*args, **meta)`` launches it."""

    def __init__(self, fn):
        if not inspect.isfunction(fn):
            raise WSUsageError(f"@numba_ws.jit decorates a Python function, got {fn!r}")
        self.fn = fn
        self._interpreted_kernel = None
        #: every loaded specialization once: by its specialization cache key, or by
        #: ("launch index", key) when it came from the launch index
        self._loaded = {}
        self._indexed = {}     # launch index key -> _Loaded (objects of _loaded)
        self._fast = {}
        self._plans = {}
        self._last_fast = [None]   # the last plan launcher kernel[grid] used (fastpath)
        self._grid_launchers = {}  # grid -> kernel[grid]'s launcher (fastpath.grid_launcher)
        self._ahead = {}       # specialization cache key -> Artifact of compile_ahead
        functools.update_wrapper(self, fn)

    def __repr__(self):
        return f"<numba_ws kernel {self.fn.__qualname__}>"

    def __getitem__(self, grid):
        """``kernel[grid]``: one launcher per (hashable) grid, made once; equal grids
        share one, as they share launch plans."""
        launchers = self._grid_launchers
        try:
            return launchers[grid]
        except KeyError:
            if len(launchers) >= fastpath.MAX_PLANS:
                launchers.clear()
            launch = launchers[grid] = fastpath.grid_launcher(self, grid)
            return launch
        except TypeError:          # an unhashable grid (a list): made per call
            return fastpath.grid_launcher(self, grid)

    @property
    def _interpreted(self):
        """The interpreter's kernel (made on the first interpreted launch)."""
        if self._interpreted_kernel is None:
            from ..interpreter.run import InterpretedKernel
            self._interpreted_kernel = InterpretedKernel(self.fn)
        return self._interpreted_kernel

    def __call__(self, *args, **kwargs):
        """Called inside a running tile program, a kernel is a helper function: the
        interpreter runs its Python code (the compiler inlines it:
        passes/inline_helpers.py). Anywhere else a kernel needs a grid."""
        if core._ACTIVE.get() is not None:
            from ..interpreter.run import with_device_functions_mapped
            return with_device_functions_mapped(self.fn)(*args, **kwargs)
        return super().__call__(*args, **kwargs)

    # --- where to run ---
    def _runs_interpreted(self, bound):
        if knobs.interpret():
            return True
        arrays = [(n, v) for n, v in bound.args.items()
                  if n not in bound.constexprs and interop.is_array(v)]
        host = [n for n, v in arrays if interop.is_host(v)]
        if host and len(host) != len(arrays):
            raise WSUsageError(f"arguments {host} are host arrays (NumPy, torch CPU) but "
                               "the others are on the GPU: pass all on the device, or all "
                               "in host memory for interpreter mode")
        return bool(host) or not arrays

    def run(self, grid, args, meta):
        plan, key = fastpath.find_plan(self._plans, fastpath.signature(grid, args, meta))
        if plan is not None and plan.launch(args):   # checks the knobs itself
            return None
        bound = bind(self.fn, args, meta)
        if self._runs_interpreted(bound):
            return self._interpreted[grid](*args, **meta)
        described = self._describe(bound)
        loaded, values = self._run_gpu(grid, bound, described)
        if key is not None and all(n in list(bound.args)[:len(args)] for n in described):
            if plan is None:
                if len(self._plans) >= fastpath.MAX_PLANS:
                    self._plans.clear()
                plan = self._plans[key] = fastpath.LaunchPlan(
                    grid, args, bound, described, self._launch_values(bound, {}), key)
            plan.remember(described, loaded, values)
        return None

    # --- GPU path ---
    def _describe(self, bound):
        return {n: interop.describe(v, n) for n, v in bound.args.items()
                if n not in bound.constexprs and interop.is_array(v)}

    def _fast_key(self, bound, described):
        """Everything a specialization depends on, cheap to compute on every launch."""
        scalars = tuple((n, type(v)) for n, v in bound.args.items()
                        if n not in described and n not in bound.constexprs)
        return (fastpath.layout_key(described), scalars, tuple(bound.constexprs.items()),
                bound.options, fastpath.knob_key())

    def specialize(self, bound, described, cc):
        fast = (self._fast_key(bound, described), cc)
        loaded = self._fast.get(fast)
        if loaded is None:
            loaded = self._fast[fast] = self._specialize_slow(bound, described, cc)
        return loaded

    def artifact(self, bound, described, cc):
        """(key, Artifact, from_disk): the compiled specialization, from the on-disk
        cache when a valid entry exists (no compile), else compiled and stored."""
        sp = _specialize()
        argtypes = sp.argument_types(self.fn, bound, lambda v, n: described[n])
        info = sp.array_info(bound, described)
        key, on_disk = sp.cache_key(self.fn, argtypes, bound, cc, info)
        ahead = self._ahead.pop(key, None)
        if ahead is not None:
            return key, ahead, False
        payload = cache.load(key) if on_disk else None
        art = payload.get("artifact") if payload is not None else None
        if isinstance(art, sp.Artifact):
            return key, art, True
        art = sp.compile_kernel(self.fn, argtypes, sp.make_plan(self.fn, bound, cc, info))
        if on_disk:
            cache.store(key, {"artifact": art})
        return key, art, False

    def compile_ahead(self, args, meta):
        """Compile the specialization a GPU launch with ``args`` / ``meta`` needs and start
        ptxas on its PTX in the background (``ptxas.start``); that launch then takes both
        instead of compiling. The autotuner compiles every config this way before it
        times the first. Raises what the compile raises (WSCompileError: the config does
        not fit); a no-op for arguments that would run in the interpreter."""
        from . import ptxas
        bound = bind(self.fn, args, dict(meta))
        if self._runs_interpreted(bound):
            return
        described, cc = self._describe(bound), _device_cc()
        if (self._fast_key(bound, described), cc) in self._fast:
            return                                   # launched before: loaded already
        launch_key = warm.launch_key(self.fn, bound, described, cc)
        if launch_key is not None and (launch_key in self._indexed
                                       or warm.load(launch_key) is not None):
            return                                   # the launch index has its cubin
        key, art, _ = self.artifact(bound, described, cc)
        if key in self._loaded:
            return
        if len(self._ahead) >= 64:
            self._ahead.clear()
        self._ahead[key] = art
        ptxas.start(art.ptx)

    def _specialize_slow(self, bound, described, cc):
        """The launch index first (no numba-cuda, no PTX JIT), then the specialization
        cache or a compile; a record loaded from neither is stored in the index."""
        from . import native_launch
        native_launch.start()          # built (or loaded) while this kernel compiles
        launch_key = warm.launch_key(self.fn, bound, described, cc)
        loaded = self._indexed.get(launch_key) if launch_key is not None else None
        if loaded is not None:
            return loaded
        record = warm.load(launch_key)
        if record is not None:
            loaded = self._indexed[launch_key] = _Loaded(record, bound.args)
            self._loaded[("launch index", launch_key)] = loaded
            return loaded
        key, art, _ = self.artifact(bound, described, cc)
        loaded = self._loaded.get(key)
        if loaded is None:
            loaded = self._loaded[key] = _Loaded(_specialize().launch_record(art), bound.args)
        if launch_key is not None:
            self._indexed[launch_key] = loaded
            warm.store(launch_key, loaded.art)
        return loaded

    def _launch_values(self, bound, described):
        """Per parameter: its ArrayArg, scalar, or (for non-numeric constexprs) 0."""
        return [0 if n in bound.constexprs and not isinstance(v, (int, bool))
                else described.get(n, v) for n, v in bound.args.items()]

    def _run_gpu(self, grid, bound, described):
        """The slow path of a GPU launch; returns (the specialization it launched, the
        launch values)."""
        loaded = self.specialize(bound, described, _device_cc())
        stream = interop.resolve_stream(bound.stream, [v.obj for v in described.values()])
        dims = fastpath.dim3(resolve_grid(grid, bound.meta))
        values = self._launch_values(bound, described)
        loaded.launch(dims, stream, list(values))
        return loaded, values

    # --- inspection (no GPU needed) ---
    def _static_bound(self, args, meta):
        bound = bind(self.fn, args, dict(meta))
        described = {n: _host_stand_in(v, n) if interop.is_host(v) else interop.describe(v, n)
                     for n, v in bound.args.items()
                     if n not in bound.constexprs and interop.is_array(v)}
        return bound, described

    def inspect_ptx(self, *args, cc=(9, 0, "a"), **meta):
        """PTX of the warp-specialized kernel for ``args`` (NumPy arrays may stand in)."""
        sp = _specialize()
        bound, described = self._static_bound(args, meta)
        argtypes = sp.argument_types(self.fn, bound, lambda v, n: described[n])
        info = sp.array_info(bound, described)
        return sp.compile_kernel(self.fn, argtypes, sp.make_plan(self.fn, bound, cc, info)).ptx

    def partition(self, *args, cc=(9, 0, "a"), stop_after=None, **meta):
        """The plan after the partitioning passes, printable (``plan_view.PlanView``):
        ``.ws`` (the plan), ``.func_ir``, ``.state`` (numba-cuda's compiler state)."""
        from ..compiler import run_stage
        from ..passes.pipeline import PARTITIONED_END
        from ..plan_view import PlanView
        sp = _specialize()
        bound, described = self._static_bound(args, meta)
        argtypes = sp.argument_types(self.fn, bound, lambda v, n: described[n])
        plan = sp.make_plan(self.fn, bound, cc, sp.array_info(bound, described))
        return PlanView(run_stage(self.fn, argtypes, plan,
                                  stop_after=stop_after or PARTITIONED_END))

    def explain(self, *args, **meta):
        """The source annotated with ``# async_task`` per line, before and after data
        partitioning (the seed's two listings), then the channels and the IR branches."""
        from ..passes.explain import report
        from ..plan_view import Explanation
        state = self.partition(*args, **meta)
        return Explanation(report(self.fn, state))


def _host_stand_in(value, name):
    """Describe a host array (NumPy, torch CPU) as if it were on the device (for
    inspect / explain)."""
    arg = interop.describe(value, name)
    return arg._replace(host=False)


def jit(fn=None, **options):
    """Decorator: ``@numba_ws.jit`` turns a tile program into a :class:`Kernel`."""
    if options:
        raise WSUsageError(f"numba_ws.jit takes no options (got {sorted(options)}); pass "
                           "warp-specialization options at launch or with ws.autotune")
    if fn is None:
        return jit
    return Kernel(fn)
