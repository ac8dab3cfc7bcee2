"""Load compiled kernels with the CUDA driver API and launch them with packed parameters.

Invariants:
- modules load into the device's primary context (the one Numba, CuPy and torch share;
  neither numba-cuda nor cuda.bindings is imported here: the driver is called through
  runtime/cudriver.py); every driver call's CUresult is checked and a failure raises
  :class:`CudaDriverError` naming the call, the CUresult and the kernel;
- parameters are packed by :class:`~.params.ParamPacker` (runtime/params.py);
- a module built with NUMBA_WS_DEBUG_BARRIERS=1 holds a debug record
  (``__ws_debug_record``, codegen/debug.py): every launch of its kernels synchronizes its
  stream and reads the record; a wait that timed out raises :class:`WSBarrierTimeout`
  (the record is cleared first, so the module stays usable). Other modules never
  synchronize.
"""
import ctypes
import operator
import sys
import weakref

from ..errors import WSError, WSResourceError, WSScheduleError, WSUsageError
from . import debug_record as debug
from . import cudriver
from .params import Params


class CudaDriverError(WSError):
    """A CUDA driver call failed; ``result`` is the CUresult name."""

    def __init__(self, message, result=None):
        self.result = result
        super().__init__(message)


class WSBarrierTimeout(WSScheduleError):
    """An mbarrier wait of a debug build (NUMBA_WS_DEBUG_BARRIERS=1) timed out on the GPU:
    the schedule deadlocked. ``fields``: the device record (codegen/debug.RECORD: wait,
    channel, slot, phase, parity, warp_group, thread, cta_x/y/z, cycles, timeouts,
    timeout), also as attributes; ``kernel``: the tile program's name, ``entry`` the PTX
    entry; ``info``: the kernel's channel descriptions."""

    def __init__(self, fields, info, entry):
        self.fields, self.info, self.entry = dict(fields), dict(info), entry
        self.kernel = info.get("kernel") or entry
        self.wait = debug.WAITS.get(fields["wait"], ("?",))[0]
        for name in ("channel", "slot", "phase", "parity", "warp_group", "thread", "cycles",
                     "timeouts"):
            setattr(self, name, fields[name])
        self.cta = (fields["cta_x"], fields["cta_y"], fields["cta_z"])
        super().__init__(debug.describe_timeout(fields, info, entry))


class DebugRecord:
    """The device record of a debug module (see :mod:`numba_ws.codegen.debug`)."""

    def __init__(self, module_handle, ptr, size):
        self.module_handle, self.ptr, self.size = module_handle, int(ptr), int(size)
        self._info = None

    @classmethod
    def find(cls, module_handle):
        """The module's record, or None for a normal build (no ``__ws_debug_record``)."""
        res = _driver().cuModuleGetGlobal(module_handle, debug.RECORD_SYMBOL.encode())
        if res[0]:
            return None
        ptr, size = res[1], res[2]
        if size != debug.RECORD_BYTES:
            raise CudaDriverError(f"{debug.RECORD_SYMBOL} has {size} bytes, expected "
                                  f"{debug.RECORD_BYTES}")
        return cls(module_handle, ptr, size)

    def info(self):
        """The kernel's ``__ws_debug_info`` JSON (read once), {} when missing."""
        if self._info is None:
            d = _driver()
            res = d.cuModuleGetGlobal(self.module_handle, debug.INFO_SYMBOL.encode())
            self._info = {}
            if not res[0]:
                buf = ctypes.create_string_buffer(int(res[2]))
                _check(d.cuMemcpyDtoH(ctypes.addressof(buf), res[1], len(buf)),
                       "cuMemcpyDtoH(debug info)")
                self._info = debug.decode_info(buf.raw)
        return self._info

    def check(self, entry, stream):
        """Synchronize ``stream``; raise WSBarrierTimeout if a wait timed out (clearing
        the record, so later launches start clean)."""
        d = _driver()
        _check(d.cuStreamSynchronize(d.CUstream(int(stream))),
               f"cuStreamSynchronize after kernel {entry!r} (NUMBA_WS_DEBUG_BARRIERS)")
        buf = ctypes.create_string_buffer(self.size)
        _check(d.cuMemcpyDtoH(ctypes.addressof(buf), self.ptr, self.size),
               "cuMemcpyDtoH(debug record)")
        fields = debug.decode_record(buf.raw)
        if fields is None:
            return
        _check(d.cuMemsetD8(self.ptr, 0, self.size), "cuMemsetD8(debug record)")
        raise WSBarrierTimeout(fields, self.info(), entry)


def _driver():
    """The driver entry points (runtime/cudriver.py: ctypes, cuda.bindings' calling
    convention); tests replace this hook with a fake."""
    return cudriver


def _name(err):
    """The CUresult's name (``CUDA_ERROR_...``) from an enum with a name or a plain int."""
    name = getattr(err, "name", None)
    return name if isinstance(name, str) else cudriver.error_name(int(err))


def _check(res, what):
    """Unpack a driver result tuple (CUresult, outputs...); raise CudaDriverError on a
    non-zero CUresult."""
    err = res[0]
    if err:
        raise CudaDriverError(f"{what} failed: {_name(err)}", _name(err))
    return res[1] if len(res) == 2 else res[1:]


_PRIMARY = {}   # device ordinal -> its primary context handle (retained once, kept)


def _primary_context(d, device):
    if device not in _PRIMARY:
        dev = _check(d.cuDeviceGet(device), "cuDeviceGet")
        _PRIMARY[device] = _check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    return _PRIMARY[device]


def _ensure_context():
    """Make sure this thread's current context is a device's primary context (the one
    Numba, CuPy and torch share) and return that device's ordinal. A thread with no
    context gets Numba's current one when numba-cuda is loaded, else device 0's primary
    context (what Numba would pick); numba-cuda is not imported here."""
    d = _driver()
    cur = _check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if not int(cur):
        if "numba.cuda" in sys.modules:
            import numba.cuda
            numba.cuda.current_context()
        else:
            _check(d.cuInit(0), "cuInit")
            _check(d.cuCtxSetCurrent(_primary_context(d, 0)), "cuCtxSetCurrent")
        cur = _check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
    device = int(_check(d.cuCtxGetDevice(), "cuCtxGetDevice"))
    primary = _primary_context(d, device)
    if int(cur) != int(primary):
        raise CudaDriverError(f"the current CUDA context {int(cur):#x} is not device "
                              f"{device}'s primary context {int(primary):#x}; numba_ws "
                              f"launches only in the device's primary context")
    return device


_CC = {}


def compute_capability():
    """(major, minor) of the current context's device (making a context current first,
    as :func:`_ensure_context`)."""
    device = _ensure_context()
    if device not in _CC:
        d = _driver()
        dev = _check(d.cuDeviceGet(device), "cuDeviceGet")
        attr = d.CUdevice_attribute
        _CC[device] = tuple(int(_check(d.cuDeviceGetAttribute(getattr(
            attr, f"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{part}"), dev),
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY)")) for part in ("MAJOR", "MINOR"))
    return _CC[device]


_DRIVER_VERSION = []


def driver_version():
    """The CUDA driver's version (asked once per process)."""
    if not _DRIVER_VERSION:
        _DRIVER_VERSION.append(int(_check(_driver().cuDriverGetVersion(),
                                          "cuDriverGetVersion")))
    return _DRIVER_VERSION[0]


_OPTIN = {}


def _optin_smem(device: int) -> int:
    if device not in _OPTIN:
        d = _driver()
        dev = _check(d.cuDeviceGet(device), "cuDeviceGet")
        _OPTIN[device] = _check(d.cuDeviceGetAttribute(
            d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
            "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)")
    return _OPTIN[device]


def _jit_log(data: bytes) -> str:
    """The driver's PTX JIT error log for ``data`` (best effort, '' if unavailable)."""
    try:
        d = _driver()
        buf = bytearray(16384)
        opts = [cudriver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER,
                cudriver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
        err, mod = d.cuModuleLoadDataEx(data, len(opts), opts, [buf, len(buf)])
        if not err:
            d.cuModuleUnload(mod)
        return bytes(buf).split(b"\0", 1)[0].decode("utf-8", "replace").strip()
    except Exception:
        return ""


_RAW_LAUNCH = []
_POINTER_ARGS = {}


def _raw_cu_launch():
    """libcuda's ``cuLaunchKernel`` as a ctypes function with no declared argument types
    (so ctypes converts nothing but what it is given). Its callers pass the handles as
    ``c_void_p`` and the dimensions as Python ints (C ``int``, the width of ``unsigned
    int``). Host cost on a 2-core CPU VM, stub callee: 0.65 us a call, against ~1.8 us
    more than C for cuda.bindings' wrapper on the H200 host (2026-12-03). The call
    releases the GIL."""
    if not _RAW_LAUNCH:
        _RAW_LAUNCH.append(ctypes.CFUNCTYPE(ctypes.c_int)(cudriver.address_of("cuLaunchKernel")))
    return _RAW_LAUNCH[0]


def buffer_extra(buffer, nbytes):
    """``cuLaunchKernel``'s ``extra`` for one packed parameter buffer (ctypes path only):
    ``{CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &nbytes,
    CU_LAUNCH_PARAM_END}``; the size it points at is kept alive by the array itself.
    Measured on the H200 host (2026-12-04, benchmarks/overhead.py, four leases): GEMM (31
    parameters) 4.37 / 6.15 / 5.98 / 4.70 us a call against 4.62 / 6.44 / 6.34 / 4.73
    with a pointer per parameter; trivial kernel (9) 6.37 / 6.45 against 6.60 / 6.29:
    0-6 %, within noise for few parameters."""
    size = ctypes.c_size_t(nbytes)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
    extra._size = size
    return extra


def _pointer_arg(value):
    """``c_void_p(value)`` of an int, made once per value (streams and parameter buffers
    recur); a ctypes array (``extra``) as it is."""
    if not isinstance(value, int):
        return value
    arg = _POINTER_ARGS.get(value)
    if arg is None:
        if len(_POINTER_ARGS) > 4096:
            _POINTER_ARGS.clear()
        arg = _POINTER_ARGS[value] = ctypes.c_void_p(value)
    return arg


def _unload(handle):
    try:
        _driver().cuModuleUnload(handle)
    except Exception:  # the driver or context may already be gone at exit
        pass


class CudaModule:
    """A module loaded from PTX text (str) or a cubin/fatbin image (bytes) in Numba's
    current context. Unloaded when garbage-collected."""

    def __init__(self, image, name: str = "numba_ws"):
        self.device = _ensure_context()
        self.name = name
        is_ptx = isinstance(image, str)
        data = image.encode("utf-8") + b"\0" if is_ptx else bytes(image)
        err, handle = _driver().cuModuleLoadData(data)
        if err:
            log = _jit_log(data) if is_ptx else ""
            kind = "PTX" if is_ptx else "binary"
            raise CudaDriverError(f"cuModuleLoadData({kind} module {name!r}) failed: "
                                  f"{_name(err)}" + (f"\n{log}" if log else ""), _name(err))
        self.handle = handle
        self._functions = {}
        self._finalizer = weakref.finalize(self, _unload, handle)
        #: the debug record of a NUMBA_WS_DEBUG_BARRIERS build, else None
        self.debug = DebugRecord.find(handle)

    def get_function(self, name: str) -> "CudaFunction":
        fn = self._functions.get(name)
        if fn is None:
            h = _check(_driver().cuModuleGetFunction(self.handle, name.encode()),
                       f"cuModuleGetFunction({name!r}) in module {self.name!r}")
            fn = self._functions[name] = CudaFunction(self, name, h)
        return fn

    def unload(self):
        self._functions.clear()
        self._finalizer()


def _dim3(v, what):
    t = (v,) if isinstance(v, int) else tuple(v)
    try:
        t = tuple(operator.index(x) for x in t)
    except TypeError:
        t = ()
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise WSUsageError(f"{what}={v!r}: expected 1 to 3 positive ints")
    return t + (1,) * (3 - len(t))


def _native_pointer(value):
    """The native call's pointer argument: an int or None as it is, a ctypes array's
    address."""
    return value if value is None or isinstance(value, int) else ctypes.addressof(value)


class CudaFunction:
    """A kernel entry of a :class:`CudaModule` (kept alive by it)."""

    def __init__(self, module: CudaModule, name: str, handle):
        self.module, self.name, self.handle = module, name, handle
        self._max_dyn = self._attr("MAX_DYNAMIC_SHARED_SIZE_BYTES")
        self._debug = module.debug
        # the checked path calls cudriver's cuLaunchKernel (declared argument types);
        # raw_launch() calls the same entry with none declared (see _raw_cu_launch)
        self._cu_launch, self._handle = _driver().cuLaunchKernel, handle
        self._raw = None

    def _attr(self, attr: str) -> int:
        d = _driver()
        code = getattr(d.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{attr}")
        return _check(d.cuFuncGetAttribute(code, self.handle),
                      f"cuFuncGetAttribute({attr}) of kernel {self.name!r}")

    def param_layout(self):
        """``[(offset, size)]`` of each kernel parameter in the device-side parameter
        buffer (``cuFuncGetParamInfo``, driver 12.4+), or None when the driver cannot
        say. A launch may pass one buffer of this layout instead of a pointer per
        parameter (``cuLaunchKernel``'s ``extra``: ``CU_LAUNCH_PARAM_BUFFER_POINTER``)."""
        d, layout = _driver(), []
        query = getattr(d, "cuFuncGetParamInfo", None)
        if query is None:
            return None
        while True:
            try:
                err, offset, size = query(self.handle, len(layout))
            except RuntimeError:     # the driver lacks the entry point
                return None
            if err:
                return layout if int(err) == 1 else None  # INVALID_VALUE: past the last
            layout.append((int(offset), int(size)))

    num_regs = property(lambda self: self._attr("NUM_REGS"), doc="registers per thread")
    local_bytes = property(lambda self: self._attr("LOCAL_SIZE_BYTES"),
                           doc="local memory per thread (spills), bytes")
    static_smem = property(lambda self: self._attr("SHARED_SIZE_BYTES"),
                           doc="static shared memory, bytes")
    max_dynamic_smem = property(lambda self: self._max_dyn,
                                doc="the current dynamic shared memory limit, bytes")

    def set_max_dynamic_smem(self, nbytes: int):
        """Allow ``nbytes`` of dynamic shared memory (needed above 48 KB)."""
        nbytes = int(nbytes)
        static = self.static_smem
        limit = _optin_smem(self.module.device)
        if nbytes < 0 or nbytes + static > limit:
            raise WSResourceError(
                f"kernel {self.name!r} needs {nbytes} bytes of dynamic shared memory "
                f"(+{static} static) but device {self.module.device} allows at most "
                f"{limit} bytes per block (opt-in limit)")
        d = _driver()
        _check(d.cuFuncSetAttribute(
            self.handle, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            nbytes), f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) of kernel "
                     f"{self.name!r}")
        self._max_dyn = nbytes

    def raw_launch(self):
        """``(call, handle, pointer)``: ``call(handle, gx, gy, gz, bx, by, bz, smem,
        pointer(stream), pointer(params), None)`` (or ``..., None,
        pointer(buffer_extra(...)))``) launches with no check at all and returns the
        CUresult as an int (0 on success); ``pointer`` turns a stream handle or parameter
        address (int) or an ``extra`` array into the argument ``call`` takes (the caller
        keeps the array alive). ``call`` is the native extension's (runtime/
        native_launch.py) when it is built, else ctypes'; chosen at the first call and
        kept, so every argument a kernel's launcher made fits its call. A value the call
        cannot take launches nothing and returns nonzero (native: -1) or raises
        ``ctypes.ArgumentError`` (ctypes). None for a debug module (its launches must
        synchronize and read the record)."""
        if self._debug is not None:
            return None
        if self._raw is None:
            from . import native_launch
            native = native_launch.entry(cudriver.address_of("cuLaunchKernel"))
            self._raw = (native, int(self._handle), _native_pointer) if native else \
                (_raw_cu_launch(), ctypes.c_void_p(int(self._handle)), _pointer_arg)
        return self._raw

    def launch(self, grid, block, smem: int, stream: int, params: Params):
        """Launch on ``stream`` (raw handle) with ``params`` from ``ParamPacker.pack``.

        Raises the dynamic-shared-memory limit first when ``smem`` exceeds it. A debug
        build then waits for the kernel and raises WSBarrierTimeout if a wait timed out.
        """
        if smem > self._max_dyn:
            self.set_max_dynamic_smem(smem)
        try:
            gx, gy, gz = grid
            bx, by, bz = block
        except (TypeError, ValueError):
            (gx, gy, gz), (bx, by, bz) = _dim3(grid, "grid"), _dim3(block, "block")
        err = self._cu_launch(self._handle, gx, gy, gz, bx, by, bz, smem, stream, params, 0)[0]
        if err and int(err) == cudriver.CUresult.CUDA_ERROR_INVALID_CONTEXT:  # no context
            _ensure_context()
            err = self._cu_launch(self._handle, gx, gy, gz, bx, by, bz, smem, stream,
                                  params, 0)[0]
        if err:
            raise CudaDriverError(
                f"cuLaunchKernel of kernel {self.name!r} failed: {_name(err)} "
                f"(grid={(gx, gy, gz)}, block={(bx, by, bz)}, smem={smem}, "
                f"stream={stream})", _name(err))
        if self._debug is not None:
            self._debug.check(self.name, stream)


# the parameter packer (runtime/params.py), re-exported: tests and tools import it here
from .params import ByValue, ParamPacker, pack_fields, param_spec  # noqa: E402,F401
