"""Conversions of the interpreter (:mod:`numba_ws.interpreter.ops`) between dtypes: one
rounding to bfloat16 from the exact value (as the GPU's ``cvt.rn.bf16.*``), and
``astype`` / store casts with the language's rules (float -> int truncates and
saturates, NaN -> 0, as the GPU's ``cvt.rzi``). Pure NumPy; no Numba.
"""
import math
import numbers

import ml_dtypes
import numpy as np

from ..errors import WSUsageError

_BF16 = np.dtype(ml_dtypes.bfloat16)


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _quiet():
    """Floating-point exceptions give inf/NaN silently, as on the GPU."""
    return np.errstate(all="ignore")


# -- conversion to bfloat16 -----------------------------------------------------------

_F64_2_POW_M126 = 0x3810000000000000    # bits of 2**-126, the smallest normal bf16
_REBIAS = (1023 - 127) << 7               # f64 exponent -> bf16 exponent, above 7 bits
_BF16_INF, _BF16_NAN = 0x7F80, 0x7FC0


def _bf16_bits_of_float64(x):
    """uint16 bf16 bit patterns of the 1-D float64 array ``x``, each one rounding of its
    value.

    - |x| >= 2**-126: the f64 bit pattern rounded at bit 45 (52 - 7 mantissa bits), half
      to even; a carry moves into the exponent. Re-biased, a result at or above 0x7f80
      (|x| >= bf16 max + half an ulp, the tie at the top included: bf16 max is odd, so it
      rounds up) or x = ±inf gives ±inf.
    - |x| < 2**-126 (f64 subnormals included): the bf16 step is 2**-133 here, so the bf16
      bits are ``rint(|x| * 2**133)`` (both exact in f64; 128 is 0x0080 = 2**-126).
    - The sign bit is kept (±0 stay ±0); NaN gives the quiet NaN 0x7fc0 with x's sign.
    """
    x = np.ascontiguousarray(x, np.float64)
    bits = x.view(np.uint64)
    sign = ((bits >> np.uint64(48)) & np.uint64(0x8000)).astype(np.uint16)
    mag = bits & np.uint64(0x7FFF_FFFF_FFFF_FFFF)
    half_even = np.uint64(2 ** 44 - 1) + ((mag >> np.uint64(45)) & np.uint64(1))
    rounded = ((mag + half_even) >> np.uint64(45)).astype(np.int64) - _REBIAS
    normal = np.minimum(rounded, _BF16_INF)
    tiny = mag < np.uint64(_F64_2_POW_M126)
    small = np.rint(np.abs(np.where(tiny, x, 0.0)) * 2.0 ** 133).astype(np.int64)
    out = np.where(tiny, small, normal)
    out = np.where(np.isnan(x), _BF16_NAN, out).astype(np.uint16)
    return out | sign


def _int_as_float64(x):
    """A float64 array with, element by element, the bf16 rounding of the 1-D integer
    array ``x`` (any signed or unsigned integer dtype up to 64 bits).

    Below 2**53 in magnitude that is the integer itself (exact). From 2**53 up, its bf16
    rounding bit is bit 45 or higher, and the magnitude truncated to a multiple of 2**11
    with bit 11 set when a 1 was dropped (round to odd) has the same kept bits, rounding
    bit and sticky bits -- and at most 53 significant bits, so it is exact in float64.
    """
    if x.dtype.kind == "i":
        wide = x.astype(np.int64)
        negative = wide < 0
        bits = wide.view(np.uint64)
        mag = np.where(negative, ~bits + np.uint64(1), bits)   # |int64 min| = 2**63 fits
    else:
        mag = x.astype(np.uint64)
        negative = np.zeros(x.shape, bool)
    dropped = (mag & np.uint64(0x7FF)) != 0
    odd = (mag >> np.uint64(11)) | dropped.astype(np.uint64)
    out = np.where(mag >= np.uint64(2 ** 53), odd.astype(np.float64) * 2.0 ** 11,
                   mag.astype(np.float64))
    return np.where(negative, -out, out)


def _python_int_as_float64(value):
    """A Python int of any size as a float64 that rounds to bf16 as the int does (round to
    odd at 53 significant bits, as :func:`_int_as_float64`); beyond float64, ±inf."""
    mag = abs(value)
    drop = max(mag.bit_length() - 53, 0)
    odd = (mag >> drop) | (1 if mag & ((1 << drop) - 1) else 0)
    try:
        return math.copysign(math.ldexp(odd, drop), value)
    except OverflowError:
        return math.copysign(math.inf, value)


def to_bfloat16(x):
    """``x`` -- an array or scalar of float64, float32, float16, bfloat16, any integer up
    to 64 bits or bool -- as an ml_dtypes.bfloat16 array of its shape, each element the
    exact value rounded ONCE to nearest even (the GPU's ``cvt.rn.bf16.*``), never through
    float32 first (a double rounding: int32 2**27 + 2**19 + 1 is 0x4d01, not 0x4d00).

    ±0 keep their sign, ±inf stay, NaN gives a NaN (sign and payload unspecified);
    |x| >= bf16 max + half an ulp gives ±inf (the tie at the top rounds to even, to inf);
    below 2**-126 the step is 2**-133 (bf16 subnormals, no flush to zero; float64
    subnormals give ±0); integers beyond 2**53 round from their exact value; a Python int
    of any size is exact too. A bfloat16 input is copied unchanged.
    """
    if _is_int(x) and not isinstance(x, np.generic):
        x = _python_int_as_float64(int(x))
    x = np.asarray(x)
    if x.dtype == _BF16:
        return x.copy()
    flat = x.reshape(-1)                         # 1-D: array arithmetic wraps silently
    if x.dtype.kind in "iu":
        wide = _int_as_float64(flat)
    elif x.dtype.kind == "b" or x.dtype in (np.float16, np.float32, np.float64):
        with np.errstate(invalid="ignore"):      # a signalling NaN stays a NaN
            wide = flat.astype(np.float64)       # exact
    else:
        raise WSUsageError(f"to_bfloat16(): no exact conversion from {x.dtype} "
                           "(expected a float, an integer or bool)")
    return _bf16_bits_of_float64(wide).view(_BF16).reshape(x.shape)


def _cast(x, dtype):
    """The array ``x`` as NumPy dtype ``dtype``: :func:`to_bfloat16` for bfloat16 from
    a real source, NumPy's ``astype`` otherwise, except float -> integer, which is the
    GPU's ``cvt.rzi``: toward zero, saturating at the integer's range, NaN -> 0 (NumPy
    leaves out-of-range values undefined; int8 / uint8 / int16 stores hit them often)."""
    x = np.asarray(x)
    to = np.dtype(dtype)
    if to == _BF16 and x.dtype.kind in "biuf":
        return to_bfloat16(x)
    if to.kind in "iu" and (x.dtype.kind == "f" or x.dtype == _BF16):   # issue 15 item 7
        info = np.iinfo(to)
        wide = x.astype(np.float64)                      # exact for every float source
        high, low = wide >= float(info.max), wide <= float(info.min)
        with np.errstate(invalid="ignore"):
            out = np.where(np.isnan(wide) | high | low, 0.0, wide).astype(to)
        out = np.where(high, np.array(info.max, to), out)
        return np.where(low, np.array(info.min, to), out).astype(to)
    return x.astype(dtype)
