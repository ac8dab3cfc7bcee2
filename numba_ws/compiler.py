"""Driving numba-cuda's compiler with the numba_ws stage inserted.

``WSCompiler`` is a ``CUDACompiler`` whose pipeline is numba-cuda's untyped passes (with
numba_ws's front-end passes after ``IRProcessing``: helper inlining, constexpr branch
folding, ``ws.static_range`` unrolling; and before type inference: device calls to
``ws.map``, array-rank checks), type inference, phi stripping, then
:data:`numba_ws.passes.pipeline.PIPELINE`, then (for a full compile) numba-cuda's
remaining typed passes and lowering. numba-cuda 0.30.4 ignores
``pipeline_class`` for kernels, so we call ``compile_extra`` ourselves with a per-compile
subclass that carries the :class:`Plan` and where to stop.
"""
import contextlib
import re
import sys

import numpy as np

from numba.cuda import types, utils
from numba.cuda.compiler import CUDACompiler, compile_extra
from numba.cuda.core.compiler_lock import global_compiler_lock
from numba.cuda.core.compiler_machinery import PassManager, FunctionPass, register_pass
from numba.cuda.core.typed_passes import NopythonTypeInference, PreLowerStripPhis
from numba.cuda.core.untyped_passes import IRProcessing
from numba.cuda.descriptor import cuda_target
from numba.cuda.flags import CUDAFlags

from numba.core.errors import NumbaError as CoreNumbaError
from numba.cuda.core.errors import NumbaError

from .errors import WSCompileError, WSError
from .language import templates as _templates  # noqa: F401  (registers the tile typing)
from .language.dtypes import DType
from .language.types import DTypeType
from .passes.constexpr_branches import PruneConstexprBranches
from .passes.array_ranks import CheckArrayRanks
from .passes.device_calls import MapDeviceCalls
from .passes.inline_helpers import InlineHelpers, kernel_loc, source_lines
from .passes.static_range import UnrollStaticRanges
from .passes.lag_last_dot import LagLastDot
from .passes.pipeline import PIPELINE


class _StopHere(Exception):
    def __init__(self, state):
        self.state = state


@register_pass(mutates_CFG=False, analysis_only=True)
class _Stop(FunctionPass):
    _name = "ws_stop"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        raise _StopHere(state)


def _make_attach(plan):
    @register_pass(mutates_CFG=False, analysis_only=False)
    class AttachPlan(FunctionPass):
        _name = f"ws_attach_plan_{id(plan)}"

        def __init__(self):
            FunctionPass.__init__(self)

        def run_pass(self, state):
            state.ws = plan
            return True
    return AttachPlan


class WSCompiler(CUDACompiler):
    ws_plan = None
    ws_stop_after = None

    def define_pipelines(self):
        base = super().define_pipelines()[0]
        pm = PassManager("numba_ws")
        inserted = False
        for impl, desc in base.passes:
            if impl is NopythonTypeInference:
                pm.passes.append((MapDeviceCalls, "device-function calls on tiles -> ws.map"))
                pm.passes.append((CheckArrayRanks, "load / store ranks of array arguments"))
            pm.passes.append((impl, desc))
            if impl is IRProcessing:
                pm.passes.append((InlineHelpers, "helper-function calls -> inlined IR"))
                pm.passes.append((PruneConstexprBranches, "branches on constexprs -> jumps"))
                pm.passes.append((UnrollStaticRanges, "ws.static_range loops -> unrolled"))
                if self.ws_plan is not None and self.ws_plan.options.lag_last_dot:
                    self.state.ws_plan = self.ws_plan
                    pm.passes.append((LagLastDot, "a loop's last dot -> one iteration late"))
            if impl is PreLowerStripPhis and not inserted:
                inserted = True
                pm.passes.append((_make_attach(self.ws_plan), "attach the numba_ws plan"))
                for cls, what in PIPELINE:
                    pm.passes.append((cls, what))
                    if cls._name == self.ws_stop_after:
                        pm.passes.append((_Stop, "stop after analysis"))
                        pm.finalize()
                        return [pm]
        pm.finalize()
        return [pm]


def numba_type_of(value, name, constexpr):
    """Numba type of one kernel argument.

    Constexprs carry their value in the type: ints and bools become literals (kernel
    parameters the launcher packs), dtypes :class:`DTypeType`; any other constexpr (a
    str, a float) is ``types.Omitted(value)``: no kernel parameter, and a use in the
    kernel is typed as the constant (Numba's rule for omitted arguments). Tests on
    constexprs are folded before typing (passes/constexpr_branches.py).
    """
    if constexpr:
        if isinstance(value, DType):
            return DTypeType(value.name)
        if isinstance(value, bool):
            return types.literal(value)
        if isinstance(value, int):
            return types.IntegerLiteral(value)
        return types.Omitted(value)
    if isinstance(value, np.generic):   # as the interpreter does: a Python scalar
        value = value.item()
    if hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value, "ndim"):
        from .language.dtypes import from_numpy
        d = from_numpy(value.dtype) if not isinstance(value.dtype, DType) else value.dtype
        if d is None:
            from .errors import WSUsageError
            raise WSUsageError(f"argument {name!r}: dtype {value.dtype} is not supported")
        return types.Array(d.numba, value.ndim, "A")
    if isinstance(value, bool):
        return types.boolean
    if isinstance(value, int):
        return types.int64
    if isinstance(value, float):
        return types.float64
    from .errors import WSUsageError
    raise WSUsageError(f"argument {name!r}: cannot pass a {type(value).__name__} to a kernel")


def _flags(cc, nvvm_opt):
    flags = CUDAFlags()
    flags.no_compile = True
    flags.no_cpython_wrapper = True
    flags.no_cfunc_wrapper = True
    flags.error_model = "numpy"
    flags.compute_capability = cc
    flags.nvvm_options = {"fastmath": False, "opt": nvvm_opt}
    return flags


def _load_arraymath_without_host_blas():
    """Import numba-cuda's ``np.arraymath`` (its CUDA target loads it on the first
    compile) with the host-BLAS probe answering "none": at import it runs
    ``linalg.ensure_blas()``, which imports ``scipy.linalg`` (0.28 s of a 1.3 s first
    compile on a CPU VM, 2026-12-04) only to choose BLAS for ``np.dot`` of 1-D arrays,
    which device code cannot call; without it ``np.dot`` takes numba-cuda's own loop.
    ``ensure_blas`` is restored at once, so nothing else sees the change."""
    if "numba.cuda.np.arraymath" in sys.modules:
        return
    from numba.cuda.np import linalg
    probe = linalg.ensure_blas

    def no_host_blas():
        raise ImportError("numba_ws: device code has no host BLAS")
    linalg.ensure_blas = no_host_blas
    try:
        import numba.cuda.np.arraymath  # noqa: F401
    finally:
        linalg.ensure_blas = probe


@contextlib.contextmanager
def _call_types_memoized(typingctx):
    """Within one compile, answer ``typingctx.resolve_function_type(func, args, kws)``
    from a table once a call form has been typed.

    The numba_ws stage runs Numba's type inference again after each rewrite (anchors,
    code partition, layouts, tile lowering: 4 runs for the GEMM), and each run types every
    call anew through its templates (the 128x256 GEMM: 405 resolutions, 69 distinct keys;
    front end + NVVM 0.373 -> 0.329 s on a CPU VM, median of 6, same PTX
    up to numba's function version numbers). Invariant: a resolution is a
    function of (func, argument types, keyword types) for one typing context within one
    compile (Literal types carry their values; the plan and knobs are fixed for the
    compile). Raised errors are not stored; an unhashable key is resolved directly. The
    table lives for one compile, under numba's compiler lock (the typing context is
    shared by every compile in the process); nested compiles reuse the outer table."""
    if "resolve_function_type" in vars(typingctx):
        yield
        return
    resolve = type(typingctx).resolve_function_type
    table = {}

    def memoized(func, args, kws):
        try:
            key = (func, tuple(args), tuple(sorted(kws.items())) if kws else ())
            found = table.get(key, table)
        except TypeError:
            return resolve(typingctx, func, args, kws)
        if found is table:
            found = table[key] = resolve(typingctx, func, args, kws)
        return found
    with global_compiler_lock:
        typingctx.resolve_function_type = memoized
        try:
            yield
        finally:
            del typingctx.resolve_function_type


def run_stage(pyfunc, argtypes, plan, stop_after=None):
    """Compile ``pyfunc`` for ``argtypes`` with ``plan``; return the compiler state.

    With ``stop_after`` (a pass name), stop after that pass (no lowering).
    """
    _load_arraymath_without_host_blas()
    pipeline = type("WSCompilerFor_" + pyfunc.__name__, (WSCompiler,),
                    {"ws_plan": plan, "ws_stop_after": stop_after})
    try:
        with utils.numba_target_override(), \
                _call_types_memoized(cuda_target.typing_context):
            cres = compile_extra(cuda_target.typing_context, cuda_target.target_context,
                                 pyfunc, tuple(argtypes), types.void,
                                 _flags(plan.cc, plan.options.nvvm_opt), {},
                                 pipeline_class=pipeline)
    except _StopHere as stop:
        return stop.state
    except WSError:
        raise
    except (NumbaError, CoreNumbaError) as e:
        text = _plain(str(e))
        loc = _error_loc(e, pyfunc)
        err = WSCompileError(_headline(text, pyfunc, loc), pass_name=_failing_pass(text))
        err.loc, err.details = loc, text
        raise err from None
    return cres


#: One rejected candidate in numba's "No implementation of function" report: the
#: argument types it was tried with, and the sentence a numba_ws typing rule raised.
_REJECTED = re.compile(r"With argument\(s\): '\((.*?)\)':\s*Rejected as the implementation "
                       r"raised a specific error:\s*TypingError: (.+?)\n\s*raised from "
                       r"[^\n]*numba_ws", re.S)
_SIGNATURE = re.compile(r">>> [^\n(]*\((.*)\)\s*\n")


def _headline(text, pyfunc, loc=None):
    """numba's report with the numba_ws typing error it buried moved to the top, then
    the kernel line it is about.

    A rejected ws op shows up deep inside numba's "No implementation of function ..."
    report, once per attempt: with the literal argument types (``Literal[int](64)``, the
    constexprs) and again with them widened (``int64``). The literal attempt's sentence
    is the one about the user's values (a widened block size is never a compile-time
    constant), so it is preferred. The line is ``loc`` (see :func:`_error_loc`), else
    numba's own ``File "...", line N:`` when it printed one, else the first line of
    ``pyfunc`` calling the op.
    """
    rejected = [(m.group(1), " ".join(m.group(2).split())) for m in _REJECTED.finditer(text)]
    if not rejected:
        return text if loc is None or 'File "' in text else text + _source_line(loc)
    sig = _SIGNATURE.search(text)
    literal = [msg for args, msg in rejected if sig and args == sig.group(1).strip()]
    ours = (literal or [msg for _, msg in rejected])[0]
    if loc is not None:
        return ours + _source_line(loc)
    where = text.find('File "')
    if where >= 0:
        return ours + "\n" + text[where:]
    return ours + _first_call_site(pyfunc, ours.split("(")[0].strip())


def _error_loc(exc, pyfunc):
    """The line of ``pyfunc`` a numba error is about, or None.

    numba-cuda adds the location to its own TypingErrors, but an overload rejected by a
    numba_ws rule arrives as numba-core's TypingError, which numba-cuda's error context
    does not catch: it leaves type inference at the first failing constraint with no
    location. That constraint (a ``CallConstraint`` and the like, ``self`` of a frame in
    the traceback) carries the statement's ``loc``; the innermost one in ``pyfunc``'s own
    file, or inlined from a helper called there (an :class:`InlinedLoc`), is the
    statement that failed.
    """
    filename = pyfunc.__code__.co_filename

    def ours(loc):
        return getattr(kernel_loc(loc), "filename", None) == filename \
            and isinstance(getattr(loc, "line", None), int)

    loc = getattr(exc, "loc", None)
    if ours(loc) and loc.line:
        return loc
    found, tb = None, exc.__traceback__
    while tb is not None:
        loc = getattr(tb.tb_frame.f_locals.get("self"), "loc", None)
        if ours(loc):
            found = loc
        tb = tb.tb_next
    return found


def _source_line(loc):
    return "\n" + source_lines(loc)


def _first_call_site(pyfunc, op):
    import inspect
    try:
        lines, start = inspect.getsourcelines(pyfunc)
        path = inspect.getsourcefile(pyfunc)
    except (OSError, TypeError):
        return ""
    for i, line in enumerate(lines):
        if re.search(rf"\b{re.escape(op)}\s*\(", line) and not line.lstrip().startswith("def "):
            return f'\nFile "{path}", line {start + i}:\n    {line.strip()}'
    return ""


def _plain(text):
    return re.sub(r"\x1b\[[0-9;]*m", "", text).strip()


def _failing_pass(text):
    m = re.search(r"\(step: ([^)]*)\)", text)
    return f"numba-cuda: {m.group(1)}" if m else "numba-cuda"
