"""From a bound launch to a compiled specialization (PTX + what the launcher needs).

A specialization is keyed by (source, the sources of the helpers and device functions it
calls, constexpr values, options, argument types, compute capability, numba_ws /
numba-cuda versions): :func:`cache_key`. :func:`compile_kernel`
runs the whole pipeline (numba-cuda + the numba_ws stage + NVVM) and returns an
:class:`Artifact`, a plain picklable record that the on-disk cache stores.
"""
import dataclasses
import time
from dataclasses import dataclass, field

from numba.cuda import types

from ..compiler import numba_type_of, run_stage
from .. import knobs
from ..knobs import report_time
from ..errors import WSUsageError
from ..language.types import DTypeType
from ..passes.plan import Plan
from . import cache, interop
from .gcpause import collector_paused
from .sources import called_sources, source_text
from .targets import array_info, target_cc  # noqa: F401  (array_info: re-exported)


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


def cache_key(fn, argtypes, bound, cc, info):
    """(key, on_disk): the specialization's cache key, and whether it may use the disk
    cache (only with source text: a kernel without one is keyed by its bytecode and this
    function object, for this process only)."""
    cc = target_cc(cc)
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
        options = dataclasses.replace(options, num_consumer_groups=1, ping_pong=0,
                                      dot_turns=0)
    return Plan(fn.__name__, options, dict(bound.constexprs), cc=target_cc(cc),
                array_info=info or {}, fused=fused)


def compile_kernel(fn, argtypes, plan):
    """Full compile: PTX for ``plan.cc`` with launch bounds (threads, 1)."""
    from numba.cuda.compiler import kernel_fixup
    from numba.cuda.cudadrv import nvvm
    start = time.perf_counter()
    with collector_paused():
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


def launch_record(art):
    """The launch index's record of ``art`` (no cubin yet: the loader links one)."""
    from .params import param_spec
    from .warm import LaunchRecord
    return LaunchRecord(ptx=art.ptx, entry=art.entry, num_threads=art.num_threads,
                        smem_bytes=art.smem_bytes, tmaps=list(art.tmaps),
                        params=[param_spec(t, f"#{i}") for i, t in
                                enumerate(launch_argtypes(art.argtypes))],
                        omitted=omitted_positions(art.argtypes))
