"""Dtype promotion of the tile language (issue 15 item 3): one rule for Numba typing
(:mod:`numba_ws.language.typing`), the GPU lowering and the interpreter. Dtypes are
names ("float16", "int32", "bool", ...); pure Python and NumPy, no Numba.
"""
import numpy as np

_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
_INT_NAMES = ("int8", "uint8", "int16", "int32", "int64")
#: what a scalar operand (Python or kernel scalar) counts as: its kind, not its width
WEAK = ("bool", "int", "float")


def promote(a, b):
    """The dtype name of an element-wise arithmetic result on operands ``a`` and ``b``:
    each a dtype name (a tile: "float16", "int32", "bool", ...) or a weak scalar kind
    ("bool", "int", "float" in :data:`WEAK`, given as ``("scalar", kind)``). Like Triton,
    and NumPy 2 where Triton agrees:

    - tile op scalar keeps the tile's dtype (NumPy 2 weak scalars: ``x_f16 * 0.5`` is
      fp16, ``x_i32 + 1`` int32), except an int or bool tile with a float scalar, which is
      float32 (Triton; NumPy would give float64), and a bool tile with an int scalar,
      int32;
    - two float tiles: the wider; fp16 with bf16 is float32;
    - an int (or bool) tile with a float tile: the float tile's dtype (Triton; NumPy
      widens int32 + float32 to float64);
    - two int tiles: NumPy's ``promote_types`` (int32 + int64 is int64, int8 + uint8
      int16); bool with an int tile: the int dtype.

    Returns None when both are scalars (not a tile op).
    """
    wa, wb = isinstance(a, tuple), isinstance(b, tuple)
    if wa and wb:
        return None
    if wa or wb:
        tile, kind = (b, a[1]) if wa else (a, b[1])
        if kind == "float" and tile not in _FLOAT_RANK:
            return "float32"
        if kind == "int" and tile == "bool":
            return "int32"
        return tile
    if a == b:
        return a
    fa, fb = a in _FLOAT_RANK, b in _FLOAT_RANK
    if fa and fb:
        ra, rb = _FLOAT_RANK[a], _FLOAT_RANK[b]
        return "float32" if ra == rb else (a if ra > rb else b)
    if fa or fb:
        return a if fa else b
    if "bool" in (a, b):
        return b if a == "bool" else a
    return np.promote_types(a, b).name


def is_float_name(name):
    """Whether ``name`` (a dtype name, or anything else) names a float dtype."""
    return isinstance(name, str) and name in _FLOAT_RANK


def is_int_name(name):
    """Whether ``name`` names an integer dtype (bool is not one)."""
    return isinstance(name, str) and name in _INT_NAMES


#: operator symbols, for messages
SYMBOL = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
          "lshift": "<<", "rshift": ">>", "and_": "&", "or_": "|", "xor": "^",
          "maximum": "ws.maximum", "minimum": "ws.minimum", "where": "ws.where"}
#: integer-only operators (bool tiles too for & | ^)
INT_ONLY = ("lshift", "rshift", "and_", "or_", "xor")


def binary_result(op, a, b):
    """The dtype name of ``a op b`` (``a``, ``b`` as :func:`promote` takes them), or raise
    ``ValueError`` with the reason. ``truediv`` of ints (or bools) is float32 (Triton;
    NumPy gives float64); shifts and ``& | ^`` need int (or bool) operands."""
    out = promote(a, b)
    if out is None:
        return None
    if op == "truediv" and not is_float_name(out):
        return "float32"
    if op in INT_ONLY:
        for x in (a, b):
            kind = x[1] if isinstance(x, tuple) else ("float" if is_float_name(x) else "int")
            if kind == "float":
                shown = "a float scalar" if isinstance(x, tuple) else f"a {x} tile"
                raise ValueError(f"{SYMBOL[op]} needs integer (or bool) operands, got "
                                 f"{shown}")
        if op in ("lshift", "rshift") and out == "bool":
            return "int32"
    return out
