"""Host-side tensor-map validation: every misuse is a WSUsageError naming the array, raised
before the driver is touched (so these run without a GPU)."""
import ast
import os
import subprocess
import sys

import pytest

from numba_ws.errors import WSUsageError
from numba_ws.runtime import tensormap as tm

GOOD = dict(ptr=0x7F0000000000, dtype_itemsize=2, shape=(1000, 1000), row_stride_bytes=2048,
            box=(64, 64), swizzle_bytes=128)


def call(**changes):
    kw = dict(GOOD, **changes)
    return tm.encode_tiled_2d(kw.pop("ptr"), kw.pop("dtype_itemsize"), kw.pop("shape"),
                              kw.pop("row_stride_bytes"), kw.pop("box"),
                              kw.pop("swizzle_bytes"), name="A", **kw)


def test_import_needs_no_driver():
    """cuda.bindings is imported lazily (inside the encoder), never at module level."""
    tree = ast.parse(open(tm.__file__).read())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            assert not any(n.startswith("cuda") for n in names), ast.dump(node)
    res = subprocess.run([sys.executable, "-c", "import numba_ws.runtime.tensormap"],
                         capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert res.returncode == 0, res.stderr


def test_valid_arguments_pass_validation():
    ptr, size, shape, stride, box, swz = tm.validate_tiled_2d(
        GOOD["ptr"], 2, (1000, 1000), 2048, (64, 64), 128, name="A")
    assert (shape, stride, box, swz) == ((1000, 1000), 2048, (64, 64), 128)


@pytest.mark.parametrize("changes,match", [
    (dict(ptr=0x7F0000000008), r"base address 0x7f0000000008 is not 16-byte aligned"),
    (dict(row_stride_bytes=2008), r"row stride 2008 bytes.*multiple of 16"),
    (dict(row_stride_bytes=1024), r"row stride 1024 bytes < one row"),
    (dict(box=(64, 128)), r"box inner extent 128 x 2 = 256 bytes exceeds the 128-byte swizzle"),
    (dict(box=(64, 64), swizzle_bytes=64), r"exceeds the 64-byte swizzle"),
    (dict(box=(300, 64)), r"box_rows=300.*1 <= box extent <= 256"),
    (dict(box=(64, 0)), r"box_cols=0"),
    (dict(box=(64, 4)), r"box inner extent 4 x 2 = 8 bytes.*multiple of 16"),
    (dict(swizzle_bytes=256), r"swizzle 256"),
    (dict(dtype_itemsize=3), r"element size 3 bytes"),
    (dict(shape=(0, 10)), r"rows=0"),
    (dict(shape=(10, 10, 10)), r"2-D shape"),
    (dict(dtype="complex64"), r"dtype 'complex64'"),
])
def test_invalid_arguments_raise_usage_error(changes, match):
    with pytest.raises(WSUsageError, match=match) as info:
        call(**changes)
    assert "array 'A'" in str(info.value)
    assert "expected" in str(info.value)


def test_usage_error_is_a_type_error():
    with pytest.raises(TypeError):
        call(ptr=3)


def test_no_swizzle_allows_wide_boxes():
    tm.validate_tiled_2d(GOOD["ptr"], 2, (100, 512), 1024, (8, 256), 0, name="A")


def test_encode_without_driver_is_a_clear_error(monkeypatch):
    """Without a GPU the driver call fails; the error still names the array."""
    from numba_ws.runtime import cudriver
    try:
        if cudriver.cuInit(0)[0] == 0:
            pytest.skip("a CUDA driver is present")
    except RuntimeError:      # no driver library: the case this test is about
        pass
    tm.cache_clear()
    with pytest.raises(WSUsageError, match="array 'A'"):
        call()


def test_cache_key_and_lru(monkeypatch):
    calls = []

    def fake(ptr, itemsize, shape, stride, box, swizzle_bytes, type_name):
        calls.append((ptr, shape, stride, box, swizzle_bytes, type_name))
        return bytes(128)

    import functools
    monkeypatch.setattr(tm, "_encode_cached", functools.lru_cache(maxsize=4)(fake))
    assert call() == bytes(128)
    call()
    call(box=(128, 64))
    call(dtype="float16")
    assert len(calls) == 3
    assert calls[2][-1] == "FLOAT16" and calls[0][-1] == "UINT16"


def test_driver_arguments_reach_the_c_prototype(monkeypatch):
    """cudriver's cuTensorMapEncodeTiled through a C callback of the driver's exact
    prototype: dims / strides / box innermost first, the enums as ints, a 64-byte-aligned
    map whose 128 bytes come back."""
    import ctypes
    from numba_ws.runtime import cudriver
    seen = {}
    _symbol, argtypes = cudriver.PROTOTYPES["cuTensorMapEncodeTiled"]

    def encode(out, dtype, rank, address, dims, strides, box, elem, inter, swz, l2, oob):
        seen.update(aligned=out % 64, dtype=dtype, rank=rank, address=address,
                    dims=[dims[i] for i in range(rank)], strides=[strides[0]],
                    box=[box[i] for i in range(rank)], elem=[elem[i] for i in range(rank)],
                    enums=(inter, swz, l2, oob))
        ctypes.memmove(out, bytes(range(128)), 128)
        return 0
    stub = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(encode)
    monkeypatch.setitem(cudriver._FUNCTIONS, "cuTensorMapEncodeTiled", stub)
    args = tm.driver_args(GOOD["ptr"], (1000, 3000), 6016, (64, 64), 128, "FLOAT16")
    err, data = cudriver.cuTensorMapEncodeTiled(*args)
    assert (err, data) == (0, bytes(range(128)))
    assert seen == dict(aligned=0, dtype=6, rank=2, address=GOOD["ptr"], dims=[3000, 1000],
                        strides=[6016], box=[64, 64], elem=[1, 1], enums=(0, 3, 2, 0))


# -- 1-D arrays, column-major views and plain (unswizzled) boxes (issue 14) --------------

@pytest.mark.parametrize("shape,strides,itemsize,transposed,want", [
    ((1000,), (4,), 4, False, ((1, 1000), 4000)),          # 1-D: one row
    ((1001,), (2,), 2, False, ((1, 1001), 2016)),          # its stride rounded up to 16
    ((100, 200), (400, 2), 2, False, ((100, 200), 400)),
    ((200, 100), (2, 400), 2, True, ((100, 200), 400)),    # column-major: transposed view
    ((1, 1001), (2002, 2), 2, False, ((1, 1001), 2016)),   # one row: any valid stride
    ((300, 1), (4, 1200), 4, True, ((1, 300), 1200)),
])
def test_tiled_2d_view(shape, strides, itemsize, transposed, want):
    assert tm.tiled_2d_view(shape, strides, itemsize, transposed) == want


@pytest.mark.parametrize("shape,itemsize,box,swizzle", [
    ((1000,), 4, (1, 256), 0),     # 1-D, 1 KiB boxes (no swizzle: no inner-extent limit)
    ((1001,), 2, (1, 8), 0),
    ((50, 36), 4, (128, 4), 0),    # a narrow (128, 1) tile in 16-byte rows
    ((50, 36), 4, (16, 16), 64),
    ((50, 36), 4, (8, 8), 32),
])
def test_views_of_element_wise_loads_validate(shape, itemsize, box, swizzle):
    strides = (shape[1] * itemsize, itemsize) if len(shape) == 2 else (itemsize,)
    view, stride = tm.tiled_2d_view(shape, strides, itemsize)
    tm.validate_tiled_2d(GOOD["ptr"], itemsize, view, stride, box, swizzle, name="x")


def test_a_stride_below_one_row_is_refused_even_for_one_row():
    """The driver wants globalStrides[0] >= the row's bytes whatever the row count."""
    with pytest.raises(WSUsageError, match=r"row stride 16 bytes < one row"):
        tm.validate_tiled_2d(GOOD["ptr"], 4, (1, 1000), 16, (1, 256), 0, name="x")


def test_driver_arguments_of_a_plain_1d_box():
    args = tm.driver_args(GOOD["ptr"], (1, 1000), 4000, (1, 256), 0, "FLOAT32")
    dtype, rank, ptr, dims, strides, box, elem, _, swizzle = args[:9]
    assert dtype == 7 and rank == 2 and ptr == GOOD["ptr"]       # FLOAT32
    assert dims == [1000, 1] and strides == [4000]
    assert box == [256, 1] and elem == [1, 1]
    assert swizzle == 0                                          # SWIZZLE_NONE


class _FakeDriver:
    def __init__(self):
        self.copied = []

    def cuMemAlloc(self, n):
        return 0, 0x7000 + n

    def cuMemcpyHtoD(self, ptr, blob, n):
        self.copied.append((ptr, blob, n))
        return (0,)


def _array(name, shape, strides, dtype="float32", ptr=0x7F0000001000):
    import math

    from numba_ws.language import dtypes
    from numba_ws.runtime.interop import ArrayArg
    return ArrayArg(name, ptr, shape, strides, getattr(dtypes, dtype), False, False, None,
                    math.prod(shape), True)


def test_launch_encodes_each_map_of_the_artifact(monkeypatch):
    """``_Loaded.tmap_pointer``: one map per ``art.tmaps`` entry (array, box, transposed,
    swizzle) through the 2-D view of its array, in order, copied to the device once per
    array placement; an entry of an older cached artifact (array, rows, cols,
    transposed) still encodes its swizzled box."""
    from types import SimpleNamespace

    from numba_ws.runtime import jit, launcher
    calls = []

    def fake(ptr, itemsize, shape, stride, box, swizzle_bytes, type_name):
        calls.append((shape, stride, box, swizzle_bytes, type_name))
        return bytes([len(calls)]) * 128

    fake_driver = _FakeDriver()
    monkeypatch.setattr(tm, "_encode_cached", fake)
    monkeypatch.setattr(launcher, "_driver", lambda: fake_driver)
    loaded = object.__new__(jit._Loaded)
    loaded.art = SimpleNamespace(tmaps=[("a", (1, 256), False, 0), ("x", (16, 16), False, 64),
                                        ("b", (64, 64), True, 128), ("c", 128, 64, False)])
    loaded.tmap_slots = [0, 1, 2, 3]
    loaded.tmap_buffers = {}
    values = [_array("a", (1000,), (4,)), _array("x", (50, 36), (144, 4)),
              _array("b", (256, 512), (2, 512), "float16"),
              _array("c", (512, 256), (512, 2), "float16")]
    ptr = loaded.tmap_pointer(values)
    assert calls == [((1, 1000), 4000, (1, 256), 0, "FLOAT32"),
                     ((50, 36), 144, (16, 16), 64, "FLOAT32"),
                     ((512, 256), 512, (64, 64), 128, "FLOAT16"),
                     ((512, 256), 512, (128, 64), 128, "FLOAT16")]
    (dst, blob, n), = fake_driver.copied
    assert dst == ptr and n == 4 * 128 and blob[::128] == bytes([1, 2, 3, 4])
    assert loaded.tmap_pointer(values) == ptr and len(fake_driver.copied) == 1
