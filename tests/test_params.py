"""ParamPacker / pack_fields lay kernel parameters out exactly as numba-cuda does."""
import ctypes
import re
import threading
import time
import types as pytypes

import numpy as np
import pytest
from cuda.core.utils import StridedMemoryView
from numba.cuda import types
from numba.cuda.dispatcher import _Kernel

from numba_ws.errors import WSUsageError
from numba_ws.runtime.interop import describe
from numba_ws.runtime.launcher import ByValue, ParamPacker, pack_fields


class CAI:
    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7F0000200000):
        self.__cuda_array_interface__ = dict(shape=shape, typestr=typestr, data=(ptr, False),
                                             strides=strides, version=3)


class FakeView(StridedMemoryView):
    """What numba-cuda's _prepare_args reads from a device array, without a GPU."""


def _view(arg):
    v = FakeView.__new__(FakeView)
    cls = type("V", (FakeView,), dict(
        ptr=arg.ptr, shape=arg.shape, size=arg.size, dtype=arg.dtype.dtype,
        _layout=pytypes.SimpleNamespace(strides_in_bytes=arg.strides,
                                        is_contiguous_c=arg.c_contig,
                                        is_contiguous_f=arg.f_contig)))
    v.__class__ = cls
    return v


def numba_kernelargs(argtypes, values):
    """Run numba-cuda's own _Kernel._prepare_args on the values."""
    fake_kernel = pytypes.SimpleNamespace(extensions=[])
    fake_kernel._prepare_args = lambda *a: _Kernel._prepare_args(fake_kernel, *a)
    out = []
    for ty, v in zip(argtypes, values):
        nv = _view(v) if isinstance(ty, types.Array) else v
        _Kernel._prepare_args(fake_kernel, ty, nv, 0, [], out)
    return out


def _as_pair(x):
    """numba appends ints for array fields and bools as-is, ctypes objects for scalars."""
    if isinstance(x, bool):
        return ctypes.c_bool, x
    if isinstance(x, int):
        return None, x
    return type(x), x.value


A2 = types.Array(types.float16, 2, "A")
A1 = types.Array(types.float32, 1, "C")
SCALARS = [(types.int32, -7), (types.int64, 1 << 40), (types.uint64, (1 << 64) - 1),
           (types.uint32, 5), (types.int16, -3), (types.float32, 1.5), (types.float64, -2.25),
           (types.boolean, True), (types.float16, 0.5)]


def _values():
    a = describe(CAI((8, 16), "<f2", strides=(64, 4)), "a")     # 2-D, strided
    b = describe(CAI((33,), "<f4", ptr=0x7F0000300000), "b")   # 1-D, contiguous
    return a, b


def test_fields_match_numba_prepare_args():
    a, b = _values()
    argtypes = [A2, A1] + [t for t, _ in SCALARS] + [types.UniTuple(types.int32, 2)]
    values = [a, b] + [v for _, v in SCALARS] + [(3, 4)]
    ours = pack_fields(argtypes, values)
    theirs = [_as_pair(x) for x in numba_kernelargs(argtypes, values)]
    assert len(ours) == len(theirs) == (5 + 4) + (5 + 2) + len(SCALARS) + 2
    for (ctype, value), (ntype, nvalue) in zip(ours, theirs):
        assert value == nvalue
        if ntype is None:      # an array field: 8 bytes
            assert ctypes.sizeof(ctype) == 8
        else:
            assert ctype is ntype


def test_documented_array_order():
    a, _ = _values()
    f = pack_fields([A2], [a])
    assert [v for _, v in f] == [0, 0, 128, 2, a.ptr, 8, 16, 64, 4]
    assert [c for c, _ in f][:5] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                      ctypes.c_int64, ctypes.c_void_p]


def _field_bytes(ctype, value):
    if issubclass(ctype, ctypes.Array):
        return bytes(ctype.from_buffer_copy(value))
    return bytes(ctype(value))


def test_pack_writes_what_pack_fields_describes():
    a, b = _values()
    argtypes = [A2, A1] + [t for t, _ in SCALARS] + [ByValue(128)]
    blob = bytes(range(128))
    values = [a, b] + [v for _, v in SCALARS] + [blob]
    p = ParamPacker(argtypes, names=["a", "b"] + [f"s{i}" for i in range(len(SCALARS))] + ["tm"])
    addr = p.pack(values)
    assert isinstance(addr, int) and addr
    expected = [_field_bytes(c, v) for c, v in pack_fields(argtypes, values)]
    assert p.nparams == len(expected) and p.sizes == [len(e) for e in expected]
    assert p.read_back() == expected
    ptrs = (ctypes.c_void_p * p.nparams).from_address(addr)
    assert ctypes.string_at(ptrs[4], 8) == a.ptr.to_bytes(8, "little")
    b2 = describe(CAI((5,), "<f4", ptr=0x1230), "b")
    assert p.pack([a, b2] + values[2:]) == addr                   # storage is reused
    assert p.read_back()[9 + 2] == (5).to_bytes(8, "little")      # b's nitems


def test_params_match_ptx_signature():
    """Each packed field has the size of the matching .param in numba's PTX."""
    from numba import cuda

    def k(a, b, n, m, x, f, flag, h, t):
        if flag and n > 0 and m > 0:
            a[0, 0] = a[0, 0] * h + b[0] + x + f + t[0] + t[1]

    sig = (A2, A1, types.int32, types.uint64, types.float64, types.float32, types.boolean,
           types.float16, types.UniTuple(types.int16, 2))
    ptx, _ = cuda.compile_ptx(k, sig, cc=(9, 0))
    entry = re.search(r"\.entry\s+(\S+)\s*\((.*?)\)", ptx, re.S)
    sizes = [int(w) // 8 for w in re.findall(r"\.param\s+\.[a-z](\d+)", entry.group(2))]
    assert ParamPacker(sig).sizes == sizes


def test_zero_dim_and_no_args():
    z = describe(CAI((), "<f8"), "z")
    p = ParamPacker([types.Array(types.float64, 0, "C")])
    p.pack([z])
    assert p.nparams == 5 and p.read_back()[2] == (1).to_bytes(8, "little")
    assert p.nbytes == 40 and p.layout()[-1] == (32, 8)
    empty = ParamPacker([])
    assert empty.nparams == 0 and empty.pack([]) == 0 and empty.nbytes == 0


@pytest.mark.parametrize("value, match", [
    (describe(CAI((8, 16), "<f4"), "a"), r"'a' does not match.*dtype float32 != float16"),
    (describe(CAI((8,), "<f2"), "a"), r"'a' does not match.*1 dimensions != 2"),
    (describe(np.zeros((8, 16), np.float16), "a"), r"'a' does not match.*host memory"),
    (np.zeros((8, 16), np.float16), r"'a': expected an array"),
])
def test_array_mismatch_errors(value, match):
    p = ParamPacker([A2, types.int32], names=["a", "n"])
    with pytest.raises(WSUsageError, match=match):
        p.pack([value, 1])


def test_layout_checked():
    t = describe(CAI((8, 16), "<f2", strides=(2, 16)), "t")       # F-contiguous
    with pytest.raises(WSUsageError, match=r"'t' .*not C-contiguous"):
        ParamPacker([types.Array(types.float16, 2, "C")], ["t"]).pack([t])
    ParamPacker([types.Array(types.float16, 2, "F")], ["t"]).pack([t])
    ParamPacker([A2], ["t"]).pack([t])


@pytest.mark.parametrize("ty, value, match", [
    (types.int32, 1 << 31, r"'n'.*not a valid int32"),
    (types.uint64, -1, r"'n'.*not a valid uint64"),
    (types.int64, 2.5, r"'n'.*not a valid int64"),
    (types.float32, "x", r"'n'.*not a valid float32"),
])
def test_scalar_errors(ty, value, match):
    p = ParamPacker([ty], names=["n"])
    with pytest.raises(WSUsageError, match=match):
        p.pack([value])


def test_count_bytes_and_type_errors():
    a, _ = _values()
    p = ParamPacker([A2, ByValue(128)], names=["a", "tm"])
    with pytest.raises(WSUsageError, match="expected 2 kernel arguments, got 1"):
        p.pack([a])
    with pytest.raises(WSUsageError, match=r"'tm': expected 128 bytes, got 64"):
        p.pack([a, bytes(64)])
    with pytest.raises(WSUsageError, match=r"'c'.*complex64 is not supported"):
        ParamPacker([types.complex64], names=["c"])
    with pytest.raises(WSUsageError, match=r"'u'.*uint16 is not supported"):
        ParamPacker([types.Array(types.uint16, 1, "C")], names=["u"])


def test_numpy_scalars_accepted():
    p = ParamPacker([types.int32, types.float32, types.boolean])
    p.pack([np.int32(3), np.float64(2.0), np.bool_(False)])
    assert p.read_back() == [bytes(ctypes.c_int32(3)), bytes(ctypes.c_float(2.0)), b"\x00"]


def test_threads_get_their_own_storage():
    p = ParamPacker([types.int64])
    addrs, errors = {}, []
    alive = threading.Barrier(4)

    def work(i):
        try:
            addrs[i] = p.pack([i])
            alive.wait()                    # all four threads hold their storage now
            for _ in range(200):
                p.pack([i])
                if p.read_back() != [i.to_bytes(8, "little")]:
                    errors.append(i)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(addrs.values())) == 4


def test_pack_overhead():
    a, b = _values()
    c = describe(CAI((8, 16), "<f2"), "c")
    p = ParamPacker([A2, A1, types.Array(types.float16, 2, "C"), types.int32, types.int32,
                     types.float32])
    vals = [a, b, c, 1, 2, 0.5]
    p.pack(vals)
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        p.pack(vals)
    us = (time.perf_counter() - t0) / n * 1e6
    print(f"ParamPacker.pack: {us:.2f} us per call (3 arrays, 3 scalars)")
    assert us < 50


def test_driver_results_are_named_from_ints_and_enums():
    """The ctypes launch returns a plain int CUresult; errors still name it."""
    from cuda.bindings import driver
    from numba_ws.runtime.launcher import _name
    assert _name(1) == "CUDA_ERROR_INVALID_VALUE" == _name(driver.CUresult(1))
    assert _name(201) == "CUDA_ERROR_INVALID_CONTEXT"
    assert _name(99999) == "CUresult(99999)"
