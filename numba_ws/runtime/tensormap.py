"""Host-side TMA tensor maps (``CUtensorMap``, 128 opaque bytes) for 2-D row-major arrays.

A 1-D array or a column-major one is mapped through a 2-D row-major view
(:func:`tiled_2d_view`); a box is ``(box_rows, box_cols)`` with a swizzle of 128 / 64 /
32 bytes or none (0: plain rows, boxes of up to 256 columns).

``encode_tiled_2d`` validates its arguments in Python first (so misuse is a
:class:`~numba_ws.errors.WSUsageError` naming the array, even on a machine without a GPU),
then calls the driver's ``cuTensorMapEncodeTiled`` (runtime/cudriver.py) with the
dimensions innermost first, element strides 1, no interleave, the requested swizzle, L2
promotion 128 B and zero fill for out-of-bound elements. Results are cached (LRU) per
(pointer, shape, strides, box, swizzle, dtype). The driver is loaded only when a map is
encoded.

The bytes go to the device as they are: in a global-memory buffer whose address is passed
to ``numba_ws.codegen.tma`` intrinsics (see that module for why no proxy fence is needed),
or by value as a 64-byte-aligned 128-byte kernel parameter.
"""
import functools

from ..errors import WSUsageError

#: Swizzle widths in bytes that TMA supports (0 = no swizzle).
SWIZZLES = (0, 32, 64, 128)
#: Bytes of a CUtensorMap.
TENSORMAP_BYTES = 128
_CACHE_SIZE = 256
#: How far TMA loads promote L2 fetches (CUtensorMapL2promotion suffix): "NONE", "L2_64B",
#: "L2_128B" or "L2_256B".
L2_PROMOTION = "L2_128B"

# element size -> CUtensorMapDataType member used when no dtype name is given. TMA copies
# bits; the type only matters for the NaN out-of-bound fill, which is not used here.
_BY_SIZE = {1: "UINT8", 2: "UINT16", 4: "UINT32", 8: "UINT64"}
_BY_NAME = {
    "float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
    "int32": "INT32", "int64": "INT64", "uint8": "UINT8", "int8": "UINT8", "uint16": "UINT16",
    "int16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
}


def _fail(name, what, expected):
    raise WSUsageError(f"tensor map for array {name!r}: {what}; expected {expected}")


def validate_tiled_2d(ptr, itemsize, shape, row_stride_bytes, box, swizzle_bytes=128,
                      name="array"):
    """Check everything cuTensorMapEncodeTiled would reject, with a numba_ws message.

    Returns the normalized ``(ptr, itemsize, (rows, cols), row_stride_bytes,
    (box_rows, box_cols), swizzle_bytes)``.
    """
    def as_int(value, what):
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            _fail(name, f"{what}={value!r} is not an integer", "an int")
        return int(value)

    ptr = as_int(ptr, "base pointer")
    itemsize = as_int(itemsize, "itemsize")
    if itemsize not in _BY_SIZE:
        _fail(name, f"element size {itemsize} bytes", "1, 2, 4 or 8 bytes")
    if len(tuple(shape)) != 2:
        _fail(name, f"shape {tuple(shape)}", "a 2-D shape (rows, cols)")
    rows, cols = (as_int(v, "shape") for v in shape)
    if len(tuple(box)) != 2:
        _fail(name, f"box {tuple(box)}", "a 2-D box (box_rows, box_cols)")
    box_rows, box_cols = (as_int(v, "box") for v in box)
    stride = as_int(row_stride_bytes, "row stride")
    swizzle_bytes = as_int(swizzle_bytes, "swizzle")

    if ptr <= 0 or ptr % 16:
        _fail(name, f"base address {ptr:#x} is not 16-byte aligned", "a 16-byte aligned pointer")
    for dim, value in (("rows", rows), ("cols", cols)):
        if not 1 <= value <= 2 ** 32:
            _fail(name, f"{dim}={value}", "1 <= extent <= 2**32")
    if stride % 16 or not 0 < stride < 2 ** 40:
        _fail(name, f"row stride {stride} bytes",
              "a positive multiple of 16 bytes below 2**40 (pad the rows, or use cp.async)")
    if stride < cols * itemsize:   # the driver wants it even for one row
        _fail(name, f"row stride {stride} bytes < one row ({cols} x {itemsize} bytes)",
              "non-overlapping rows, contiguous along the last dimension")
    for dim, value in (("box_rows", box_rows), ("box_cols", box_cols)):
        if not 1 <= value <= 256:
            _fail(name, f"{dim}={value}", "1 <= box extent <= 256")
    inner = box_cols * itemsize
    if inner % 16:
        _fail(name, f"box inner extent {box_cols} x {itemsize} = {inner} bytes",
              "a multiple of 16 bytes")
    if swizzle_bytes not in SWIZZLES:
        _fail(name, f"swizzle {swizzle_bytes}", f"one of {SWIZZLES} bytes")
    if swizzle_bytes and inner > swizzle_bytes:
        _fail(name, f"box inner extent {box_cols} x {itemsize} = {inner} bytes exceeds the "
              f"{swizzle_bytes}-byte swizzle",
              f"box_cols * itemsize <= {swizzle_bytes} (split wider tiles into several boxes)")
    return ptr, itemsize, (rows, cols), stride, (box_rows, box_cols), swizzle_bytes


def tiled_2d_view(shape, strides, itemsize, transposed=False):
    """``((rows, cols), row_stride_bytes)`` of the row-major 2-D view TMA reads an array
    through: a 2-D array itself, a column-major one (``transposed``) through its
    transposed view, a 1-D array of N elements as (1, N). A view of one row gets the
    bytes of one row rounded up to 16 as its stride (the driver wants a multiple of 16
    and at least a row, and no second row is ever read)."""
    if len(shape) == 1:
        (rows, cols), stride = (1, shape[0]), 0
    elif transposed:
        (cols, rows), stride = shape, strides[1]
    else:
        (rows, cols), stride = shape, strides[0]
    if rows == 1:
        stride = -(-cols * itemsize // 16) * 16
    return (rows, cols), stride


def encode_tiled_2d(ptr, dtype_itemsize, shape, row_stride_bytes, box, swizzle_bytes=128,
                    *, dtype=None, name="array"):
    """Encode the tensor map of a row-major 2-D array -> ``bytes`` of length 128.

    ``ptr``: device address of element (0, 0); ``shape``: (rows, cols) in elements;
    ``row_stride_bytes``: bytes between rows; ``box``: (box_rows, box_cols), the tile one
    TMA copies (box_cols * itemsize <= swizzle_bytes); ``swizzle_bytes``: 0/32/64/128.
    ``dtype``: optional element type name (e.g. 'float16') for the map's data type;
    by default an unsigned type of ``dtype_itemsize`` bytes. ``name`` names the array in
    errors. Device coordinates are then ``{col, row}`` (innermost first).
    """
    args = validate_tiled_2d(ptr, dtype_itemsize, shape, row_stride_bytes, box,
                             swizzle_bytes, name)
    if dtype is not None:
        key = getattr(dtype, "name", str(dtype))
        if key not in _BY_NAME:
            _fail(name, f"dtype {key!r}", f"one of {sorted(_BY_NAME)}")
        type_name = _BY_NAME[key]
    else:
        type_name = _BY_SIZE[args[1]]
    try:
        return _encode_cached(*args, type_name)
    except _EncodeError as exc:
        _fail(name, str(exc), "parameters the driver accepts (and a working CUDA driver)")


class _EncodeError(Exception):
    pass


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _encode_cached(ptr, itemsize, shape, stride, box, swizzle_bytes, type_name):
    from . import cudriver

    _init_driver(cudriver)
    err, data = cudriver.cuTensorMapEncodeTiled(
        *driver_args(ptr, shape, stride, box, swizzle_bytes, type_name))
    if int(err) != 0:
        raise _EncodeError(f"cuTensorMapEncodeTiled failed with "
                           f"{cudriver.error_name(err)} for shape {shape}, row stride "
                           f"{stride} B, box {box}, swizzle {swizzle_bytes}")
    assert len(data) == TENSORMAP_BYTES
    return data


def driver_args(ptr, shape, stride, box, swizzle_bytes, type_name):
    """The argument tuple of cuTensorMapEncodeTiled (runtime/cudriver.py): dims
    innermost first, element strides 1, no interleave, zero fill."""
    from .cudriver import (CUtensorMapDataType, CUtensorMapFloatOOBfill,
                           CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle)
    rows, cols = shape
    box_rows, box_cols = box
    swz = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[swizzle_bytes]
    return (
        getattr(CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{type_name}"),
        2, ptr, [cols, rows], [stride], [box_cols, box_rows], [1, 1],
        CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
        getattr(CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{L2_PROMOTION}"),
        CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )


_DRIVER_READY = []


def _init_driver(driver):
    if not _DRIVER_READY:
        try:
            (err,) = driver.cuInit(0)
        except Exception as exc:  # the driver library itself is missing
            raise _EncodeError(f"the CUDA driver is not available ({exc})") from exc
        if int(err) != 0:
            raise _EncodeError(f"cuInit failed with {err!r} (no CUDA driver / GPU?)")
        _DRIVER_READY.append(True)


def cache_info():
    """functools-style statistics of the tensor-map cache."""
    return _encode_cached.cache_info()


def cache_clear():
    """Drop every cached tensor map (e.g. after freeing the arrays they describe)."""
    _encode_cached.cache_clear()
