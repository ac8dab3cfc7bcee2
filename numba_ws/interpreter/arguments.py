"""Argument checks of the interpreter's op rules (:mod:`numba_ws.interpreter.ops`): each
raises :class:`~numba_ws.errors.WSUsageError` naming the op, the argument and what was
expected."""
import numbers

import numpy as np

from ..errors import WSUsageError
from ..language import core
from ..language import dtypes as wsdt
from .casts import _is_int


def _shape(op, shape, arg="shape"):
    if (not isinstance(shape, tuple) or not shape
            or not all(_is_int(s) and s > 0 for s in shape)):
        raise WSUsageError(
            f"ws.{op}(): {arg} must be a non-empty tuple of positive ints, got {shape!r}")
    return tuple(int(s) for s in shape)


def _dtype(op, dtype):
    """A numba_ws DType, or the one of an array's ``.dtype`` (a NumPy dtype)."""
    if isinstance(dtype, np.dtype) and wsdt.from_numpy(dtype) is not None:
        return wsdt.from_numpy(dtype)
    if not isinstance(dtype, wsdt.DType):
        raise WSUsageError(
            f"ws.{op}(): dtype must be a numba_ws dtype (ws.float16, ws.float32, ...) or "
            f"an array's .dtype, got {dtype!r}")
    return dtype


def _array(op, array):
    if not isinstance(array, np.ndarray):
        raise WSUsageError(
            f"ws.{op}(): array must be a NumPy array in interpreter mode, got "
            f"{type(array).__module__}.{type(array).__qualname__} (copy it to the host)")
    if array.ndim not in (1, 2):
        raise WSUsageError(f"ws.{op}(): array must be 1-D or 2-D, got {array.ndim}-D")
    return array


def _offsets(op, offsets, ndim):
    if not isinstance(offsets, tuple) or not all(_is_int(o) for o in offsets):
        raise WSUsageError(f"ws.{op}(): offsets must be a tuple of ints, got {offsets!r}")
    if len(offsets) != ndim:
        raise WSUsageError(
            f"ws.{op}(): offsets has {len(offsets)} "
            f"{'entry' if len(offsets) == 1 else 'entries'} but the array is {ndim}-D")
    return tuple(int(o) for o in offsets)


def _tile(op, x, arg="x"):
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (numbers.Number, np.generic)):
        return np.asarray(x)
    raise WSUsageError(f"ws.{op}(): {arg} must be a tile or a scalar, got {type(x).__name__}")


def _dtype_name(x):
    d = wsdt.from_numpy(x.dtype)
    return d.name if d is not None else str(x.dtype)


def _window(offsets, tile_shape, array_shape):
    """Slices (into the array, into the tile) of the in-bounds part, or None if empty."""
    src, dst = [], []
    for o, s, n in zip(offsets, tile_shape, array_shape):
        lo, hi = max(o, 0), min(o + s, n)
        if lo >= hi:
            return None
        src.append(slice(lo, hi))
        dst.append(slice(lo - o, hi - o))
    return tuple(src), tuple(dst)


def _interpreter(op):
    interp = core._ACTIVE.get()
    if interp is None:
        raise WSUsageError(f"ws.{op}() needs a running program instance (interpreter)")
    return interp


def _axis(op, axis):
    if not _is_int(axis) or not 0 <= axis <= 2:
        raise WSUsageError(f"ws.{op}(): axis must be 0, 1 or 2, got {axis!r}")
    return int(axis)
