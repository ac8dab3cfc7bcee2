"""From a bound launch to a compiled specialization (PTX + what the launcher needs).

A specialization is keyed by (source, the sources of the helpers and device functions it
calls, constexpr values, options, argument types, compute capability, numba_ws /
numba-cuda versions): :func:`cache_key`. :func:`compile_kernel`
runs the whole pipeline (numba-cuda + the numba_ws stage + NVVM) and returns an
:class:`Artifact`, a plain picklable record that the on-disk cache stores.
"""
import dataclasses
import inspect
import time
from dataclasses import dataclass, field

from numba.cuda import types

from ..compiler import numba_type_of, run_stage
from .. import knobs
from ..errors import WSUsageError
from ..language.types import DTypeType
from ..passes.plan import Plan
from . import cache, interop


@dataclass
class Artifact:
    ptx: str
    entry: str
    argtypes: list            # numba types of the user parameters (literals included)
    num_threads: int
    smem_bytes: int
    tmaps: list               # (array parameter, box rows, box cols, transposed), in order
    registers: int = 0
    compile_seconds: float = 0.0
    notes: list = field(default_factory=list)


def argument_types(fn, bound, describe):
    """Numba types of every parameter; arrays via ``describe(value, name)``."""
    out = []
    for name, value in bound.args.items():
        if name in bound.constexprs:
            out.append(numba_type_of(value, name, True))
        elif interop.is_array(value):
            arr = describe(value, name)
            out.append(types.Array(arr.dtype.numba, arr.ndim, "A"))
        else:
            out.append(numba_type_of(value, name, False))
    return out


def array_info(bound, described):
    """Per array parameter: may TMA read it, and in what pieces may the producer copy it?

    The GPU loads 1-D and 2-D arrays (a 1-D array is read as one row, (1, N)); strides of
    dimensions of extent 1 do not matter. ``tma_ok``: one dimension contiguous, a 16-byte
    aligned base and the other dimension's stride a positive multiple of 16 bytes (a
    negative stride never passes: TMA strides are unsigned). ``vec``: the widest piece
    (16, 8, 4, 2 or 1 bytes) dividing the base and that stride when a dimension is
    contiguous (cp.async needs 4 or more), 0 when none is (the ld.global path then reads
    element by element with the array's strides, any sign). ``transposed``: a
    column-major 2-D array (first dimension contiguous, e.g. ``b.T`` of a row-major
    array); the copies then read its transposed (row-major) view and the tile lands
    K-major in shared memory, as ``ws.trans`` of a row-major load would. ``why``: what
    keeps TMA away, or why it may read the array. A base that is not a multiple of the
    element size is a :class:`WSUsageError` (no load or store can address it).
    """
    info = {}
    for name, arr in described.items():
        item = arr.dtype.itemsize
        if arr.ptr % item:
            raise WSUsageError(
                f"argument {name!r}: base address {arr.ptr:#x} is not a multiple of the "
                f"{arr.dtype.name} element size ({item} bytes); the GPU cannot address "
                "its elements (copy it into an aligned array)")
        transposed = (arr.ndim == 2 and arr.strides[-1] != item and arr.strides[0] == item
                      and arr.shape[0] > 1)
        inner = 0 if transposed else arr.ndim - 1
        outer = [s for d, s in enumerate(arr.strides) if d != inner and arr.shape[d] > 1]
        contiguous = arr.ndim > 0 and (transposed or arr.strides[-1] == item
                                       or arr.shape[-1] == 1)
        why = []
        if arr.ndim not in (1, 2):
            why.append(f"{arr.ndim}-D (the GPU loads 1-D and 2-D arrays)")
        if any(s < 0 for d, s in enumerate(arr.strides) if arr.shape[d] > 1):
            why.append("negative stride")
        if not contiguous:
            why.append("neither dimension contiguous" if arr.ndim == 2 else "not contiguous")
        if arr.ptr % 16:
            why.append(f"base {arr.ptr % 16} bytes past a 16-byte boundary")
        pitch = [s for s in outer if s % 16]
        if pitch:
            why.append(f"{'column' if transposed else 'row'} stride {pitch[0]} bytes not a "
                       "multiple of 16")
        vec = 0   # piece size along the contiguous dimension
        if contiguous and arr.ndim in (1, 2):
            vec = next(v for v in (16, 8, 4, 2, 1) if arr.ptr % v == 0
                       and all(s % v == 0 for s in outer))
        ok_why = "column-major: TMA reads the transposed view" if transposed else \
            "contiguous, aligned"
        info[name] = {"tma_ok": not why, "why": "; ".join(why) or ok_why, "vec": vec,
                      "transposed": transposed}
    return info


def source_text(fn):
    """``fn``'s source text, or None for a function made by exec, ``python -c`` or a
    REPL (no source file)."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def cache_key(fn, argtypes, bound, cc, info):
    """(key, on_disk): the specialization's cache key, and whether it may use the disk
    cache (only with source text: a kernel without one is keyed by its bytecode and this
    function object, for this process only)."""
    cc = target_cc(cc)
    from ..passes.inline_helpers import called_sources
    source = source_text(fn)
    stand_in = f"no source: {fn.__code__.co_code.hex()} {id(fn)}"
    return cache.key_for(source=stand_in if source is None else source, name=fn.__qualname__,
                         helpers=called_sources(fn),
                         fused=knobs.disable(),
                         constexprs=sorted((k, repr(v)) for k, v in bound.constexprs.items()),
                         options=bound.options.as_dict(), argtypes=[str(t) for t in argtypes],
                         cc=list(cc), arrays=sorted((k, v["tma_ok"], v["vec"], v["transposed"])
                                                    for k, v in info.items())), \
        source is not None


def make_plan(fn, bound, cc, info=None):
    """The plan of one compile. NUMBA_WS_DISABLE fuses every task into one warp group."""
    options, fused = bound.options, knobs.disable()
    if fused:
        options = dataclasses.replace(options, num_consumer_groups=1, ping_pong=0)
    return Plan(fn.__name__, options, dict(bound.constexprs), cc=target_cc(cc),
                array_info=info or {}, fused=fused)


def target_cc(cc):
    """The compute capability a compile targets, as a tuple numba-cuda takes.

    (9, 0) means sm_90a: numba_ws's sm_90 code is wgmma, setmaxnreg and TMA, which
    ptxas accepts only for the "a" target, so (9, 0) and (9, 0, "a") compile the same
    PTX (``.target sm_90a``). sm_8x stays as given (mma.sync and cp.async); a newer major
    has neither sm_90a's instructions nor a path of its own here, so it is refused.
    """
    given, cc = cc, tuple(cc) if isinstance(cc, (tuple, list)) else ()
    if len(cc) not in (2, 3) or not all(isinstance(x, int) for x in cc[:2]) \
            or cc[2:] not in ((), ("a",)):
        raise WSUsageError(f"cc={given!r}: expected (major, minor) or (major, minor, 'a'), "
                           "e.g. (8, 0) or (9, 0)")
    if cc[:2] == (9, 0):
        return (9, 0, "a")
    if cc[2:]:
        raise WSUsageError(f"cc={cc!r}: only sm_90 has the 'a' target numba_ws uses; "
                           f"pass cc={cc[:2]}")
    if cc[0] >= 9:
        raise WSUsageError(
            f"cc={cc}: numba_ws compiles for sm_90a (wgmma, setmaxnreg, TMA) and sm_80 to "
            f"sm_89 (mma.sync, cp.async); sm_{cc[0]}{cc[1]} has no sm_90a instructions. "
            "Compile for (8, 0), which runs on newer GPUs (NUMBA_WS_CC=8.0 for launches)")
    return cc


def compile_kernel(fn, argtypes, plan):
    """Full compile: PTX for ``plan.cc`` with launch bounds (threads, 1)."""
    from numba.cuda.compiler import kernel_fixup
    from numba.cuda.cudadrv import nvvm
    start = time.perf_counter()
    cres = run_stage(fn, argtypes, plan)
    lib = cres.library
    entry = cres.fndesc.llvm_func_name
    kernel = lib.get_function(entry)
    kernel_fixup(kernel, False)
    nvvm.set_launch_bounds(kernel, (plan.num_threads, 1))
    staged = time.perf_counter()
    ptx = lib.get_asm_str(cc=plan.cc)
    name = _entry_name(ptx)
    report_time("Numba front end + numba_ws stage + lowering", staged - start, fn.__name__)
    report_time("NVVM (LLVM IR -> PTX)", time.perf_counter() - staged, fn.__name__)
    return Artifact(ptx=ptx, entry=name, argtypes=list(argtypes),
                    num_threads=plan.num_threads, smem_bytes=plan.smem_bytes,
                    tmaps=list(plan.tmaps), registers=plan.entry_registers,
                    compile_seconds=time.perf_counter() - start, notes=list(plan.notes))


def report_time(what, seconds, kernel_name):
    """With NUMBA_WS_TIMING=1, one line per compile phase (passes print their own)."""
    if knobs.timing():
        print(f"numba_ws: {what:<44} {seconds * 1e3:8.1f} ms ({kernel_name})")


def _entry_name(ptx):
    for line in ptx.splitlines():
        if ".entry" in line:
            return line.split(".entry")[1].strip().split("(")[0].strip()
    raise WSUsageError("no kernel entry in the generated PTX")


def omitted_positions(argtypes):
    """Positions of the arguments that are no kernel parameter (omitted constexprs)."""
    return frozenset(i for i, t in enumerate(argtypes) if isinstance(t, types.Omitted))


def launch_argtypes(argtypes):
    """The types the parameter packer sees: literal constexprs as plain scalars; omitted
    constexprs (strings, floats: constants in the code) are no kernel parameter."""
    out = []
    for t in argtypes:
        if isinstance(t, types.Omitted):
            continue
        if isinstance(t, DTypeType):
            out.append(types.uint64)
        elif isinstance(t, types.BooleanLiteral):
            out.append(types.boolean)
        elif isinstance(t, types.IntegerLiteral):
            out.append(types.int64)
        elif isinstance(t, types.Literal):
            raise WSUsageError(f"constexpr of type {t} cannot be passed to the GPU")
        else:
            out.append(t)
    return out + [types.uint64]
