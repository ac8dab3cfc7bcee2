"""Untyped pre-pass: a call of a ``@numba.cuda.jit(device=True)`` function inside a tile
program becomes ``ws.map(f, *args)``, which applies it element-wise to tiles (and calls
it plainly on scalars). Runs before type inference, where the callee is still a global.
"""
from numba.cuda.core import ir
from numba.cuda.core.compiler_machinery import FunctionPass, register_pass
from numba.cuda.dispatcher import CUDADispatcher

from ..language import core


def _device_function(func_ir, var):
    try:
        d = func_ir.get_definition(var)
    except KeyError:
        return None
    v = getattr(d, "value", None) if isinstance(d, (ir.Global, ir.FreeVar)) else None
    if isinstance(v, CUDADispatcher) and v.targetoptions.get("device"):
        return v
    return None


@register_pass(mutates_CFG=False, analysis_only=False)
class MapDeviceCalls(FunctionPass):
    _name = "ws_map_device_calls"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        fir, changed = state.func_ir, False
        for block in fir.blocks.values():
            body = []
            for stmt in block.body:
                v = getattr(stmt, "value", None)
                if isinstance(stmt, ir.Assign) and isinstance(v, ir.Expr) and v.op == "call" \
                        and not v.kws and v.vararg is None \
                        and _device_function(fir, v.func) is not None:
                    fn = ir.Var(block.scope, f"$ws_map.{len(body)}.{stmt.target.name}", v.loc)
                    body.append(ir.Assign(ir.Global("ws_map", core.map, v.loc), fn, v.loc))
                    stmt.value = ir.Expr.call(fn, [v.func] + list(v.args), (), v.loc)
                    changed = True
                body.append(stmt)
            block.body = body
        if changed:
            from numba.cuda.core import ir_utils
            fir._definitions = ir_utils.build_definitions(fir.blocks)
        return changed
