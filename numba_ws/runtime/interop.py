"""Describe user arrays (CuPy, torch, Numba, ``__cuda_array_interface__``, DLPack, NumPy)
as :class:`ArrayArg` without copying, and resolve the launch stream.

Invariants of an ``ArrayArg``:
- ``ptr`` is the address of element ``(0, ..., 0)`` (byte offsets already applied);
- ``strides`` are in bytes, one per dimension, each a multiple of ``dtype.itemsize``;
- ``dtype`` is one of :data:`numba_ws.language.dtypes.ALL`;
- ``host`` is True for memory the GPU must not dereference (NumPy, CPU tensors);
- ``obj`` is the object the user passed and ``keep`` whatever else must stay alive
  (a DLPack capsule) while ``ptr`` is in use.
cupy and torch are imported only when an argument's type comes from those modules.
"""
import ctypes
import operator
from typing import Any, NamedTuple, Optional

from ..errors import WSUsageError
from ..language import dtypes

ACCEPTED_OBJECTS = ("CuPy arrays, torch CUDA tensors, Numba device arrays, objects with "
                    "__cuda_array_interface__ (v2/v3) or __dlpack__ on a CUDA device, "
                    "NumPy arrays (interpreter mode)")
ACCEPTED_DTYPES = ", ".join(dtypes.ALL)


class ArrayArg(NamedTuple):
    name: str
    ptr: int
    shape: tuple
    strides: tuple          # bytes
    dtype: dtypes.DType
    host: bool
    readonly: bool
    stream: Optional[int]   # the CAI 'stream' entry, else None
    size: int               # number of elements
    c_contig: bool
    obj: Any = None
    keep: Any = None

    def __repr__(self):
        where = "host" if self.host else "device"
        return (f"ArrayArg({self.name!r}, {self.dtype.name}{list(self.shape)}, strides="
                f"{self.strides}, ptr={self.ptr:#x}, {where}, {type(self.obj).__name__})")

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def f_contig(self):
        return _contiguity(self.shape, self.strides, self.dtype.itemsize)[1]

    @property
    def layout(self):
        """Numba's layout letter: 'C', 'F' or 'A' (C wins for arrays that are both)."""
        return "C" if self.c_contig else ("F" if self.f_contig else "A")

    def numba_type(self):
        """The ``types.Array`` Numba would infer for this argument."""
        from numba.cuda import types
        return types.Array(self.dtype.numba, self.ndim, self.layout, readonly=self.readonly)


def _contiguity(shape, strides, itemsize):
    """(C-contiguous, F-contiguous) with NumPy's rules (extent-1 dims ignored)."""
    if 0 in shape:
        return True, True
    c = f = True
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            c = c and s == expect
            expect *= n
    expect = itemsize
    for n, s in zip(shape, strides):
        if n != 1:
            f = f and s == expect
            expect *= n
    return c, f


def _make(name, ptr, shape, strides, dtype, host, readonly, stream, obj, keep=None):
    item = dtype.itemsize
    shape = tuple(map(int, shape))
    cstrides, size = [], 1
    for n in reversed(shape):
        cstrides.append(size * item)
        size *= n
    cstrides.reverse()
    cstrides = tuple(cstrides)
    if shape and min(shape) < 0:
        raise WSUsageError(f"argument {name!r}: negative extent in shape {shape}")
    if strides is None:
        strides, c = cstrides, True
    else:
        strides = tuple(map(int, strides))
        c = strides == cstrides
        if not c:
            if len(strides) != len(shape):
                raise WSUsageError(f"argument {name!r}: {len(strides)} strides for "
                                   f"{len(shape)} dimensions")
            if any(s % item for s in strides):
                raise WSUsageError(
                    f"argument {name!r}: strides {strides} (bytes) must be multiples of "
                    f"the {dtype.name} itemsize {item}")
            c = _contiguity(shape, strides, item)[0]
    ptr = int(ptr or 0)
    if size and not ptr:
        raise WSUsageError(f"argument {name!r}: null data pointer for {size} elements")
    return ArrayArg(name, ptr, shape, strides, dtype, bool(host), bool(readonly), stream,
                    size, c, obj, keep)


_NP_CACHE = {}
_TYPESTR_CACHE = {}


def _dtype_np(name, np_dtype, obj):
    try:
        d = _NP_CACHE[np_dtype]
    except KeyError:
        d = dtypes.from_numpy(np_dtype)
        if d is None:
            raise WSUsageError(f"argument {name!r}: unsupported dtype {np_dtype} of "
                               f"{_tname(obj)}; accepted dtypes: {ACCEPTED_DTYPES}") from None
        _NP_CACHE[np_dtype] = d
    return d


def _tname(obj):
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


_TORCH_CACHE = {}
_new = tuple.__new__


def _contiguous(name, ptr, shape, strides, d, host, size, obj):
    """An ArrayArg for a library array its library reports C-contiguous (no re-checks)."""
    return _new(ArrayArg, (name, ptr, shape, strides, d, host, False, None, size, True, obj,
                           None))


def _from_torch(name, t):
    d = _TORCH_CACHE.get(t.dtype)
    if d is None:
        key = str(t.dtype)
        d = dtypes.ALL.get(key[len("torch."):]) if key.startswith("torch.") else None
        if d is None:
            raise WSUsageError(f"argument {name!r}: unsupported dtype {key} of torch tensor; "
                               f"accepted dtypes: {ACCEPTED_DTYPES}")
        _TORCH_CACHE[t.dtype] = d
    dev = t.device.type
    if dev not in ("cuda", "cpu"):
        raise WSUsageError(f"argument {name!r}: torch tensor on device {t.device}; "
                           f"accepted: {ACCEPTED_OBJECTS}")
    strides = tuple(map(d.itemsize.__mul__, t.stride()))
    if t.is_contiguous():
        return _contiguous(name, t.data_ptr(), tuple(t.shape), strides, d, dev == "cpu",
                           t.numel(), t)
    return _make(name, t.data_ptr(), t.shape, strides, d, dev == "cpu", False, None, t)


def _from_cupy(name, a):
    d = _NP_CACHE.get(a.dtype) or _dtype_np(name, a.dtype, a)
    c = getattr(a, "_c_contiguous", None)           # cheaper than a.flags (a new object)
    if c is None:
        c = a.flags.c_contiguous
    if c:
        return _contiguous(name, a.data.ptr, a.shape, a.strides, d, False, a.size, a)
    return _make(name, a.data.ptr, a.shape, a.strides, d, False, False, None, a)


def _from_cai(name, obj, cai):
    if cai.get("mask") is not None:
        raise WSUsageError(f"argument {name!r}: masked __cuda_array_interface__ arrays "
                           f"are not supported")
    try:
        ptr, readonly = cai["data"]
        shape, typestr = cai["shape"], cai["typestr"]
        d = _TYPESTR_CACHE.get(typestr)
        if d is None:
            import numpy as np
            np_dtype = np.dtype(typestr)
    except (KeyError, TypeError, ValueError) as e:
        raise WSUsageError(f"argument {name!r}: malformed __cuda_array_interface__ "
                           f"({e})") from None
    if d is None:
        if np_dtype.kind == "V" and np_dtype.itemsize == 2:
            # '<V2' is how 2-byte types without a NumPy code (bfloat16) travel; ask .dtype.
            try:
                np_dtype = np.dtype(getattr(obj, "dtype", np_dtype))
            except TypeError:
                pass
            d = _dtype_np(name, np_dtype, obj)
        else:
            d = _TYPESTR_CACHE[typestr] = _dtype_np(name, np_dtype, obj)
    return _make(name, ptr, shape, cai.get("strides"), d, False, readonly,
                 cai.get("stream"), obj)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


#: (code, bits) -> dtype name; codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool.
_DL_DTYPES = {(2, 16): "float16", (4, 16): "bfloat16", (2, 32): "float32",
              (2, 64): "float64", (0, 32): "int32", (0, 64): "int64",
              (0, 8): "int8", (1, 8): "uint8", (0, 16): "int16", (6, 8): "bool"}
_DL_CPU, _DL_CUDA, _DL_MANAGED = 1, 2, 13
#: DLManagedTensorVersioned: version(8) manager_ctx(8) deleter(8) flags(8), then DLTensor.
_DL_VERSIONED_OFFSET, _DL_READ_ONLY = 32, 1

_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype, _capsule_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(name, obj):
    try:
        dev_type, _ = obj.__dlpack_device__()
    except Exception as e:
        raise WSUsageError(f"argument {name!r}: __dlpack_device__() failed ({e})") from None
    if int(dev_type) not in (_DL_CPU, _DL_CUDA, _DL_MANAGED):
        raise WSUsageError(f"argument {name!r}: DLPack device type {int(dev_type)} is not "
                           f"CUDA; accepted: {ACCEPTED_OBJECTS}")
    try:
        cap = obj.__dlpack__(max_version=(1, 0))
    except TypeError:
        cap = obj.__dlpack__()
    # The capsule stays unconsumed and is kept alive in ArrayArg.keep; its destructor
    # returns the export to the producer once the ArrayArg is dropped.
    readonly = False
    if _capsule_valid(cap, b"dltensor_versioned"):
        base = _capsule_ptr(cap, b"dltensor_versioned")
        flags = ctypes.c_uint64.from_address(base + 24).value
        readonly = bool(flags & _DL_READ_ONLY)
        t = _DLTensor.from_address(base + _DL_VERSIONED_OFFSET)
    elif _capsule_valid(cap, b"dltensor"):
        t = _DLTensor.from_address(_capsule_ptr(cap, b"dltensor"))
    else:
        raise WSUsageError(f"argument {name!r}: __dlpack__() did not return a DLPack capsule")
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    d = dtypes.ALL.get(_DL_DTYPES.get((code, bits), ""))
    if d is None or lanes != 1:
        raise WSUsageError(f"argument {name!r}: unsupported DLPack dtype (code={code}, "
                           f"bits={bits}, lanes={lanes}); accepted dtypes: {ACCEPTED_DTYPES}")
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    strides = None if not t.strides else tuple(t.strides[i] * d.itemsize for i in range(ndim))
    ptr = (t.data or 0) + t.byte_offset
    return _make(name, ptr, shape, strides, d, t.device.device_type == _DL_CPU, readonly,
                 None, obj, cap)


def root_module(obj):
    return type(obj).__module__.partition(".")[0]


def is_host(value) -> bool:
    """Is ``value`` an array in host memory (NumPy, a torch CPU tensor, a DLPack CPU
    array)? Such launches run in the interpreter."""
    if dtypes.numpy_instance(value, "ndarray"):
        return True
    if root_module(value) == "torch" and hasattr(value, "device"):
        return value.device.type == "cpu"
    if hasattr(value, "__cuda_array_interface__"):
        return False
    if hasattr(value, "__array_interface__"):
        return True
    if hasattr(value, "__dlpack_device__"):
        try:
            return int(value.__dlpack_device__()[0]) == _DL_CPU
        except Exception:
            return False
    return False


def host_view(value):
    """A NumPy array sharing the memory of host array ``value`` (stores write through),
    or None when ``value`` is not in host memory. torch bfloat16 tensors are viewed
    through int16 (NumPy has no bfloat16: ml_dtypes' is used)."""
    if dtypes.numpy_instance(value, "ndarray"):
        return value
    if not is_host(value):
        return None
    if root_module(value) == "torch":
        t = value.detach()
        if str(t.dtype) == "torch.bfloat16":
            import torch
            return t.view(torch.int16).numpy().view(dtypes.bfloat16.dtype)
        return t.numpy()
    import numpy as np
    if hasattr(value, "__array_interface__"):
        return np.asarray(value)
    return np.from_dlpack(value)


def _from_numpy(name, a):
    d = _dtype_np(name, a.dtype, a)
    return _make(name, a.__array_interface__["data"][0], a.shape, a.strides, d, True,
                 not a.flags.writeable, None, a)


def _from_cai_attr(name, value):
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is None:
        _unsupported(name, value)
    return _from_cai(name, value, cai)


def _unsupported(name, value):
    raise WSUsageError(f"argument {name!r}: cannot use {_tname(value)} as an array; "
                       f"accepted: {ACCEPTED_OBJECTS}")


def _pick(value):
    """The describer for values of ``type(value)`` (decided once per type)."""
    if isinstance(value, ArrayArg):
        return lambda name, v: v
    if dtypes.numpy_instance(value, "ndarray"):
        return _from_numpy
    mod = root_module(value)
    if mod == "torch" and hasattr(value, "data_ptr"):
        return _from_torch
    if mod == "cupy" and hasattr(value, "data") and hasattr(value, "strides"):
        return _from_cupy
    if getattr(value, "__cuda_array_interface__", None) is not None:
        return _from_cai_attr
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        return _from_dlpack
    return None


_DESCRIBERS = {}


def is_array(value) -> bool:
    """Does ``value`` travel to a kernel as an array? NumPy scalars (``np.float32(2)``) have
    ``__array_interface__`` and ``shape`` but are scalars."""
    if dtypes.numpy_instance(value, "generic"):
        return False
    return any(hasattr(value, a) for a in ("__cuda_array_interface__", "__dlpack__",
                                           "__array_interface__"))


def describe(value, name: str = "?") -> ArrayArg:
    """Describe ``value`` as an :class:`ArrayArg` (zero copies); ``name`` is used in errors.

    Raises WSUsageError naming the argument for unsupported objects, dtypes or strides.
    """
    fn = _DESCRIBERS.get(type(value))
    if fn is None:
        fn = _pick(value)
        if fn is None:
            _unsupported(name, value)
        _DESCRIBERS[type(value)] = fn
    return fn(name, value)


def _stream_handle(stream) -> int:
    if isinstance(stream, bool):
        raise TypeError
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):            # torch, CuPy
        v = getattr(stream, attr, None)
        if v is not None:
            return operator.index(v)
    handle = getattr(stream, "handle", None)      # Numba
    if handle is not None:
        v = getattr(handle, "value", handle)
        return 0 if v is None else int(v)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    return operator.index(stream)                 # numpy ints, cuda.bindings CUstream


def resolve_stream(stream, args=()) -> int:
    """The raw CUstream handle to launch on.

    ``stream`` given: an int, or a CuPy (.ptr), torch (.cuda_stream), Numba (.handle) or
    ``__cuda_stream__`` stream. Otherwise CuPy's current stream if a CuPy array is among
    ``args`` (raw values or ArrayArgs), else torch's current stream for the first CUDA
    tensor, else 0 (the default stream).
    """
    if stream is not None:
        try:
            h = _stream_handle(stream)
        except (TypeError, ValueError, AttributeError):
            h = -1
        if h < 0:
            raise WSUsageError(f"stream={stream!r}: expected an int handle or a CuPy, torch, "
                               f"Numba or __cuda_stream__ stream object")
        return h
    for a in args:
        obj = a.obj if isinstance(a, ArrayArg) else a
        mod = root_module(obj)
        if mod == "cupy":
            import cupy
            return cupy.cuda.get_current_stream().ptr
        if mod == "torch" and getattr(obj, "is_cuda", False):
            import torch
            return torch.cuda.current_stream(obj.device).cuda_stream
    return 0
