"""The generated launcher of one launch plan: a launch with no per-call Python work
beyond reading the arguments and one dictionary lookup (issue 17 item 1).

:func:`make` writes, for one :class:`~.fastpath.LaunchPlan`, a Python function of the
launch's positional arguments that reads each array's pointer, shape and strides the
cheapest way its library allows (CuPy attributes, torch methods; other arrays through
``interop.describe``), looks the layout up in the plan's *entries*, packs the parameters
straight into the specialization's buffer and calls ``cuLaunchKernel`` unchecked. With
the native extension (runtime/native_launch.py) the last three steps, the thread check
and, when no launch knob is set, the knob check are one C call on the entry's *bound
entry*; with ctypes they are Python lines.

An entry is keyed by (shape, strides as the library reports them, pointer & 15) of every
array: equal keys have equal :func:`~.fastpath.placement_key` (same dtype: guarded), so
they launch the specialization the slow path chose for that key. Entries are made by the
slow path (``LaunchPlan.remember``); the tensor maps of an entry are keyed by the arrays'
pointers (its shapes and strides are fixed). Invariant: the generated function launches
exactly what ``LaunchPlan.launch`` would, or returns False having launched nothing (a
knob changed, another thread, an unknown layout or pointer set, a debug module, a value
the packer refuses); tests/test_fastcode.py compares the two byte for byte.
"""
import ctypes
import struct
import threading

from .. import knobs
from . import interop, native_launch
from .binding import resolve_grid

#: The generated launcher's default ``grid``: the caller has matched the signature.
UNCHECKED = object()

#: Entries and tensor-map pointers kept per plan (cleared when full).
MAX_ENTRIES = 256
MAX_TMAPS = 512

# the fields of a _Loaded.fast_entry() tuple, then of the entry's own (tensor maps by
# pointers, whether it has any, the native bound entry or None)
CALL, HANDLE, THREADS, SMEM, PACK, BUF, PARAMS, OWNER, LAUNCH, ADDRESS, POINTER, EXTRA, \
    TMAPS, HAS_TMAPS, BOUND = range(15)
#: what a value the packer refuses raises (the launcher then hands the launch back)
PACK_ERRORS = (struct.error, TypeError, ValueError, IndexError, OverflowError, AttributeError)


def _torch_stream():
    """torch's current raw stream of a device index (no Stream object), as an int."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


def _array_lines(i, k, arr, ndim):
    """(lines reading argument ``a{i}``, its packed value expressions, env): array ``k``
    of the plan. ``p{k}`` / ``s{k}`` / ``t{k}``: pointer, shape, strides as read."""
    env = {}
    lib = interop.root_module(arr.obj)
    item = arr.dtype.itemsize
    if lib == "cupy" and type(arr.obj).__name__ == "ndarray":
        env[f"_D{k}"] = arr.obj.dtype
        lines = [f"if a{i}.dtype is not _D{k}: return False",
                 f"p{k} = a{i}.data.ptr", f"s{k} = a{i}.shape", f"t{k} = a{i}.strides"]
        size, strides = f"a{i}.size", [f"t{k}[{d}]" for d in range(ndim)]
    elif lib == "torch" and hasattr(arr.obj, "get_device"):
        env[f"_D{k}"], env[f"_DEV{k}"] = arr.obj.dtype, arr.obj.get_device()
        lines = [f"if a{i}.dtype is not _D{k} or a{i}.get_device() != _DEV{k}: return False",
                 f"p{k} = a{i}.data_ptr()", f"s{k} = a{i}.shape", f"t{k} = a{i}.stride()"]
        size, strides = f"a{i}.numel()", [f"t{k}[{d}] * {item}" for d in range(ndim)]
    else:
        env[f"_WS{k}"], env[f"_N{k}"] = arr.dtype, arr.name
        lines = [f"x{k} = _describe(a{i}, _N{k})",
                 f"if x{k}.dtype is not _WS{k} or x{k}.host: return False",
                 f"p{k} = x{k}.ptr", f"s{k} = x{k}.shape", f"t{k} = x{k}.strides"]
        size, strides = f"x{k}.size", [f"t{k}[{d}]" for d in range(ndim)]
    values = [size, str(item), f"p{k}"] + [f"s{k}[{d}]" for d in range(ndim)] + strides
    return lines, values, env


def entry_key(arr):
    """The entry key part of one described array, as the generated code reads it."""
    lib = interop.root_module(arr.obj)
    strides = arr.strides
    if lib == "torch" and hasattr(arr.obj, "get_device"):
        strides = tuple(s // arr.dtype.itemsize for s in strides)
    return (tuple(arr.shape), tuple(strides), arr.ptr & 15)


def _binder(fast, unset):
    """``(bind(fast entry) -> bound entry, launch_bound)`` when ``fast``'s call is the
    native extension's (runtime/native_launch.py), else ``(None, None)``. ``unset``:
    ``knobs.unset_launch_knobs`` (the environment and keys the bound entry checks are
    absent), or None (no check)."""
    parts = native_launch.binder(fast[CALL])
    if parts is None:
        return None, None
    bind, launch_bound = parts
    env, keys = unset if unset is not None else (None, ())

    def bound(entry):
        return bind(entry[HANDLE], entry[THREADS], entry[SMEM], entry[PARAMS], entry[EXTRA],
                    entry[PACK], entry[BUF], PACK_ERRORS, env, keys)
    return bound, launch_bound


def make(plan, nargs, described, loaded, stream_of):
    """``(launch(args, grid=UNCHECKED, meta=None) -> bool, entries, bind)`` for ``plan``,
    or None when the specialization has no fast entry. ``bind``: what :func:`remember`
    gives each entry (a native bound entry), or None (ctypes). Given ``grid`` and
    ``meta``, the launcher first checks that the launch has ``plan.signature`` (grid, the
    type of every argument, meta equal) and returns False when not; without, the caller
    has. ``stream_of``: ("const", handle) | ("cupy",) | ("torch", k) | ("zero",) (what
    ``fastpath._stream_finder`` decided)."""
    fast = loaded.fast_entry() if getattr(loaded, "fast_entry", None) is not None else None
    if fast is None:
        return None
    hold, held = knobs.launch_guard(plan.knobs)
    unset = knobs.unset_launch_knobs(plan.knobs)
    bind, launch_bound = _binder(fast, unset)
    native = bind is not None
    env = {"_knobs_hold": hold, "_KNOBS": held, "_ident": threading.get_ident,
           "_describe": interop.describe, "_Err": PACK_ERRORS, "_entries": {}}
    if native:
        env["_bound"] = launch_bound
    names = [f"a{i}" for i in range(nargs)]
    body = [f"{', '.join(names)}, = args" if nargs else "pass"]
    for n, (i, value) in enumerate(plan.constexprs):
        env[f"_C{n}"] = value
        body.append(f"if a{i} != _C{n}: return False")
    by_slot, keys, ptrs = {}, [], []
    for k, (i, j, name) in enumerate(plan.arrays):
        arr = described[name]
        lines, values, extra = _array_lines(i, k, arr, arr.ndim)
        body += lines
        env.update(extra)
        by_slot[j] = values
        keys += [f"s{k}", f"t{k}", f"p{k} & 15"]
        ptrs.append(f"p{k}")
    scalars = {j: f"a{i}" for i, j in plan.scalars}
    packed = []
    for j, constant in enumerate(plan.template):
        if j in loaded.omitted:
            continue
        if j in by_slot:
            packed += by_slot[j]
        elif j in scalars:
            packed.append(scalars[j])
        else:
            env[f"_T{j}"] = constant
            packed.append(f"_T{j}")
    if callable(plan.grid):
        env.update(_grid=plan.grid, _meta=plan.meta, _resolve=resolve_grid)
        body.append("g0, g1, g2 = (_resolve(_grid, _meta) + (1, 1))[:3]")
    else:
        env["g0"], env["g1"], env["g2"] = plan.grid
    pointer = fast[POINTER]
    env["_ArgErr"] = ctypes.ArgumentError
    kind = stream_of[0]
    if kind == "const":
        env["st"], env["sa"] = stream_of[1], pointer(stream_of[1])
    else:
        if kind == "cupy":
            import cupy
            env["_cupy_stream"] = cupy.cuda.get_current_stream
            body.append("st = _cupy_stream().ptr")
        elif kind == "torch":
            env["_torch_stream"] = _torch_stream()
            body.append(f"st = _torch_stream(_DEV{stream_of[1]})")
        else:
            body.append("st = 0")
        if not native:                    # the native call takes the handle as an int
            env["_pointer"], env["_SA"] = pointer, {}
            body += ["sa = _SA.get(st)",      # the stream's pointer argument, kept for 64
                     "if sa is None:",
                     "    sa = _pointer(st)",
                     "    if len(_SA) < 64:",
                     "        _SA[st] = sa"]
    body += _launch_lines(native, keys, ptrs, packed)
    grid, types, meta = plan.signature
    env.update(_UNCHECKED=UNCHECKED, _G=grid, _M=dict(meta), _NARGS=nargs,
               **{f"_TY{i}": t for i, t in enumerate(types)})
    typed = "".join(f" or type(args[{i}]) is not _TY{i}" for i in range(nargs))
    check = ["if grid is not _UNCHECKED:      # called by kernel[grid]: is it this plan's?",
             "    try:",
             f"        if len(args) != _NARGS or grid != _G or meta != _M{typed}:",
             "            return False",
             "    except Exception:            # e.g. an array compared with ==",
             "        return False"]
    # the bound entry checks the knobs itself when none is set (one C call for all)
    guard = [] if native and unset is not None else ["if not _knobs_hold(_KNOBS): return False"]
    src = "def launch(args, grid=_UNCHECKED, meta=None):\n" + "".join(
        f"    {line}\n" for line in guard + check + body)
    exec(compile(src, f"<numba_ws launcher {sorted(described)}>", "exec"), env)
    launch = env["launch"]
    launch.source = src
    return launch, env["_entries"], bind


def _launch_lines(native, keys, ptrs, packed):
    """The generated launcher's end: find the entry and its tensor maps, then either one
    native call (it checks the thread and, when the launcher has no guard line, the
    knobs; packs; launches; -1: refused, nothing launched) or ctypes' pack and call."""
    find = [f"e = _entries.get(({', '.join(keys)},))",
            "if e is None: return False" if native else
            f"if e is None or e[{OWNER}] != _ident(): return False",
            f"tm = e[{TMAPS}].get(({', '.join(ptrs)},)) if e[{HAS_TMAPS}] else 0",
            "if tm is None: return False"]
    values = ", ".join(packed + ["tm"])
    if native:
        call = [f"err = _bound(e[{BOUND}], g0, g1, g2, st, {values})",
                "if err < 0: return False"]
    else:
        call = ["try:",
                f"    e[{PACK}](e[{BUF}], 0, {values})",
                "except _Err:",
                "    return False",
                "try:",
                f"    err = e[{CALL}](e[{HANDLE}], g0, g1, g2, e[{THREADS}], 1, 1, e[{SMEM}],"
                f" sa, e[{PARAMS}], e[{EXTRA}])",
                "except _ArgErr:",
                "    err = 1"]
    return find + call + [
        "if err:",      # a failed call: the checked launch retries it or raises
        f"    e[{LAUNCH}]((g0, g1, g2), (e[{THREADS}], 1, 1), e[{SMEM}], st, e[{ADDRESS}])",
        "return True"]


def remember(entries, described, loaded, values, bind=None):
    """Add (or extend) the entry of a launch the slow path just made with ``loaded``;
    ``values``: its launch values (ArrayArgs at the array slots); ``bind``: what
    :func:`make` returned with ``entries``."""
    fast = loaded.fast_entry()
    if fast is None:
        return
    key = tuple(part for arr in described.values() for part in entry_key(arr))
    entry = entries.get(key)
    if entry is None or entry[OWNER] != fast[OWNER]:
        if len(entries) >= MAX_ENTRIES:
            entries.clear()
        bound = bind(fast) if bind is not None else None
        entry = entries[key] = fast + ({}, bool(loaded.tmap_slots), bound)
    if entry[HAS_TMAPS]:
        tmaps = entry[TMAPS]
        if len(tmaps) >= MAX_TMAPS:
            tmaps.clear()
        tmaps[tuple(arr.ptr for arr in described.values())] = loaded.tmap_pointer(values)
