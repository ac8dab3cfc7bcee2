"""Element types of tiles: one object usable by NumPy (``.dtype``) and by Numba (``.numba``).

``tile.astype(ws.float16)`` works in both worlds: NumPy's ``astype`` accepts any object
with a ``dtype`` attribute, and Numba types the global through :mod:`numba_ws.language.typing`.

``name`` is NumPy's (and torch's, DLPack's) name of the type: ``"bool"`` for
``ws.bool_``, whose attribute has NumPy's trailing underscore. Booleans are one byte in
arrays (NumPy's and torch's layout) and Numba's ``boolean`` (an i1) in registers.
"""
import ml_dtypes
import numpy as np
from numba.cuda import types


class DType:
    __slots__ = ("name", "dtype", "numba", "itemsize", "attr")

    def __init__(self, name, np_dtype, numba_type, attr=None):
        self.name = name
        self.dtype = np.dtype(np_dtype)
        self.numba = numba_type
        self.itemsize = self.dtype.itemsize
        self.attr = attr or name    # the numba_ws attribute: ws.<attr>

    def __repr__(self):
        return f"ws.{self.attr}"

    def __reduce__(self):
        return (from_name, (self.name,))


float16 = DType("float16", np.float16, types.float16)
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, types.bfloat16)
float32 = DType("float32", np.float32, types.float32)
float64 = DType("float64", np.float64, types.float64)
int32 = DType("int32", np.int32, types.int32)
int64 = DType("int64", np.int64, types.int64)
# issue 15 item 7: narrow integer and boolean arrays
int8 = DType("int8", np.int8, types.int8)
uint8 = DType("uint8", np.uint8, types.uint8)
int16 = DType("int16", np.int16, types.int16)
bool_ = DType("bool", np.bool_, types.boolean, attr="bool_")

ALL = {d.name: d for d in (float16, bfloat16, float32, float64, int32, int64,
                           int8, uint8, int16, bool_)}
#: dtypes accepted as ``dot`` operands (fp32 runs as tf32 on the tensor cores).
DOT_INPUTS = ("float16", "bfloat16", "float32")


def from_name(name):
    return ALL[name]


def from_numpy(np_dtype):
    """The DType for a NumPy dtype (ml_dtypes.bfloat16 included), or None."""
    np_dtype = np.dtype(np_dtype)
    for d in ALL.values():
        if d.dtype == np_dtype:
            return d
    return None


def from_numba(numba_type):
    for d in ALL.values():
        if d.numba == numba_type:
            return d
    return None
