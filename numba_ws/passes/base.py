"""Shared machinery of the numba_ws passes: the pass base class, dumps and timing.

Every numba_ws pass is a Numba ``FunctionPass`` working on ``state.func_ir`` /
``state.typemap`` / ``state.calltypes``; what the warp-specialization stage learns is kept
in ``state.ws`` (a :class:`numba_ws.passes.plan.Plan`). A pass raises
:class:`numba_ws.errors.WSCompileError` naming the source line and itself.
"""
import sys
import time

from numba.cuda.core.compiler_machinery import FunctionPass, register_pass

from .. import knobs
from ..errors import WSCompileError


class WSPass(FunctionPass):
    """Base of numba_ws passes: subclasses implement ``run(state)``."""

    _name = "ws_pass"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        kernel_name = state.func_id.func_name
        if knobs.dump_enabled(kernel_name):
            from .dump import dump_ir
            print(f"// -----// IR Dump Before {self._name} ({kernel_name}) //----- //",
                  file=sys.stdout)
            print(dump_ir(state), file=sys.stdout)
        start = time.perf_counter()
        self.run(state)
        elapsed = time.perf_counter() - start
        state.ws.timings.append((self._name, elapsed))
        if knobs.timing():
            print(f"numba_ws: pass {self._name:<22} {elapsed * 1e3:8.2f} ms ({kernel_name})")
        return True

    def run(self, state):
        raise WSCompileError("pass has no run()", pass_name=self._name)

    def error(self, message, loc=None):
        return WSCompileError(message, loc=loc, pass_name=self._name)


def ws_pass(cls):
    """Register a numba_ws pass with numba-cuda's pass registry."""
    return register_pass(mutates_CFG=True, analysis_only=False)(cls)
