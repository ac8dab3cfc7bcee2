"""Load compiled kernels with the CUDA driver API and launch them with packed parameters.

Invariants:
- modules load into Numba's context (the device's primary context, which CuPy and torch
  share); every driver call's CUresult is checked and a failure raises
  :class:`CudaDriverError` naming the call, the CUresult and the kernel;
- a :class:`ParamPacker` lays arguments out exactly as numba-cuda's
  ``_Kernel._prepare_args`` does: an array becomes meminfo, parent, nitems, itemsize,
  data, shape..., strides... (all 8 bytes); scalars take their own ctypes width;
- ``ParamPacker.pack`` writes into per-thread storage made once and returns the address
  of the ``void*[]`` that ``cuLaunchKernel`` takes; it stays valid until that thread's
  next ``pack`` on the same packer (the driver copies parameters at launch);
- a module built with NUMBA_WS_DEBUG_BARRIERS=1 holds a debug record
  (``__ws_debug_record``, codegen/debug.py): every launch of its kernels synchronizes its
  stream and reads the record; a wait that timed out raises :class:`WSBarrierTimeout`
  (the record is cleared first, so the module stays usable). Other modules never
  synchronize.
"""
import ctypes
import operator
import struct
import threading
import weakref

import numpy as np

from ..codegen import debug
from ..errors import WSError, WSResourceError, WSScheduleError, WSUsageError
from ..language import dtypes
from .interop import ArrayArg

#: What ``CudaFunction.launch`` takes as ``params``: the int from ``ParamPacker.pack``.
Params = int


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
                buf = np.zeros(int(res[2]), np.uint8)
                _check(d.cuMemcpyDtoH(buf.ctypes.data, res[1], buf.size),
                       "cuMemcpyDtoH(debug info)")
                self._info = debug.decode_info(buf.tobytes())
        return self._info

    def check(self, entry, stream):
        """Synchronize ``stream``; raise WSBarrierTimeout if a wait timed out (clearing
        the record, so later launches start clean)."""
        d = _driver()
        _check(d.cuStreamSynchronize(d.CUstream(int(stream))),
               f"cuStreamSynchronize after kernel {entry!r} (NUMBA_WS_DEBUG_BARRIERS)")
        buf = np.zeros(self.size, np.uint8)
        _check(d.cuMemcpyDtoH(buf.ctypes.data, self.ptr, self.size),
               "cuMemcpyDtoH(debug record)")
        fields = debug.decode_record(buf.tobytes())
        if fields is None:
            return
        _check(d.cuMemsetD8(self.ptr, 0, self.size), "cuMemsetD8(debug record)")
        raise WSBarrierTimeout(fields, self.info(), entry)


def _driver():
    from cuda.bindings import driver
    return driver


def _name(err):
    """The CUresult's name (``CUDA_ERROR_...``) from a cuda.bindings enum or a plain int."""
    name = getattr(err, "name", None)
    if name is None:
        try:
            name = _driver().CUresult(int(err)).name
        except (ImportError, ValueError):
            name = None
    return name or f"CUresult({int(err)})"


def _check(res, what):
    """Unpack a cuda.bindings result tuple; raise CudaDriverError on a non-zero CUresult."""
    err = res[0]
    if err:
        raise CudaDriverError(f"{what} failed: {_name(err)}", _name(err))
    return res[1] if len(res) == 2 else res[1:]


def _ensure_context():
    """Make Numba's context current on this thread and return it."""
    import numba.cuda
    ctx = numba.cuda.current_context()
    cur = _check(_driver().cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(cur) != int(ctx.handle):
        raise CudaDriverError(f"the current CUDA context {int(cur):#x} is not Numba's "
                              f"primary context {int(ctx.handle):#x}; numba_ws launches "
                              f"only in the device's primary context")
    return ctx


_OPTIN = {}
_INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT
_RAW_LAUNCH = []


def _raw_cu_launch():
    """libcuda's ``cuLaunchKernel`` called through ctypes (~1 us a call, against ~5 us
    through cuda.bindings' argument conversion), or None where ``libcuda.so.1`` cannot be
    opened by name (then cuda.bindings launches). Same library, same context: the process
    has loaded it already."""
    if not _RAW_LAUNCH:
        try:
            fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
        except (OSError, AttributeError):
            fn = None
        else:
            u = ctypes.c_uint
            fn.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p]
            fn.restype = ctypes.c_int
        _RAW_LAUNCH.append(fn)
    return _RAW_LAUNCH[0]


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
        opts = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER,
                d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
        err, mod = d.cuModuleLoadDataEx(data, len(opts), opts, [buf, len(buf)])
        if not err:
            d.cuModuleUnload(mod)
        return bytes(buf).split(b"\0", 1)[0].decode("utf-8", "replace").strip()
    except Exception:
        return ""


def _unload(handle):
    try:
        _driver().cuModuleUnload(handle)
    except Exception:  # the driver or context may already be gone at exit
        pass


class CudaModule:
    """A module loaded from PTX text (str) or a cubin/fatbin image (bytes) in Numba's
    current context. Unloaded when garbage-collected."""

    def __init__(self, image, name: str = "numba_ws"):
        ctx = _ensure_context()
        self.name = name
        self.device = ctx.device.id
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
    if not 1 <= len(t) <= 3 or any(not isinstance(x, (int, np.integer)) or x < 1 for x in t):
        raise WSUsageError(f"{what}={v!r}: expected 1 to 3 positive ints")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))


class CudaFunction:
    """A kernel entry of a :class:`CudaModule` (kept alive by it)."""

    def __init__(self, module: CudaModule, name: str, handle):
        self.module, self.name, self.handle = module, name, handle
        self._max_dyn = self._attr("MAX_DYNAMIC_SHARED_SIZE_BYTES")
        self._debug = module.debug
        raw = _raw_cu_launch()
        if raw is not None:
            self._cu_launch, self._handle = raw, int(handle)
        else:
            bound = _driver().cuLaunchKernel
            self._cu_launch = lambda *a: bound(*a)[0]  # noqa: E731
            self._handle = handle

    def _attr(self, attr: str) -> int:
        d = _driver()
        code = getattr(d.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{attr}")
        return _check(d.cuFuncGetAttribute(code, self.handle),
                      f"cuFuncGetAttribute({attr}) of kernel {self.name!r}")

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
        err = self._cu_launch(self._handle, gx, gy, gz, bx, by, bz, smem, stream, params, 0)
        if err == _INVALID_CONTEXT:        # first launch from a thread without a context
            _ensure_context()
            err = self._cu_launch(self._handle, gx, gy, gz, bx, by, bz, smem, stream,
                                  params, 0)
        if err:
            raise CudaDriverError(
                f"cuLaunchKernel of kernel {self.name!r} failed: {_name(err)} "
                f"(grid={(gx, gy, gz)}, block={(bx, by, bz)}, smem={smem}, "
                f"stream={stream})", _name(err))
        if self._debug is not None:
            self._debug.check(self.name, stream)


class ByValue:
    """A kernel parameter passed as ``nbytes`` raw bytes (e.g. a 128-byte CUtensorMap
    ``__grid_constant__``); its value is a bytes-like object of exactly that size."""

    def __init__(self, nbytes: int):
        self.nbytes = int(nbytes)

    def __repr__(self):
        return f"ByValue({self.nbytes})"


_INT_CODES = {8: "b", 16: "h", 32: "i", 64: "q"}


def _scalar(ty):
    """(ctype, struct code) of a scalar Numba type, or None."""
    from numba.cuda import types
    if isinstance(ty, types.Boolean):
        return ctypes.c_bool, "?"
    if isinstance(ty, types.Integer):
        code = _INT_CODES[ty.bitwidth]
        ctype = getattr(ctypes, f"c_{'' if ty.signed else 'u'}int{ty.bitwidth}")
        return ctype, code if ty.signed else code.upper()
    if isinstance(ty, (types.CPointer, types.RawPointer)):
        return ctypes.c_void_p, "Q"
    return {types.float16: (ctypes.c_uint16, "e"), types.float32: (ctypes.c_float, "f"),
            types.float64: (ctypes.c_double, "d")}.get(ty)


def _array_dtype(ty, name):
    d = dtypes.from_numba(ty.dtype)
    if d is None:
        raise WSUsageError(f"argument {name!r}: array dtype {ty.dtype} is not supported; "
                           f"accepted dtypes: {', '.join(dtypes.ALL)}")
    return d


def _check_array(ty, v, name):
    if not isinstance(v, ArrayArg):
        raise WSUsageError(f"argument {name!r}: expected an array for {ty}, got "
                           f"{type(v).__qualname__} (describe it with runtime.interop)")
    d = _array_dtype(ty, name)
    problems = [msg for bad, msg in [
        (v.dtype is not d, f"dtype {v.dtype.name} != {d.name}"),
        (v.ndim != ty.ndim, f"{v.ndim} dimensions != {ty.ndim}"),
        (v.host, "it lives in host memory"),
        (ty.layout == "C" and not v.c_contig or ty.layout == "F" and not v.f_contig,
         f"it is not {ty.layout}-contiguous")] if bad]
    if problems:
        raise WSUsageError(f"argument {name!r} does not match the compiled {ty}: "
                           + "; ".join(problems))
    return d


def _fields(ty, v, name, out):
    from numba.cuda import types
    if isinstance(ty, ByValue):
        data = bytes(v)
        if len(data) != ty.nbytes:
            raise WSUsageError(f"argument {name!r}: expected {ty.nbytes} bytes, got {len(data)}")
        out.append((ctypes.c_uint8 * ty.nbytes, data))
    elif isinstance(ty, types.Array):
        d = _check_array(ty, v, name)
        out += [(ctypes.c_void_p, 0), (ctypes.c_void_p, 0), (ctypes.c_int64, v.size),
                (ctypes.c_int64, d.itemsize), (ctypes.c_void_p, v.ptr)]
        out += [(ctypes.c_int64, n) for n in v.shape]
        out += [(ctypes.c_int64, s) for s in v.strides]
    elif isinstance(ty, types.BaseTuple):
        if not isinstance(v, (tuple, list)) or len(v) != len(ty):
            raise WSUsageError(f"argument {name!r}: expected a {len(ty)}-tuple for {ty}")
        for i, (t, x) in enumerate(zip(ty, v)):
            _fields(t, x, f"{name}[{i}]", out)
    else:
        sc = _scalar(ty)
        if sc is None:
            raise WSUsageError(f"argument {name!r}: kernel parameter type {ty} is not "
                               f"supported (arrays, integers, float16/32/64, booleans, "
                               f"pointers, tuples of these, ByValue)")
        ctype, code = sc
        try:
            if code in "fd":
                value = float(v)
            elif code == "e":
                value = int(np.array(float(v), np.float16).view(np.uint16))
            elif code == "?":
                value = bool(v)
            else:
                value = operator.index(v)
                struct.pack("=" + code, value)
        except (TypeError, ValueError, OverflowError, struct.error) as e:
            raise WSUsageError(f"argument {name!r}: {v!r} is not a valid {ty} ({e})") from None
        out.append((ctype, value))


def pack_fields(argtypes, values, names=None):
    """The flat ``[(ctype, value), ...]`` list of kernel parameters, in launch order."""
    names = names or [f"#{i}" for i in range(len(argtypes))]
    if len(values) != len(argtypes):
        raise WSUsageError(f"expected {len(argtypes)} kernel arguments, got {len(values)}")
    out = []
    for ty, v, name in zip(argtypes, values, names):
        _fields(ty, v, name, out)
    return out


class _Bad(Exception):
    """A value failed the fast path's checks; pack_fields says why."""


class ParamPacker:
    """Builds, once per compiled kernel, the code that packs argument values (ArrayArgs
    for arrays, numbers for scalars) into the ``void*[]`` ``cuLaunchKernel`` takes."""

    def __init__(self, argtypes, names=None):
        self.argtypes = list(argtypes)
        self.names = list(names) if names else [f"#{i}" for i in range(len(self.argtypes))]
        self._codes, checks, vals, consts = [], [], [], {}
        for i, ty in enumerate(self.argtypes):
            self._gen(ty, f"v{i}", self.names[i], checks, vals, consts)
        fmt, offsets, sizes, pos = "=", [], [], 0
        for code in self._codes:
            size = struct.calcsize("=" + code)
            fmt += f"{code}{-size % 8}x"
            offsets.append(pos)
            sizes.append(size)
            pos += size + (-size % 8)
        self.nparams = len(offsets)
        self._offsets, self.sizes, self._nwords = offsets, sizes, max(pos // 8, 1)
        n = len(self.argtypes)
        unpack = f"{', '.join(f'v{i}' for i in range(n))}, = values" if n else \
            "if values: raise _Bad"
        src = (f"def _fill(buf, values):\n    {unpack}\n"
               + (f"    if {' or '.join(checks)}:\n        raise _Bad\n" if checks else "")
               + f"    _pack(buf, 0{''.join(', ' + v for v in vals)})\n")
        env = dict(consts, _Bad=_Bad, _pack=struct.Struct(fmt).pack_into)
        exec(compile(src, f"<numba_ws params {self.names}>", "exec"), env)
        self._fill, self._source = env["_fill"], src
        self._tls = threading.local()

    def _gen(self, ty, expr, name, checks, vals, consts):
        from numba.cuda import types
        if isinstance(ty, ByValue):
            checks.append(f"len({expr}) != {ty.nbytes}")
            vals.append(f"bytes({expr})")
            self._codes.append(f"{ty.nbytes}s")
        elif isinstance(ty, types.Array):
            d = _array_dtype(ty, name)
            k = f"_d{len(consts)}"
            consts[k] = d
            checks += [f"{expr}.dtype is not {k}", f"{expr}.host",
                       f"len({expr}.shape) != {ty.ndim}"]
            if ty.layout in "CF":
                checks.append(f"not {expr}.{ty.layout.lower()}_contig")
            vals += [f"{expr}.size", str(d.itemsize), f"{expr}.ptr", f"*{expr}.shape",
                     f"*{expr}.strides"]
            self._codes += ["8x", "8x", "q", "q", "Q"] + ["q"] * (2 * ty.ndim)
        elif isinstance(ty, types.BaseTuple):
            checks.append(f"len({expr}) != {len(ty)}")
            for j, t in enumerate(ty):
                self._gen(t, f"{expr}[{j}]", f"{name}[{j}]", checks, vals, consts)
        else:
            sc = _scalar(ty)
            if sc is None:
                _fields(ty, None, name, [])  # raises the unsupported-type error
            vals.append(expr)
            self._codes.append(sc[1])

    def _state(self):
        buf = (ctypes.c_uint64 * self._nwords)()
        base = ctypes.addressof(buf)
        ptrs = (ctypes.c_void_p * max(self.nparams, 1))(*[base + o for o in self._offsets])
        st = self._tls.state = (buf, ptrs, ctypes.addressof(ptrs) if self.nparams else 0)
        return st

    def pack(self, values) -> Params:
        """Pack ``values`` and return the address of the ``void*[]`` for cuLaunchKernel."""
        try:
            st = self._tls.state
        except AttributeError:
            st = self._state()
        try:
            self._fill(st[0], values)
        except (_Bad, struct.error, AttributeError, TypeError, ValueError, IndexError,
                OverflowError) as e:
            pack_fields(self.argtypes, values, self.names)  # raises a precise message
            raise WSUsageError(f"cannot pack kernel arguments {self.names}: {e}") from None
        return st[2]

    def read_back(self):
        """This thread's last packed parameters, read through the ``void*[]`` as raw
        bytes (one entry per kernel parameter, its exact size)."""
        _, ptrs, _ = self._tls.state
        return [ctypes.string_at(ptrs[i], n) for i, n in enumerate(self.sizes)]
