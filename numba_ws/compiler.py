"""Driving numba-cuda's compiler with the numba_ws stage inserted.

``WSCompiler`` is a ``CUDACompiler`` whose pipeline is numba-cuda's untyped passes, type
inference, phi stripping, then :data:`numba_ws.passes.pipeline.PIPELINE`, then (for a
full compile) numba-cuda's remaining typed passes and lowering. numba-cuda 0.30.4 ignores
``pipeline_class`` for kernels, so we call ``compile_extra`` ourselves with a per-compile
subclass that carries the :class:`Plan` and where to stop.
"""
import re

import numpy as np

from numba.cuda import types, utils
from numba.cuda.compiler import CUDACompiler, compile_extra
from numba.cuda.core.compiler_machinery import PassManager, FunctionPass, register_pass
from numba.cuda.core.typed_passes import NopythonTypeInference, PreLowerStripPhis
from numba.cuda.descriptor import cuda_target
from numba.cuda.flags import CUDAFlags

from numba.core.errors import NumbaError as CoreNumbaError
from numba.cuda.core.errors import NumbaError

from .errors import WSCompileError, WSError
from .language import typing as _typing  # noqa: F401  (registers the tile typing)
from .language.dtypes import DType
from .language.types import DTypeType
from .passes.device_calls import MapDeviceCalls
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
            pm.passes.append((impl, desc))
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
    """Numba type of one kernel argument (constexprs become literals)."""
    if constexpr:
        if isinstance(value, DType):
            return DTypeType(value.name)
        if isinstance(value, bool):
            return types.literal(value)
        if isinstance(value, int):
            return types.IntegerLiteral(value)
        return types.literal(value)
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


def _flags(cc):
    flags = CUDAFlags()
    flags.no_compile = True
    flags.no_cpython_wrapper = True
    flags.no_cfunc_wrapper = True
    flags.error_model = "numpy"
    flags.compute_capability = cc
    flags.nvvm_options = {"fastmath": False, "opt": 3}
    return flags


def run_stage(pyfunc, argtypes, plan, stop_after=None):
    """Compile ``pyfunc`` for ``argtypes`` with ``plan``; return the compiler state.

    With ``stop_after`` (a pass name), stop after that pass (no lowering).
    """
    pipeline = type("WSCompilerFor_" + pyfunc.__name__, (WSCompiler,),
                    {"ws_plan": plan, "ws_stop_after": stop_after})
    try:
        with utils.numba_target_override():
            cres = compile_extra(cuda_target.typing_context, cuda_target.target_context,
                                 pyfunc, tuple(argtypes), types.void, _flags(plan.cc), {},
                                 pipeline_class=pipeline)
    except _StopHere as stop:
        return stop.state
    except WSError:
        raise
    except (NumbaError, CoreNumbaError) as e:
        # numba's own typing / lowering errors already name the user's file and line
        text = _plain(str(e))
        err = WSCompileError(_headline(text, pyfunc), pass_name=_failing_pass(text))
        err.details = text
        raise err from None
    return cres


def _headline(text, pyfunc):
    """numba's report with the numba_ws typing error it buried moved to the top.

    A rejected ws op shows up deep inside numba's "No implementation of function ..."
    report, once per candidate signature; the user needs our sentence and the source
    line. numba prints the location last (``File "...", line N:``) when it knows it;
    otherwise the first line of ``pyfunc`` calling that op is named.
    """
    ours = [" ".join(m.group(1).split()) for m in
            re.finditer(r"TypingError: (.+?)\n\s*raised from .*?numba_ws", text, re.S)]
    if not ours:
        return text
    where = text.find('File "')
    if where >= 0:
        return ours[0] + "\n" + text[where:]
    return ours[0] + _first_call_site(pyfunc, ours[0].split("(")[0].strip())


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
