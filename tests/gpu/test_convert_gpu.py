"""Element conversions (codegen/convert.py) on the GPU, bit for bit against
``convert.reference``.

For each source type one kernel converts an input array to all seven types (the harness
of tests/test_convert.py), once with ``cast(cc=None)`` -- the sm_80 forms, e.g. round to
odd for f64 / int -> bf16 -- and once with ``cc=(9, 0)`` (the direct sm_90 ``cvt``s).
Inputs: every f16 and bf16 bit pattern; for f32 / f64 / int32 / int64 random bit
patterns plus ±0, ±inf, NaN, subnormals, the midpoints between neighbouring bf16 and f16
numbers (and values just off them), the overflow edges and the integer range edges.

Each kernel runs twice, into outputs filled with two different patterns (all ones --
NaN / -1 -- and 0x5a bytes): equal results mean every element was written. Results must
then equal the reference bit for bit, except that where the reference is NaN the GPU
must give a NaN of any payload and sign (the module docstring's rule).
"""
import ml_dtypes
import numpy as np
import pytest
from numba import cuda

from numba_ws.codegen import convert
from test_convert import NP_DTYPES, TYPES, multi_cast_kernel, pair_kernel

cp = pytest.importorskip("cupy")

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = ("float16", "bfloat16", "float32", "float64")
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SENTINELS = (0xFF, 0x5A)                       # byte patterns the outputs start as


def _midpoints(dtype, bits):
    """Midpoints (in f64, exact) between the finite ``dtype`` numbers with these bit
    patterns and their upper neighbours."""
    u = UINT[dtype.itemsize]
    a = bits.astype(u).view(dtype).astype(np.float64)
    b = (bits.astype(u) + u(1)).view(dtype).astype(np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    return (a[ok] + b[ok]) / 2


def _float_inputs(dtype, rng, n):
    finfo = np.finfo(dtype)
    signs = lambda m: rng.choice([-1.0, 1.0], m)            # noqa: E731
    bf_mid = _midpoints(BF16, rng.integers(0, 0x7F7F, n // 8))
    h_mid = _midpoints(np.dtype(np.float16), rng.integers(0, 0x7BFF, n // 8))
    f_mid = _midpoints(np.dtype(np.float32), rng.integers(0, 0x7F7FFFFF, n // 8))
    mids = np.concatenate([bf_mid, h_mid, f_mid if dtype == np.float64 else []])
    off = mids * (1 + signs(mids.size) * 2.0 ** -40)
    scaled = rng.standard_normal(n // 4) * 10.0 ** rng.integers(-3, 12, n // 4)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, finfo.max, -finfo.max, finfo.tiny,
             finfo.smallest_subnormal, -finfo.smallest_subnormal, 0.5, 1.5, 2.5, -2.5,
             -0.7, 65504.0, 65519.0, 65520.0, -65520.0, 65536.0, 2.0 ** 24 + 2.0 ** 16,
             2.0 ** 31, -2.0 ** 31, 2.0 ** 31 - 128, 2.0 ** 31 + 0.5, 2.0 ** 32,
             2.0 ** 63, -2.0 ** 63, 2.0 ** 63 - 2.0 ** 40, 1e19, -1e19,
             3.3895313892515355e38, 3.3961775292304043e38, 3.4028234663852886e38, 1e39,
             1e-40, np.ldexp(1.5, -133), np.ldexp(1.5, -24), 1e-300, 1e300]
    with np.errstate(all="ignore"):
        values = np.concatenate([signs(mids.size) * mids, signs(off.size) * off, scaled,
                                 np.array(edges)]).astype(dtype)
    u = UINT[np.dtype(dtype).itemsize]
    random_bits = rng.integers(0, np.iinfo(u).max, n, dtype=u, endpoint=True).view(dtype)
    return np.concatenate([values, random_bits])


def _int_inputs(dtype, rng, n):
    info = np.iinfo(dtype)
    top = 31 if dtype == np.int32 else 63
    mids = []
    for e in range(8, top):
        for gap in (8, 11, 24):                # midpoints for bf16, f16 and f32 results
            if e >= gap:
                m = (1 << e) + (1 << (e - gap))
                mids += [m - 1, m, m + 1, -m - 1, -m, -m + 1]
    edges = [0, 1, -1, info.min, info.max, info.min + 1, info.max - 1, 65504, 65519,
             65520, -65520, 2 ** 31 - 1, -2 ** 31, 2 ** 53 + 1, 2 ** 60 + 2 ** 52 + 1]
    values = [v for v in mids + edges if info.min <= v <= info.max]
    small = rng.integers(-70000, 70000, n // 4)
    random_bits = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return np.concatenate([np.array(values, dtype), small.astype(dtype), random_bits])


def inputs(name, rng, n=1 << 18):
    dtype = NP_DTYPES[name]
    if name in ("float16", "bfloat16"):
        return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    if name in ("float32", "float64"):
        return _float_inputs(dtype, rng, n)
    if name in ("int32", "int64"):
        return _int_inputs(dtype, rng, n)
    return np.array([False, True] * 64)


def _device(x):
    """A host array as the device array the harness takes (f16/bf16 as uint16 bits)."""
    if x.dtype.itemsize == 2 and x.dtype.kind != "i":
        x = x.view(np.uint16)
    return cp.asarray(x)


def _output(name, n, byte):
    dtype = NP_DTYPES[name]
    raw = cp.full(n * dtype.itemsize, byte, dtype=cp.uint8)
    if name == "bool":
        return raw.view(cp.bool_)
    if name in ("float16", "bfloat16"):
        return raw.view(cp.uint16)
    return raw.view(dtype)


def _bits(x):
    return x.view(UINT[x.dtype.itemsize])


def check(src, to, got, where):
    """``got`` (host array, ``to``'s dtype) against reference(src, to); an assertion
    naming the first mismatches."""
    want = convert.reference(src, NP_DTYPES[to])
    if to in FLOATS:
        with np.errstate(invalid="ignore"):
            got_nan = np.isnan(got.astype(np.float64))
            want_nan = np.isnan(want.astype(np.float64))
        ok = np.where(want_nan, got_nan, ~got_nan & (_bits(got) == _bits(want)))
    else:
        ok = got == want
    if not ok.all():
        bad = np.flatnonzero(~ok)[:8]
        rows = [f"  in {src[i]!r} (bits {int(_bits(src[i:i + 1])[0]):#x}): got {got[i]!r} "
                f"({int(_bits(got[i:i + 1])[0]):#x}), want {want[i]!r} "
                f"({int(_bits(want[i:i + 1])[0]):#x})" for i in bad]
        pytest.fail(f"{where}: {(~ok).sum()} of {ok.size} differ\n" + "\n".join(rows))


@pytest.mark.parametrize("cc", [None, (9, 0)], ids=["sm80-forms", "sm90-forms"])
@pytest.mark.parametrize("frm", list(TYPES))
def test_cast_matches_reference(frm, cc):
    src = inputs(frm, np.random.default_rng())
    kernel, sig = multi_cast_kernel(TYPES[frm], cc)
    fn = cuda.jit(sig)(kernel)
    n = src.size
    runs = []
    for byte in SENTINELS:
        outs = [_output(t, n, byte) for t in TYPES]
        fn[(n + 255) // 256, 256](_device(src), *outs)
        cp.cuda.Device().synchronize()
        runs.append([cp.asnumpy(o.view(cp.uint8)) for o in outs])
    for to, first, second in zip(TYPES, *runs):
        assert (first == second).all(), f"{frm}->{to}: elements left unwritten"
        got = first.view(np.bool_) if to == "bool" else first.view(NP_DTYPES[to])
        check(src, to, got, f"{frm}->{to} (cc={cc})")


@pytest.mark.parametrize("frm", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("to", ["float16", "bfloat16"])
def test_cast_pair_matches_reference(frm, to):
    """Half 0 (bits 0-15) of each packed word is ``lo``'s conversion, half 1 ``hi``'s."""
    rng = np.random.default_rng()
    lo = inputs(frm, rng)
    hi = rng.permutation(lo)
    kernel, sig = pair_kernel(TYPES[frm], TYPES[to])
    fn = cuda.jit(sig)(kernel)
    out = cp.full(lo.size, 0xFFFFFFFF, dtype=cp.uint32)
    fn[(lo.size + 255) // 256, 256](_device(lo), _device(hi), out)
    packed = cp.asnumpy(out)
    for half, src in enumerate((lo, hi)):
        got = ((packed >> np.uint32(16 * half)) & np.uint32(0xFFFF)).astype(np.uint16)
        check(src, to, got.view(NP_DTYPES[to]), f"cast_pair {frm}->{to} half {half}")
