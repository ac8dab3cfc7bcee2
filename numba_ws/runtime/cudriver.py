"""The CUDA driver entry points numba_ws calls, through ctypes on ``libcuda.so.1``.

Each function keeps the calling convention of ``cuda.bindings.driver``'s function of the
same name: it returns a tuple, the CUresult as an int first, then the outputs (handles
and device pointers as ints). So the launcher's call sites and their test doubles need no
bindings objects, and a process that loads a cached kernel never imports cuda.bindings
(its import took 2-115 ms of a warm-cache first launch on the H200 host, 2026-12-04
profiles). The enum classes hold the values numba_ws uses, under cuda.h's names
(tests/test_cudriver.py compares them with cuda.bindings').

Invariants: every entry point is resolved once, by the symbol the CUDA 12 headers map its
name to (``cuMemAlloc`` -> ``cuMemAlloc_v2``, ...: the legacy-default-stream variants, as
cuda.bindings calls); a missing library or symbol raises :class:`DriverUnavailable` (a
WSError and, as cuda.bindings raises, a RuntimeError) when first called, never at import.
Calls release the GIL (ctypes' CFUNCTYPE).
"""
import ctypes

from ..errors import WSError

_P, _I, _U, _SZ, _U64 = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t,
                         ctypes.c_uint64)
_OUT_P, _OUT_I, _OUT_SZ, _OUT_U64 = map(ctypes.POINTER, (_P, _I, _SZ, _U64))

#: name -> (the library's symbol, argument types); every function returns a CUresult
PROTOTYPES = {
    "cuInit": ("cuInit", (_U,)),
    "cuDriverGetVersion": ("cuDriverGetVersion", (_OUT_I,)),
    "cuGetErrorName": ("cuGetErrorName", (_I, ctypes.POINTER(ctypes.c_char_p))),
    "cuDeviceGet": ("cuDeviceGet", (_OUT_I, _I)),
    "cuDeviceGetAttribute": ("cuDeviceGetAttribute", (_OUT_I, _I, _I)),
    "cuDevicePrimaryCtxRetain": ("cuDevicePrimaryCtxRetain", (_OUT_P, _I)),
    "cuCtxGetCurrent": ("cuCtxGetCurrent", (_OUT_P,)),
    "cuCtxSetCurrent": ("cuCtxSetCurrent", (_P,)),
    "cuCtxGetDevice": ("cuCtxGetDevice", (_OUT_I,)),
    "cuCtxSynchronize": ("cuCtxSynchronize", ()),
    "cuModuleLoadData": ("cuModuleLoadData", (_OUT_P, _P)),
    "cuModuleLoadDataEx": ("cuModuleLoadDataEx", (_OUT_P, _P, _U, _P, _P)),
    "cuModuleUnload": ("cuModuleUnload", (_P,)),
    "cuModuleGetFunction": ("cuModuleGetFunction", (_OUT_P, _P, ctypes.c_char_p)),
    "cuModuleGetGlobal": ("cuModuleGetGlobal_v2", (_OUT_U64, _OUT_SZ, _P, ctypes.c_char_p)),
    "cuFuncGetAttribute": ("cuFuncGetAttribute", (_OUT_I, _I, _P)),
    "cuFuncSetAttribute": ("cuFuncSetAttribute", (_P, _I, _I)),
    "cuFuncGetParamInfo": ("cuFuncGetParamInfo", (_P, _SZ, _OUT_SZ, _OUT_SZ)),
    "cuLaunchKernel": ("cuLaunchKernel", (_P, _U, _U, _U, _U, _U, _U, _U, _P, _P, _P)),
    "cuMemAlloc": ("cuMemAlloc_v2", (_OUT_U64, _SZ)),
    "cuMemcpyHtoD": ("cuMemcpyHtoD_v2", (_U64, _P, _SZ)),
    "cuMemcpyDtoH": ("cuMemcpyDtoH_v2", (_P, _U64, _SZ)),
    "cuMemsetD8": ("cuMemsetD8_v2", (_U64, ctypes.c_ubyte, _SZ)),
    "cuStreamSynchronize": ("cuStreamSynchronize", (_P,)),
    "cuTensorMapEncodeTiled": ("cuTensorMapEncodeTiled", (
        _P, _I, _U, _P, _OUT_U64, _OUT_U64, ctypes.POINTER(_U), ctypes.POINTER(_U), _I, _I,
        _I, _I)),
}


class CUresult:
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_NOT_FOUND = 500


class CUdevice_attribute:
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class CUfunction_attribute:
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
    CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CUjit_option:
    CU_JIT_ERROR_LOG_BUFFER = 5
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6


class CUtensorMapDataType:
    CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0
    CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1
    CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2
    CU_TENSOR_MAP_DATA_TYPE_INT32 = 3
    CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4
    CU_TENSOR_MAP_DATA_TYPE_INT64 = 5
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7
    CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9


class CUtensorMapInterleave:
    CU_TENSOR_MAP_INTERLEAVE_NONE = 0


class CUtensorMapSwizzle:
    CU_TENSOR_MAP_SWIZZLE_NONE = 0
    CU_TENSOR_MAP_SWIZZLE_32B = 1
    CU_TENSOR_MAP_SWIZZLE_64B = 2
    CU_TENSOR_MAP_SWIZZLE_128B = 3


class CUtensorMapL2promotion:
    CU_TENSOR_MAP_L2_PROMOTION_NONE = 0
    CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1
    CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3


class CUtensorMapFloatOOBfill:
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0


class DriverUnavailable(WSError, RuntimeError):
    """No CUDA driver library, or one without an entry point numba_ws calls."""


_LIBRARY = []
_FUNCTIONS = {}


def library():
    """The driver library (``ctypes.CDLL``), loaded once; DriverUnavailable without one."""
    if not _LIBRARY:
        errors = []
        for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
            try:
                _LIBRARY.append(ctypes.CDLL(name))
                break
            except OSError as e:
                errors.append(str(e))
        else:
            raise DriverUnavailable("the CUDA driver library could not be loaded ("
                                    + "; ".join(errors) + "): numba_ws needs an NVIDIA "
                                    "driver to run kernels on the GPU")
    return _LIBRARY[0]


def function(name):
    """The ctypes function of entry point ``name`` (a key of PROTOTYPES)."""
    fn = _FUNCTIONS.get(name)
    if fn is None:
        symbol, argtypes = PROTOTYPES[name]
        try:
            address = ctypes.cast(getattr(library(), symbol), _P).value
        except AttributeError:
            raise DriverUnavailable(f'Function "{symbol}" not found in the CUDA driver '
                                    f'(too old for numba_ws: it needs CUDA 12)') from None
        fn = _FUNCTIONS[name] = ctypes.CFUNCTYPE(_I, *argtypes)(address)
    return fn


def address_of(name):
    """The address of entry point ``name``'s symbol (for a caller with its own prototype)."""
    return ctypes.cast(function(name), _P).value


def error_name(code):
    """``CUDA_ERROR_...`` for a CUresult: the driver's name, else :class:`CUresult`'s
    (no driver library), else ``CUresult(n)``."""
    text = ctypes.c_char_p()
    try:
        if function("cuGetErrorName")(int(code), ctypes.byref(text)) == 0 and text.value:
            return text.value.decode()
    except DriverUnavailable:
        pass
    known = {v: n for n, v in vars(CUresult).items() if n.startswith("CUDA_")}
    return known.get(int(code), f"CUresult({int(code)})")


def _out(ctype, name, *args):
    """Call ``name`` with a new ``ctype`` output first: (CUresult, output value)."""
    value = ctype()
    err = function(name)(ctypes.byref(value), *args)
    return err, value.value or 0


def _two_out(ctypes_, name, *args, first=True):
    """Call ``name`` with two new outputs (first, or after ``args``): (CUresult, both)."""
    a, b = (t() for t in ctypes_)
    refs = (ctypes.byref(a), ctypes.byref(b))
    err = function(name)(*(refs + args if first else args + refs))
    return err, a.value, b.value


def CUstream(handle):
    return int(handle)


def cuInit(flags):
    return (function("cuInit")(flags),)


def cuDriverGetVersion():
    return _out(_I, "cuDriverGetVersion")


def cuDeviceGet(ordinal):
    return _out(_I, "cuDeviceGet", ordinal)


def cuDeviceGetAttribute(attribute, device):
    return _out(_I, "cuDeviceGetAttribute", attribute, device)


def cuDevicePrimaryCtxRetain(device):
    return _out(_P, "cuDevicePrimaryCtxRetain", device)


def cuCtxGetCurrent():
    return _out(_P, "cuCtxGetCurrent")


def cuCtxSetCurrent(context):
    return (function("cuCtxSetCurrent")(int(context)),)


def cuCtxGetDevice():
    return _out(_I, "cuCtxGetDevice")


def cuCtxSynchronize():
    return (function("cuCtxSynchronize")(),)


def cuModuleLoadData(image: bytes):
    return _out(_P, "cuModuleLoadData", image)


def cuModuleLoadDataEx(image: bytes, count, options, values):
    """``values``: ints, or writable buffers (bytearray) passed by address."""
    keep = [(ctypes.c_char * len(v)).from_buffer(v) if isinstance(v, bytearray) else None
            for v in values]
    option_array = (_I * count)(*map(int, options))
    value_array = (_P * count)(*[ctypes.addressof(k) if k is not None else int(v)
                                 for k, v in zip(keep, values)])
    return _out(_P, "cuModuleLoadDataEx", image, count, option_array, value_array)


def cuModuleUnload(module):
    return (function("cuModuleUnload")(int(module)),)


def cuModuleGetFunction(module, name: bytes):
    return _out(_P, "cuModuleGetFunction", int(module), name)


def cuModuleGetGlobal(module, name: bytes):
    return _two_out((_U64, _SZ), "cuModuleGetGlobal", int(module), name)


def cuFuncGetAttribute(attribute, fn):
    return _out(_I, "cuFuncGetAttribute", attribute, int(fn))


def cuFuncSetAttribute(fn, attribute, value):
    return (function("cuFuncSetAttribute")(int(fn), attribute, value),)


def cuFuncGetParamInfo(fn, index):
    return _two_out((_SZ, _SZ), "cuFuncGetParamInfo", int(fn), index, first=False)


def cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
    """``params``: the address of the ``void*[]`` (an int) or 0; ``extra`` likewise."""
    return (function("cuLaunchKernel")(int(fn), gx, gy, gz, bx, by, bz, smem,
                                       int(stream) or None, params or None, extra or None),)


def cuMemAlloc(nbytes):
    return _out(_U64, "cuMemAlloc", nbytes)


def cuMemcpyHtoD(dst, src: bytes, nbytes):
    return (function("cuMemcpyHtoD")(int(dst), src, nbytes),)


def cuMemcpyDtoH(dst: int, src, nbytes):
    return (function("cuMemcpyDtoH")(dst, int(src), nbytes),)


def cuMemsetD8(ptr, value, nbytes):
    return (function("cuMemsetD8")(int(ptr), value, nbytes),)


def cuStreamSynchronize(stream):
    return (function("cuStreamSynchronize")(int(stream) or None),)


def cuTensorMapEncodeTiled(data_type, rank, address, dims, strides, box, element_strides,
                           interleave, swizzle, l2_promotion, oob_fill):
    """(CUresult, the map's 128 bytes). Dimension lists innermost first, as in cuda.h;
    the map is written into a 64-byte-aligned host buffer (``CUtensorMap`` is
    ``alignas(64)``)."""
    storage = ctypes.create_string_buffer(128 + 64)
    at = -ctypes.addressof(storage) % 64
    err = function("cuTensorMapEncodeTiled")(
        ctypes.addressof(storage) + at, data_type, rank, address,
        (_U64 * len(dims))(*dims), (_U64 * len(strides))(*strides),
        (_U * len(box))(*box), (_U * len(element_strides))(*element_strides),
        interleave, swizzle, l2_promotion, oob_fill)
    return err, storage.raw[at:at + 128]
