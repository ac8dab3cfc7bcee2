"""describe() and resolve_stream() on the CPU: NumPy, fake CAI / DLPack / torch objects."""
import ctypes

import ml_dtypes
import numpy as np
import pytest

from numba_ws.errors import WSUsageError
from numba_ws.language import dtypes
from numba_ws.runtime import interop
from numba_ws.runtime.interop import describe, resolve_stream


class CAI:
    """A fake device array exposing only __cuda_array_interface__."""

    def __init__(self, shape, typestr="<f4", ptr=0x7F0000001000, strides=None, readonly=False,
                 stream=None, version=3, **extra):
        self.__cuda_array_interface__ = dict(shape=shape, typestr=typestr,
                                             data=(ptr, readonly), strides=strides,
                                             version=version, stream=stream, **extra)


def test_numpy_c_contiguous():
    a = np.zeros((4, 6), np.float32)
    d = describe(a, "a")
    assert d.host and not d.readonly and d.dtype is dtypes.float32
    assert (d.ptr, d.shape, d.strides, d.size) == (a.ctypes.data, (4, 6), (24, 4), 24)
    assert d.layout == "C" and d.c_contig and not d.f_contig
    assert str(d.numba_type()) == "array(float32, 2d, C)"
    assert d.obj is a and "host" in repr(d)


def test_numpy_views_and_dtypes():
    base = np.zeros((8, 10), np.float16)
    v = describe(base[1:, ::2], "v")
    assert v.strides == (20, 4) and v.layout == "A" and v.ptr == base.ctypes.data + 20
    t = describe(base.T, "t")
    assert t.layout == "F" and t.f_contig and t.strides == (2, 20)
    ro = base.copy()
    ro.flags.writeable = False
    r = describe(ro, "r")
    assert r.readonly and "readonly" in str(r.numba_type())
    assert describe(np.zeros(3, ml_dtypes.bfloat16), "b").dtype is dtypes.bfloat16
    assert describe(np.zeros(3, np.int64), "i").dtype is dtypes.int64
    one = describe(np.zeros((5, 1), np.float32), "one")      # extent-1 dims are ignored
    assert one.c_contig and one.f_contig


def test_numpy_bad_dtype_names_argument_and_accepted():
    with pytest.raises(WSUsageError) as e:
        describe(np.zeros(3, np.complex64), "weights")
    msg = str(e.value)
    assert "'weights'" in msg and "complex64" in msg
    for name in dtypes.ALL:
        assert name in msg


def test_cai_strides_none_is_c_contiguous():
    d = describe(CAI((3, 5, 7), "<f2", stream=7), "x")
    assert not d.host and d.dtype is dtypes.float16
    assert d.strides == (70, 14, 2) and d.layout == "C" and d.stream == 7
    assert d.ptr == 0x7F0000001000 and d.size == 105


def test_cai_explicit_strides_and_readonly():
    d = describe(CAI((4, 3), "<f8", strides=(8, 32), readonly=True, version=2), "x")
    assert d.strides == (8, 32) and d.layout == "F" and d.readonly and d.stream is None
    assert describe(CAI((4, 3), "<i4", strides=(24, 8)), "s").layout == "A"
    assert describe(CAI((4, 3), "<i4", strides=(12, 4)), "c").layout == "C"


def test_cai_bad_dtype():
    with pytest.raises(WSUsageError, match=r"'q'.*uint16.*accepted dtypes"):
        describe(CAI((4,), "<u2"), "q")
    with pytest.raises(WSUsageError, match=r"'q'.*accepted dtypes"):
        describe(CAI((4,), ">f4"), "q")          # big-endian is not float32


def test_cai_bad_strides():
    with pytest.raises(WSUsageError, match=r"'m'.*multiples.*itemsize 4"):
        describe(CAI((4, 4), "<f4", strides=(16, 6)), "m")
    with pytest.raises(WSUsageError, match=r"'m'.*1 strides for 2 dimensions"):
        describe(CAI((4, 4), "<f4", strides=(16,)), "m")


def test_cai_misc_errors():
    with pytest.raises(WSUsageError, match=r"'k'.*masked"):
        describe(CAI((4,), mask=object()), "k")
    with pytest.raises(WSUsageError, match=r"'k'.*malformed"):
        describe(type("X", (), {"__cuda_array_interface__": {"shape": (1,)}})(), "k")
    with pytest.raises(WSUsageError, match=r"'k'.*null data pointer"):
        describe(CAI((4,), ptr=0), "k")
    with pytest.raises(WSUsageError, match=r"'k'.*negative"):
        describe(CAI((4, -1)), "k")
    assert describe(CAI((0, 4), ptr=0), "empty").size == 0


def test_cai_bfloat16_via_void2():
    class BF(CAI):
        dtype = np.dtype(ml_dtypes.bfloat16)
    assert describe(BF((2, 2), "<V2"), "b").dtype is dtypes.bfloat16
    with pytest.raises(WSUsageError, match="'b'"):
        describe(CAI((2, 2), "<V2"), "b")


def test_unsupported_objects():
    for bad in ([1.0, 2.0], 3, "x", object()):
        with pytest.raises(WSUsageError) as e:
            describe(bad, "arg7")
        assert "'arg7'" in str(e.value) and "__cuda_array_interface__" in str(e.value)


def test_describe_is_idempotent():
    d = describe(CAI((2,)), "x")
    assert describe(d, "y") is d


# --- DLPack ------------------------------------------------------------------------------

class DL:
    """Exposes only the DLPack protocol of a NumPy array (a CPU producer)."""

    def __init__(self, a, versioned=True):
        self.a, self.versioned = a, versioned

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, **kw):
        if not self.versioned and kw:
            raise TypeError("no max_version")
        return self.a.__dlpack__(**kw)


@pytest.mark.parametrize("versioned", [True, False])
def test_dlpack_cpu_producer(versioned):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    d = describe(DL(a, versioned), "p")
    assert d.host and d.ptr == a.ctypes.data and d.shape == (4, 3)
    assert d.strides == a.strides and d.dtype is dtypes.float32 and d.keep is not None


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeCudaDL:
    """A DLPack producer on device type 2 (CUDA) built by hand with ctypes."""

    def __init__(self, shape, code, bits, strides=None, device_type=2, offset=0):
        n = len(shape)
        self.shape = (ctypes.c_int64 * n)(*shape)
        self.strides = (ctypes.c_int64 * n)(*strides) if strides else None
        self.t = interop._DLTensor(
            0x7F00000A0000, interop._DLDevice(device_type, 0), n,
            interop._DLDataType(code, bits, 1), self.shape,
            self.strides if self.strides is not None else None, offset)
        self.device_type = device_type

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self):
        return _PyCapsule_New(ctypes.addressof(self.t), b"dltensor", None)


def test_dlpack_cuda_producer():
    d = describe(FakeCudaDL((3, 4), 4, 16, offset=64), "g")       # bfloat16
    assert not d.host and d.dtype is dtypes.bfloat16
    assert d.ptr == 0x7F00000A0000 + 64 and d.strides == (8, 2) and d.layout == "C"
    s = describe(FakeCudaDL((3, 4), 2, 32, strides=(1, 3)), "g")  # float32, F order
    assert s.strides == (4, 12) and s.layout == "F"


def test_dlpack_errors():
    with pytest.raises(WSUsageError, match=r"'g'.*device type 10"):
        describe(FakeCudaDL((3,), 2, 32, device_type=10), "g")
    with pytest.raises(WSUsageError, match=r"'g'.*code=1, bits=16"):
        describe(FakeCudaDL((3,), 1, 16), "g")


# --- torch, faked (torch is not imported by these tests) ----------------------------------

class _TorchDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


class FakeTensor:
    def __init__(self, shape, stride, dtype, device="cuda"):
        self.shape, self._stride = shape, stride
        self.dtype = _TorchDtype(dtype)
        self.device = type("dev", (), {"type": device, "__str__": lambda s: device})()
        self.is_cuda = device == "cuda"

    def data_ptr(self):
        return 0x7F0000B00000

    def stride(self):
        return self._stride

    def numel(self):
        return int(np.prod(self.shape))

    def is_contiguous(self):
        return self._stride == tuple(np.cumprod((1,) + self.shape[:0:-1])[::-1])

    @property
    def __cuda_array_interface__(self):  # wrong for bf16 on purpose: must not be used
        raise AssertionError("torch tensors are described through their own attributes")


FakeTensor.__module__ = "torch"


def test_torch_bfloat16_via_dtype_object():
    d = describe(FakeTensor((4, 8), (8, 1), "bfloat16"), "t")
    assert d.dtype is dtypes.bfloat16 and d.strides == (16, 2) and not d.host
    assert d.layout == "C" and d.size == 32 and d.ptr == 0x7F0000B00000
    f = describe(FakeTensor((4, 8), (1, 4), "float32", "cpu"), "t")
    assert f.host and f.layout == "F" and f.strides == (4, 16)
    with pytest.raises(WSUsageError, match=r"'t'.*torch.uint16"):
        describe(FakeTensor((4,), (1,), "uint16"), "t")
    with pytest.raises(WSUsageError, match=r"'t'.*device mps"):
        describe(FakeTensor((4,), (1,), "float16", "mps"), "t")


# --- streams -----------------------------------------------------------------------------

def test_resolve_stream_explicit():
    ns = type("S", (), {})
    assert resolve_stream(0) == 0 and resolve_stream(0x1234, [CAI((2,))]) == 0x1234
    cupy_like = ns()
    cupy_like.ptr = 0x55
    torch_like = ns()
    torch_like.cuda_stream = 0x66
    numba_ctypes = ns()
    numba_ctypes.handle = ctypes.c_void_p(0x77)
    numba_default = ns()
    numba_default.handle = ctypes.c_void_p(0)
    proto = ns()
    proto.__cuda_stream__ = lambda: (0, 0x88)
    assert resolve_stream(cupy_like) == 0x55
    assert resolve_stream(torch_like) == 0x66
    assert resolve_stream(numba_ctypes) == 0x77
    assert resolve_stream(numba_default) == 0
    assert resolve_stream(proto) == 0x88
    assert resolve_stream(np.uint64(9)) == 9


def test_resolve_stream_real_numba_stream_object():
    from cuda.bindings import driver
    from numba.cuda.cudadrv.driver import Stream
    assert resolve_stream(Stream(driver.CUstream(0xABC))) == 0xABC
    assert resolve_stream(driver.CUstream(0xDEF)) == 0xDEF


def test_resolve_stream_bad():
    for bad in (True, -1, "s", object(), 1.5):
        with pytest.raises(WSUsageError, match="stream="):
            resolve_stream(bad)


def test_resolve_stream_default_without_library_arrays():
    assert resolve_stream(None) == 0
    assert resolve_stream(None, [np.zeros(2), CAI((2,)), describe(CAI((3,)), "x"), 5]) == 0


def test_describer_is_chosen_per_type_but_checked_per_value():
    class Maybe:
        pass
    good, bad = Maybe(), Maybe()
    good.__cuda_array_interface__ = CAI((2, 2)).__cuda_array_interface__
    assert describe(good, "g").shape == (2, 2)
    with pytest.raises(WSUsageError, match=r"'b': cannot use .*Maybe"):
        describe(bad, "b")


def test_numpy_scalars_are_scalars_not_host_arrays():
    """np.float64(0.125) has __array_interface__ and .shape, but it is a scalar argument: it
    neither sends a launch to the interpreter nor trips the host/device mix error (found on
    the H200: attention with sm_scale=1/np.sqrt(D) refused to launch)."""
    import numba_ws as ws
    from numba_ws.compiler import numba_type_of
    from numba_ws.runtime.binding import bind

    def scale(x, y, s):
        pass
    for s in (np.float64(0.5), np.float32(0.5), np.int32(3), np.bool_(True)):
        assert not interop.is_array(s)
        assert numba_type_of(s, "s", False) == numba_type_of(s.item(), "s", False)
        bound = bind(scale, (CAI((4,)), CAI((4,)), s), {})
        assert not ws.jit(scale)._runs_interpreted(bound)
    assert interop.is_array(np.zeros(2)) and interop.is_array(CAI((2,)))
    host = bind(scale, (np.zeros(4), CAI((4,)), 1.0), {})
    with pytest.raises(WSUsageError, match=r"\['x'\] are host"):
        ws.jit(scale)._runs_interpreted(host)
