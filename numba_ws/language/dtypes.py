"""Element types of tiles: one object usable by NumPy (``.dtype``) and by Numba (``.numba``).

``tile.astype(ws.float16)`` works in both worlds: NumPy's ``astype`` accepts any object
with a ``dtype`` attribute, and Numba types the global through :mod:`numba_ws.language.typing`.

``name`` is NumPy's (and torch's, DLPack's) name of the type: ``"bool"`` for
``ws.bool_``, whose attribute has NumPy's trailing underscore. Booleans are one byte in
arrays (NumPy's and torch's layout) and Numba's ``boolean`` (an i1) in registers.
"""
import sys

#: The numba-cuda type of each dtype, by name: numba is imported on the first ``.numba``
#: (``import numba_ws`` must not pay numba-cuda's import: issue 17).
_NUMBA_NAMES = {"bool": "boolean"}


class DType:
    """A tile element type. ``dtype`` (NumPy) and ``numba`` (numba-cuda) are made on first
    use: bfloat16's NumPy dtype needs ml_dtypes, every ``numba`` needs numba-cuda."""
    __slots__ = ("name", "itemsize", "attr", "_dtype", "_numba")

    def __init__(self, name, itemsize, attr=None):
        self.name = name
        self.itemsize = itemsize
        self.attr = attr or name    # the numba_ws attribute: ws.<attr>
        self._dtype = self._numba = None

    @property
    def dtype(self):
        if self._dtype is None:
            import numpy as np
            if self.name == "bfloat16":
                import ml_dtypes
                self._dtype = np.dtype(ml_dtypes.bfloat16)
            else:
                self._dtype = np.dtype(self.name)
        return self._dtype

    @property
    def numba(self):
        if self._numba is None:
            from numba.cuda import types
            self._numba = getattr(types, _NUMBA_NAMES.get(self.name, self.name))
        return self._numba

    def __repr__(self):
        return f"ws.{self.attr}"

    def __reduce__(self):
        return (from_name, (self.name,))


float16 = DType("float16", 2)
bfloat16 = DType("bfloat16", 2)
float32 = DType("float32", 4)
float64 = DType("float64", 8)
int32 = DType("int32", 4)
int64 = DType("int64", 8)
# issue 15 item 7: narrow integer and boolean arrays
int8 = DType("int8", 1)
uint8 = DType("uint8", 1)
int16 = DType("int16", 2)
bool_ = DType("bool", 1, attr="bool_")

ALL = {d.name: d for d in (float16, bfloat16, float32, float64, int32, int64,
                           int8, uint8, int16, bool_)}
#: dtypes accepted as ``dot`` operands (fp32 runs as tf32 on the tensor cores).
DOT_INPUTS = ("float16", "bfloat16", "float32")


def numpy_instance(value, *names) -> bool:
    """``isinstance(value, (numpy.<name>, ...))`` without importing NumPy: a value can be
    a NumPy object only once NumPy is loaded (``import numba_ws`` does not load it)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, tuple(getattr(np, n) for n in names))


def from_name(name):
    return ALL[name]


def from_numpy(np_dtype):
    """The DType for a NumPy dtype (ml_dtypes.bfloat16 included), or None. Judged by the
    dtype's name and kind, so a NumPy dtype never makes ml_dtypes load."""
    if isinstance(np_dtype, DType):
        return np_dtype
    import numpy as np
    try:
        np_dtype = np.dtype(np_dtype)
    except TypeError:
        if np_dtype != "bfloat16":
            raise
        return bfloat16
    d = ALL.get(np_dtype.name)
    return d if d is not None and d.dtype == np_dtype else None


def from_numba(numba_type):
    for d in ALL.values():
        if d.numba == numba_type:
            return d
    return None
