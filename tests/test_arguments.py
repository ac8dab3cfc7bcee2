"""Kernel arguments (issue 15 item 7): int8 / uint8 / int16 / bool arrays for loads,
stores and astype; host arrays that are not NumPy (DLPack CPU arrays, torch CPU tensors)
run in the interpreter; an array of the wrong rank is an error naming the argument and
the rank the op expects, on the compile path and in the interpreter."""
import pickle

import numpy as np
import pytest

import numba_ws as ws
from numba.cuda import types
from numba_ws.compiler import numba_type_of
from numba_ws.errors import WSCompileError, WSUsageError
from numba_ws.language import dtypes
from numba_ws.runtime import interop
from ptx_tools import assemble

NARROW = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16}


# --- the dtypes ----------------------------------------------------------------------

@pytest.mark.parametrize("attr,np_dtype,numba_type", [
    ("int8", np.int8, types.int8), ("uint8", np.uint8, types.uint8),
    ("int16", np.int16, types.int16), ("bool_", np.bool_, types.boolean)])
def test_new_dtypes_in_both_worlds(attr, np_dtype, numba_type):
    d = getattr(ws, attr)
    assert d.dtype == np.dtype(np_dtype) and d.numba == numba_type
    assert repr(d) == f"ws.{attr}" and dtypes.from_numpy(np_dtype) is d
    assert dtypes.from_numba(numba_type) is d and pickle.loads(pickle.dumps(d)) is d
    assert d.itemsize == np.dtype(np_dtype).itemsize
    arr = np.zeros((3, 5), np_dtype)
    assert numba_type_of(arr, "a", False) == types.Array(numba_type, 2, "A")


def test_bool_dtype_has_numpy_and_torch_name():
    assert ws.bool_.name == "bool" and dtypes.from_name("bool") is ws.bool_


@pytest.mark.parametrize("name", ["int8", "uint8", "int16", "bool"])
def test_describe_numpy_cai_and_dlpack(name):
    np_dtype = np.dtype(name)
    a = np.arange(12).reshape(3, 4).astype(np_dtype)
    d = interop.describe(a, "a")
    assert d.dtype is dtypes.ALL[name] and d.host and d.strides == a.strides
    cai = type("CAI", (), {"__cuda_array_interface__": {
        "shape": (3, 4), "typestr": np_dtype.str, "data": (0x7F0000000000, False),
        "version": 3}})()
    assert interop.describe(cai, "q").dtype is dtypes.ALL[name]
    dl = interop._from_dlpack("g", a)            # NumPy's own DLPack export (CPU)
    assert dl.dtype is dtypes.ALL[name] and dl.host and dl.ptr == a.ctypes.data


# --- interpreter: loads, stores and astype of narrow and boolean arrays ---------------

def copy_and_convert(a, same, as_f32, back, BM: ws.constexpr, BN: ws.constexpr,
                     DT: ws.constexpr):
    """Per program one (BM, BN) block: copied as is, as float32 * 2, and round-tripped
    through float32 back to DT; ragged edges read 0 and drop the writes."""
    r, c = ws.program_id(0) * BM, ws.program_id(1) * BN
    x = ws.load(a, (r, c), (BM, BN))
    ws.store(same, (r, c), x)
    f = x.astype(ws.float32) * 2.0
    ws.store(as_f32, (r, c), f)
    ws.store(back, (r, c), (f * 0.5).astype(DT))


def _narrow_input(name, shape, rng):
    if name == "bool":
        return rng.random(shape) < 0.5
    info = np.iinfo(NARROW[name])
    lo, hi = max(info.min, -1000), min(info.max, 1000)   # float32 round trips exactly
    return rng.integers(lo, hi, shape, endpoint=True).astype(NARROW[name])


@pytest.mark.parametrize("name", ["int8", "uint8", "int16", "bool"])
def test_interpreter_loads_stores_and_casts(name):
    rng = np.random.default_rng(7)
    a = _narrow_input(name, (70, 45), rng)
    np_dtype = a.dtype
    sentinel = np.ones(1, np_dtype)[0] if name == "bool" else np.iinfo(np_dtype).max
    same = np.full((70, 45), sentinel, np_dtype)
    back = np.full((70, 45), sentinel, np_dtype)
    as_f32 = np.full((70, 45), np.nan, np.float32)
    if name == "bool":
        same[:] = back[:] = ~a          # every element must be overwritten
    grid = (ws.cdiv(70, 32), ws.cdiv(45, 16))
    ws.jit(copy_and_convert)[grid](a, same, as_f32, back, BM=32, BN=16,
                                   DT=dtypes.ALL[name])
    np.testing.assert_array_equal(same, a)
    np.testing.assert_array_equal(as_f32, a.astype(np.float64) * 2)
    np.testing.assert_array_equal(back, a)


def bool_logic(flags, x, out, BM: ws.constexpr, BN: ws.constexpr):
    """A boolean array read as a tile and used as 0/1 weights; a float tile stored into
    a bool array is ``x != 0`` (astype / store cast)."""
    f = ws.load(flags, (0, 0), (BM, BN))
    v = ws.load(x, (0, 0), (BM, BN))
    ws.store(out, (0, 0), (v * f.astype(ws.float32)).astype(ws.bool_))


def test_interpreter_bool_arrays():
    rng = np.random.default_rng(3)
    flags = rng.random((16, 16)) < 0.5
    x = rng.integers(-2, 3, (16, 16)).astype(np.float32)
    x[0, :4] = [np.nan, -np.inf, np.inf, -0.0]
    out = np.zeros((16, 16), np.bool_)
    ws.jit(bool_logic)[(1,)](flags, x, out, BM=16, BN=16)
    with np.errstate(invalid="ignore"):
        want = (x * flags.astype(np.float32)) != 0
    np.testing.assert_array_equal(out, want)


def store_cast(x, c, d, BM: ws.constexpr, BN: ws.constexpr, DT: ws.constexpr):
    t = ws.load(x, (0, 0), (BM, BN))
    ws.store(c, (0, 0), t)                  # the store casts to c's dtype
    ws.store(d, (0, 0), ws.astype(t, DT))


@pytest.mark.parametrize("name", ["int8", "uint8", "int16"])
def test_interpreter_float_to_narrow_int_saturates_like_the_gpu(name):
    """float -> int is the GPU's cvt.rzi (codegen/convert.py reference): toward zero,
    saturating, NaN -> 0; NumPy's astype would wrap 300 to 44 in int8."""
    from numba_ws.codegen.convert import reference
    x = np.array([[np.nan, np.inf, -np.inf, 300.0, -300.0, 127.9, -128.9, 0.5],
                  [-0.5, 255.5, 256.0, -1.0, 40000.0, -40000.0, 7.99, -7.99]], np.float32)
    c = np.full(x.shape, 5, NARROW[name])
    d = np.full(x.shape, 5, NARROW[name])
    ws.jit(store_cast)[(1,)](x, c, d, BM=2, BN=8, DT=dtypes.ALL[name])
    want = reference(x, NARROW[name])
    np.testing.assert_array_equal(c, want)
    np.testing.assert_array_equal(d, want)
    info = np.iinfo(NARROW[name])
    assert want[0, 1] == info.max and want[0, 2] == info.min and want[0, 0] == 0
    assert want[1, 4] == info.max and want[1, 5] == info.min   # +-40000 saturate


# --- GPU compile path: PTX for the narrow integer arrays ------------------------------

def narrow_epilogue(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr,
                    DT: ws.constexpr):
    """GEMM whose fp32 result is stored into an integer array (astype to DT, saturating
    on the GPU), plus a copy of one narrow tile through registers."""
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        acc = ws.dot(ws.load(a, (0, k * BK), (BM, BK)), ws.load(b, (k * BK, 0), (BK, BN)),
                     acc)
    ws.store(c, (0, 0), acc.astype(DT))


@pytest.mark.parametrize("name", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_ptx_stores_narrow_integers(name, arch, tmp_path):
    a = np.zeros((128, 128), np.float16)
    b = np.zeros((128, 128), np.float16)
    c = np.zeros((128, 128), NARROW[name])
    cc = (9, 0) if arch == "sm_90a" else (8, 0)
    ptx = ws.jit(narrow_epilogue).inspect_ptx(a, b, c, BM=128, BN=128, BK=64,
                                              DT=dtypes.ALL[name], cc=cc)
    assemble(ptx, tmp_path, arch)
    sign, bits = ("u" if name == "uint8" else "s"), (16 if name == "int16" else 8)
    assert f"cvt.rzi.{sign}{bits}.f32" in ptx            # saturating float -> int


@pytest.mark.parametrize("name", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_ptx_loads_narrow_integers(name, arch, tmp_path):
    """int8 / uint8 / int16 arrays read into shared memory (TMA on sm_90a; sm_80: cp.async
    for int16, ld.global for 1-byte elements), then into registers."""
    a = np.zeros((64, 64), NARROW[name])
    same, back = np.zeros((64, 64), NARROW[name]), np.zeros((64, 64), NARROW[name])
    as_f32 = np.zeros((64, 64), np.float32)
    cc = (9, 0) if arch == "sm_90a" else (8, 0)
    ptx = ws.jit(copy_and_convert).inspect_ptx(a, same, as_f32, back, BM=64, BN=64,
                                               DT=dtypes.ALL[name], cc=cc)
    assemble(ptx, tmp_path, arch)
    if arch == "sm_90a":
        assert "cp.async.bulk.tensor" in ptx
    else:
        assert ("cp.async.ca.shared.global" in ptx or "cp.async.cg.shared.global" in ptx
                or "ld.global" in ptx)


def test_ptx_bool_arrays(tmp_path):
    a = np.zeros((64, 64), np.bool_)
    ptx = ws.jit(copy_and_convert).inspect_ptx(a, a.copy(), np.zeros((64, 64), np.float32),
                                               a.copy(), BM=64, BN=64, DT=ws.bool_,
                                               cc=(9, 0))
    assemble(ptx, tmp_path, "sm_90a")


# --- host arrays that are not NumPy ---------------------------------------------------

class DLPackOnly:
    """A host array seen only through DLPack (as a JAX / CuPy-host / custom array would
    be): no __array_interface__."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def scale_rows(x, out, BM: ws.constexpr, BN: ws.constexpr):
    t = ws.load(x, (ws.program_id(0) * BM, 0), (BM, BN))
    ws.store(out, (ws.program_id(0) * BM, 0), t * 3.0)


def test_dlpack_cpu_arrays_run_in_the_interpreter():
    x = np.arange(40 * 8, dtype=np.float32).reshape(40, 8)
    out = np.full((40, 8), np.nan, np.float32)
    wx, wout = DLPackOnly(x), DLPackOnly(out)
    assert interop.is_host(wx) and not hasattr(wx, "__array_interface__")
    ws.jit(scale_rows)[(3,)](wx, wout, BM=16, BN=8)   # stores write through the view
    np.testing.assert_array_equal(out, x * 3)


def test_host_and_device_arrays_mixed_is_an_error():
    x = np.zeros((16, 8), np.float32)
    dev = type("Dev", (), {"__cuda_array_interface__": {
        "shape": (16, 8), "typestr": "<f4", "data": (0x7F0000000000, False),
        "version": 3}})()
    with pytest.raises(WSUsageError, match=r"\['x'\] are host arrays"):
        ws.jit(scale_rows)[(1,)](x, dev, BM=16, BN=8)


def test_torch_cpu_tensors_run_in_the_interpreter():
    torch = pytest.importorskip("torch")
    x = torch.arange(40 * 8, dtype=torch.float32).reshape(40, 8)
    out = torch.full((40, 8), float("nan"), dtype=torch.float32)
    ws.jit(scale_rows)[(3,)](x, out, BM=16, BN=8)
    assert torch.equal(out, x * 3)
    xb = x.to(torch.bfloat16)                         # NumPy has no bf16: ml_dtypes view
    outb = torch.zeros((40, 8), dtype=torch.bfloat16)
    ws.jit(scale_rows)[(3,)](xb, outb, BM=16, BN=8)
    assert torch.equal(outb, (xb.float() * 3).to(torch.bfloat16))
    flags = torch.rand(16, 16) < 0.5                 # torch.bool
    same = torch.zeros(16, 16, dtype=torch.bool)
    f32 = torch.zeros(16, 16)
    ws.jit(copy_and_convert)[(1, 1)](flags, same, f32, torch.zeros(16, 16, dtype=torch.bool),
                                     BM=16, BN=16, DT=ws.bool_)
    assert torch.equal(same, flags) and torch.equal(f32, flags.float() * 2)


# --- wrong ranks ---------------------------------------------------------------------

def load_2d(a, c, BM: ws.constexpr, BK: ws.constexpr):
    x = ws.load(a, (ws.program_id(0) * BM, 0), (BM, BK))     # 2-D load
    ws.store(c, (0, 0), x)


def store_2d(a, c, BM: ws.constexpr):
    ws.store(c, (0, 0), ws.load(a, (0, 0), (BM, BM)))       # 2-D store


def _load_in_helper(x, BM):
    return ws.load(x, (0, 0), (BM, BM))                     # helper's load


def load_through_helper(a, c, BM: ws.constexpr):
    ws.store(c, (0, 0), _load_in_helper(a, BM))


@pytest.mark.parametrize("shape", [(64,), (2, 64, 64)])
def test_wrong_rank_names_argument_and_expected_rank(shape):
    a = np.zeros(shape, np.float16)
    c = np.zeros((64, 64), np.float16)
    want = rf"ws.load\(\): argument 'a' is a {len(shape)}-D array, but this load has 2 " \
           r"offsets and expects a 2-D array"
    with pytest.raises(WSCompileError, match=want) as info:
        ws.jit(load_2d).inspect_ptx(a, c, BM=64, BK=64)
    assert "# 2-D load" in str(info.value)              # the kernel line is quoted
    with pytest.raises(WSUsageError, match=want):
        ws.jit(load_2d)[(1,)](a, c, BM=64, BK=64)


def test_wrong_rank_of_a_stored_array():
    a = np.zeros((64, 64), np.float16)
    c = np.zeros((2, 64, 64), np.float16)
    want = r"ws.store\(\): argument 'c' is a 3-D array, but this store has 2 offsets and " \
           r"expects a 2-D array"
    with pytest.raises(WSCompileError, match=want):
        ws.jit(store_2d).inspect_ptx(a, c, BM=64)
    with pytest.raises(WSUsageError, match=want):
        ws.jit(store_2d)[(1,)](a, c, BM=64)


def test_wrong_rank_inside_a_helper_names_the_kernel_argument():
    a, c = np.zeros(64, np.float16), np.zeros((64, 64), np.float16)
    with pytest.raises(WSCompileError, match=r"argument 'a' is a 1-D array") as info:
        ws.jit(load_through_helper).inspect_ptx(a, c, BM=64)
    text = str(info.value)
    assert "# helper's load" in text and "(in helper _load_in_helper(), called from)" in text
    with pytest.raises(WSUsageError, match=r"argument 'a' is a 1-D array"):
        ws.jit(load_through_helper)[(1,)](a, c, BM=64)


def test_offsets_of_the_wrong_length_still_blame_the_offsets():
    """The shape says 2-D like the array: the offsets are the mistake (typing's words)."""
    def short(a, c, BM: ws.constexpr):
        ws.store(c, (0, 0), ws.load(a, (0,), (BM, BM)))
    a, c = np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16)
    with pytest.raises(WSCompileError, match=r"load\(offsets\) has 1 entry but the array "
                       r"is 2-D"):
        ws.jit(short).inspect_ptx(a, c, BM=64)
