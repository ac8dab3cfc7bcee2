"""Kernel parameters packed for ``cuLaunchKernel`` (Numba-free once given specs).

Invariants:
- a :class:`ParamPacker` lays arguments out exactly as numba-cuda's
  ``_Kernel._prepare_args`` does: an array becomes meminfo, parent, nitems, itemsize,
  data, shape..., strides... (all 8 bytes); scalars take their own ctypes width;
- ``ParamPacker.pack`` writes into per-thread storage made once and returns the address
  of the ``void*[]`` that ``cuLaunchKernel`` takes; it stays valid until that thread's
  next ``pack`` on the same packer (the driver copies parameters at launch);
- parameter types are :func:`param_spec` specs (plain tuples): Numba types are converted
  once, so a kernel loaded from the launch index packs without numba-cuda.
"""
import ctypes
import operator
import struct
import threading

import numpy as np

from ..errors import WSUsageError
from ..language import dtypes
from .interop import ArrayArg

#: What ``CudaFunction.launch`` takes as ``params``: the int from ``ParamPacker.pack``.
Params = int


class ByValue:
    """A kernel parameter passed as ``nbytes`` raw bytes (e.g. a 128-byte CUtensorMap
    ``__grid_constant__``); its value is a bytes-like object of exactly that size."""

    def __init__(self, nbytes: int):
        self.nbytes = int(nbytes)

    def __repr__(self):
        return f"ByValue({self.nbytes})"


_INT_CODES = {8: "b", 16: "h", 32: "i", 64: "q"}
#: ctypes of each struct code of a scalar parameter (float16 travels as its bits).
_CTYPES = {"?": ctypes.c_bool, "b": ctypes.c_int8, "h": ctypes.c_int16, "i": ctypes.c_int32,
           "q": ctypes.c_int64, "B": ctypes.c_uint8, "H": ctypes.c_uint16,
           "I": ctypes.c_uint32, "Q": ctypes.c_uint64, "e": ctypes.c_uint16,
           "f": ctypes.c_float, "d": ctypes.c_double}
_SPEC_KINDS = ("array", "scalar", "bytes", "tuple")


def _scalar_code(ty):
    """The struct code of a scalar Numba type, or None."""
    from numba.cuda import types
    if isinstance(ty, types.Boolean):
        return "?"
    if isinstance(ty, types.Integer):
        code = _INT_CODES[ty.bitwidth]
        return code if ty.signed else code.upper()
    if isinstance(ty, (types.CPointer, types.RawPointer)):
        return "Q"
    return {types.float16: "e", types.float32: "f", types.float64: "d"}.get(ty)


def param_spec(ty, name="#0"):
    """The launcher's plain (Numba-free, picklable) description of one parameter type:
    ``("array", dtype name, ndim, layout, text)``, ``("scalar", struct code, text)``,
    ``("bytes", n, text)`` or ``("tuple", (specs...), text)``; ``text`` names the type in
    errors. Accepts a Numba type, a :class:`ByValue` or a spec (returned as is)."""
    if isinstance(ty, tuple) and ty and ty[0] in _SPEC_KINDS:
        return ty
    if isinstance(ty, ByValue):
        return ("bytes", ty.nbytes, repr(ty))
    from numba.cuda import types
    if isinstance(ty, types.Array):
        d = dtypes.from_numba(ty.dtype)
        if d is None:
            raise WSUsageError(f"argument {name!r}: array dtype {ty.dtype} is not supported; "
                               f"accepted dtypes: {', '.join(dtypes.ALL)}")
        return ("array", d.name, ty.ndim, ty.layout, str(ty))
    if isinstance(ty, types.BaseTuple):
        return ("tuple", tuple(param_spec(t, f"{name}[{i}]") for i, t in enumerate(ty)),
                str(ty))
    code = _scalar_code(ty)
    if code is None:
        raise WSUsageError(f"argument {name!r}: kernel parameter type {ty} is not "
                           f"supported (arrays, integers, float16/32/64, booleans, "
                           f"pointers, tuples of these, ByValue)")
    return ("scalar", code, str(ty))


def _check_array(spec, v, name):
    _, dname, ndim, layout, text = spec
    if not isinstance(v, ArrayArg):
        raise WSUsageError(f"argument {name!r}: expected an array for {text}, got "
                           f"{type(v).__qualname__} (describe it with runtime.interop)")
    d = dtypes.ALL[dname]
    problems = [msg for bad, msg in [
        (v.dtype is not d, f"dtype {v.dtype.name} != {d.name}"),
        (v.ndim != ndim, f"{v.ndim} dimensions != {ndim}"),
        (v.host, "it lives in host memory"),
        (layout == "C" and not v.c_contig or layout == "F" and not v.f_contig,
         f"it is not {layout}-contiguous")] if bad]
    if problems:
        raise WSUsageError(f"argument {name!r} does not match the compiled {text}: "
                           + "; ".join(problems))
    return d


def _fields(spec, v, name, out):
    kind, text = spec[0], spec[-1]
    if kind == "bytes":
        data = bytes(v)
        if len(data) != spec[1]:
            raise WSUsageError(f"argument {name!r}: expected {spec[1]} bytes, got {len(data)}")
        out.append((ctypes.c_uint8 * spec[1], data))
    elif kind == "array":
        d = _check_array(spec, v, name)
        out += [(ctypes.c_void_p, 0), (ctypes.c_void_p, 0), (ctypes.c_int64, v.size),
                (ctypes.c_int64, d.itemsize), (ctypes.c_void_p, v.ptr)]
        out += [(ctypes.c_int64, n) for n in v.shape]
        out += [(ctypes.c_int64, s) for s in v.strides]
    elif kind == "tuple":
        if not isinstance(v, (tuple, list)) or len(v) != len(spec[1]):
            raise WSUsageError(f"argument {name!r}: expected a {len(spec[1])}-tuple for {text}")
        for i, (t, x) in enumerate(zip(spec[1], v)):
            _fields(t, x, f"{name}[{i}]", out)
    else:
        code = spec[1]
        try:
            if code in "fd":
                value = float(v)
            elif code == "e":
                value = int(np.array(float(v), np.float16).view(np.uint16))
            elif code == "?":
                value = bool(v)
            else:
                value = operator.index(v)
                struct.pack("=" + code, value)
        except (TypeError, ValueError, OverflowError, struct.error) as e:
            raise WSUsageError(f"argument {name!r}: {v!r} is not a valid {text} ({e})") from None
        out.append((_CTYPES[code], value))


def pack_fields(argtypes, values, names=None):
    """The flat ``[(ctype, value), ...]`` list of kernel parameters, in launch order
    (``argtypes``: Numba types, ByValues or :func:`param_spec` specs)."""
    names = names or [f"#{i}" for i in range(len(argtypes))]
    if len(values) != len(argtypes):
        raise WSUsageError(f"expected {len(argtypes)} kernel arguments, got {len(values)}")
    out = []
    for ty, v, name in zip(argtypes, values, names):
        _fields(param_spec(ty, name), v, name, out)
    return out


class _Bad(Exception):
    """A value failed the fast path's checks; pack_fields says why."""


class ParamPacker:
    """Builds, once per compiled kernel, the code that packs argument values (ArrayArgs
    for arrays, numbers for scalars) into the ``void*[]`` ``cuLaunchKernel`` takes.
    ``argtypes``: Numba types, ByValues or :func:`param_spec` specs (specs need no
    numba-cuda: a kernel loaded from the disk cache packs without importing it)."""

    def __init__(self, argtypes, names=None):
        self.names = list(names) if names else [f"#{i}" for i in range(len(argtypes))]
        self.specs = [param_spec(ty, n) for ty, n in zip(argtypes, self.names)]
        self._codes, checks, vals, consts = [], [], [], {}
        for i, spec in enumerate(self.specs):
            self._gen(spec, f"v{i}", checks, vals, consts)
        fmt, offsets, sizes, pos = "=", [], [], 0
        for code in self._codes:
            size = struct.calcsize("=" + code)
            fmt += f"{code}{-size % 8}x"
            offsets.append(pos)
            sizes.append(size)
            pos += size + (-size % 8)
        self.nparams = len(offsets)
        self._offsets, self.sizes, self._nwords = offsets, sizes, max(pos // 8, 1)
        #: bytes up to the end of the last parameter (what a one-buffer launch passes)
        self.nbytes = offsets[-1] + sizes[-1] if offsets else 0
        n = len(self.specs)
        unpack = f"{', '.join(f'v{i}' for i in range(n))}, = values" if n else \
            "if values: raise _Bad"
        src = (f"def _fill(buf, values):\n    {unpack}\n"
               + (f"    if {' or '.join(checks)}:\n        raise _Bad\n" if checks else "")
               + f"    _pack(buf, 0{''.join(', ' + v for v in vals)})\n")
        env = dict(consts, _Bad=_Bad, _pack=struct.Struct(fmt).pack_into)
        exec(compile(src, f"<numba_ws params {self.names}>", "exec"), env)
        self._fill, self._source = env["_fill"], src
        #: ``pack_into(buf, 0, *flat values)`` without checks (the fast path's packer)
        self.pack_into = env["_pack"]
        self._tls = threading.local()

    def _gen(self, spec, expr, checks, vals, consts):
        kind = spec[0]
        if kind == "bytes":
            checks.append(f"len({expr}) != {spec[1]}")
            vals.append(f"bytes({expr})")
            self._codes.append(f"{spec[1]}s")
        elif kind == "array":
            _, dname, ndim, layout, _ = spec
            d = dtypes.ALL[dname]
            k = f"_d{len(consts)}"
            consts[k] = d
            checks += [f"{expr}.dtype is not {k}", f"{expr}.host",
                       f"len({expr}.shape) != {ndim}"]
            if layout in "CF":
                checks.append(f"not {expr}.{layout.lower()}_contig")
            vals += [f"{expr}.size", str(d.itemsize), f"{expr}.ptr", f"*{expr}.shape",
                     f"*{expr}.strides"]
            self._codes += ["8x", "8x", "q", "q", "Q"] + ["q"] * (2 * ndim)
        elif kind == "tuple":
            checks.append(f"len({expr}) != {len(spec[1])}")
            for j, t in enumerate(spec[1]):
                self._gen(t, f"{expr}[{j}]", checks, vals, consts)
        else:
            vals.append(expr)
            self._codes.append(spec[1])

    def _state(self):
        buf = (ctypes.c_uint64 * self._nwords)()
        base = ctypes.addressof(buf)
        ptrs = (ctypes.c_void_p * max(self.nparams, 1))(*[base + o for o in self._offsets])
        st = self._tls.state = (buf, ptrs, ctypes.addressof(ptrs) if self.nparams else 0)
        return st

    def layout(self):
        """``[(offset, size)]`` of each packed parameter in this packer's buffer."""
        return list(zip(self._offsets, self.sizes))

    def storage(self):
        """(buffer, address of the ``void*[]``) of this thread's parameter storage."""
        try:
            st = self._tls.state
        except AttributeError:
            st = self._state()
        return st[0], st[2]

    def pack(self, values) -> Params:
        """Pack ``values`` and return the address of the ``void*[]`` for cuLaunchKernel."""
        try:
            st = self._tls.state
        except AttributeError:
            st = self._state()
        try:
            self._fill(st[0], values)
        except (_Bad, struct.error, AttributeError, TypeError, ValueError, IndexError,
                OverflowError) as e:
            pack_fields(self.specs, values, self.names)  # raises a precise message
            raise WSUsageError(f"cannot pack kernel arguments {self.names}: {e}") from None
        return st[2]

    def read_back(self):
        """This thread's last packed parameters, read through the ``void*[]`` as raw
        bytes (one entry per kernel parameter, its exact size)."""
        _, ptrs, _ = self._tls.state
        return [ctypes.string_at(ptrs[i], n) for i, n in enumerate(self.sizes)]
