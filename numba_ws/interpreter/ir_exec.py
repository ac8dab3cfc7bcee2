"""An evaluator of (partitioned) Numba IR: one Python generator per warp group.

:class:`GroupRun` walks ``func_ir.blocks`` from the entry block, exactly as the GPU
would run the kernel for one warp group: the dispatch block calls ``ws_warp_group()``
(answered by the machine with this group's index) and branches to that group's clone.

Values are plain Python/NumPy objects: scalars are Python numbers, tiles ``ndarray``,
tuples tuples, ``range`` iterators Python iterators. Calls are split three ways:

- stage ops (:data:`numba_ws.language.stage_ops.STAGE_STUBS`): ``yield from
  machine.stage(run, name, args, stmt)``; the machine may yield :class:`Wait` objects;
- language ops (a ``numba_ws`` function of ``OP_NAMES``, or ``tile.astype``):
  ``machine.op(run, name, args, kws)``, then one ``yield None`` (a scheduling point);
- anything else (``range``, builtins, device functions): called directly.

Operators (binop, inplace_binop, unary) apply the Python operator, as the interpreter does
when it runs the kernel's source; ``machine.read(run, values)`` is told about every
operand so that reads of shared-memory views can be checked. Invariant: the generator
only yields ``None`` or a ``Wait``; ``run.stmt`` is the statement being executed.
"""
import numpy as np
from numba.cuda.core import ir

from ..language import core, stage_ops

LANGUAGE = {getattr(core, n): n for n in core.OP_NAMES if callable(getattr(core, n, None))}
STAGE = {stub: name for name, stub in stage_ops.STAGE_STUBS.items()}


class IRError(Exception):
    """The IR uses a construct this evaluator does not model."""


class Wait:
    """A blocked warp group: runnable again once ``ready()`` is true.

    ``what`` describes the wait for deadlock reports; ``barrier`` is the Barrier waited on.
    """

    def __init__(self, ready, what, barrier, channel, slot, phase):
        self.ready, self.what, self.barrier = ready, what, barrier
        self.channel, self.slot, self.phase = channel, slot, phase


class Method:
    """A bound tile method taken with ``getattr`` (``tile.astype``)."""

    def __init__(self, name, obj):
        self.name, self.obj = name, obj


def _lookup(table, fn):
    try:
        return table.get(fn)
    except TypeError:           # unhashable callee
        return None


def stage_calls(func_ir, name=None):
    """``[(label, index, stmt, op name)]`` of every stage-op call (of ``name`` if given)."""
    globals_ = {s.target.name: s.value.value for b in func_ir.blocks.values() for s in b.body
                if isinstance(s, ir.Assign) and isinstance(s.value, (ir.Global, ir.FreeVar))}
    out = []
    for label in sorted(func_ir.blocks):
        for i, s in enumerate(func_ir.blocks[label].body):
            if isinstance(s, ir.Assign) and isinstance(s.value, ir.Expr) and s.value.op == "call":
                op = _lookup(STAGE, globals_.get(s.value.func.name))
                if op is not None and (name is None or op == name):
                    out.append((label, i, s, op))
    return out


class GroupRun:
    """The execution of the kernel by warp group ``group`` (see module doc)."""

    def __init__(self, func_ir, args, machine, group):
        self.blocks = func_ir.blocks
        self.args = args
        self.m = machine
        self.group = group
        self.env = {}
        self.stmt = None

    def run(self):
        label = min(self.blocks)
        while True:
            block = self.blocks[label]
            for stmt in block.body[:-1]:
                self.stmt = stmt
                if isinstance(stmt, ir.Assign):
                    value = stmt.value
                    if isinstance(value, ir.Expr) and value.op == "call":
                        result = yield from self._call(value, stmt)
                    elif isinstance(value, ir.Expr):
                        result = self._expr(value)
                    else:
                        result = self._simple(value)
                    self.env[stmt.target.name] = result
                elif not isinstance(stmt, ir.Del):
                    raise IRError(f"unsupported statement {stmt}")
            term = self.stmt = block.body[-1]
            if isinstance(term, ir.Jump):
                label = term.target
            elif isinstance(term, ir.Branch):
                label = term.truebr if self.env[term.cond.name] else term.falsebr
            elif isinstance(term, ir.Return):
                return self.env[term.value.name]
            else:
                raise IRError(f"unsupported terminator {term}")

    def _simple(self, value):
        if isinstance(value, ir.Arg):
            return self.args[value.name]
        if isinstance(value, ir.Var):
            return self.env[value.name]
        if isinstance(value, (ir.Const, ir.Global, ir.FreeVar)):
            return value.value
        raise IRError(f"unsupported value {value}")

    def _call(self, expr, stmt):
        env = self.env
        fn = env[expr.func.name]
        args = [env[a.name] for a in expr.args]
        if expr.vararg is not None:
            args += list(env[expr.vararg.name])
        kws = {k: env[v.name] for k, v in expr.kws}
        stage = _lookup(STAGE, fn)
        if stage is not None:
            return (yield from self.m.stage(self, stage, args, stmt))
        op = _lookup(LANGUAGE, fn)
        if isinstance(fn, Method):
            op, args = fn.name, [fn.obj] + args
        if op is not None:
            result = self.m.op(self, op, args, kws)
            yield None
            return result
        self.m.read(self, args + list(kws.values()))
        return fn(*args, **kws)

    def _expr(self, expr):
        env, op = self.env, expr.op
        if op in ("binop", "inplace_binop"):
            lhs, rhs = env[expr.lhs.name], env[expr.rhs.name]
            self.m.read(self, (lhs, rhs))
            return expr.fn(lhs, rhs)
        if op == "unary":
            value = env[expr.value.name]
            self.m.read(self, (value,))
            return expr.fn(value)
        if op == "getattr":
            obj = env[expr.value.name]
            if isinstance(obj, np.ndarray) and expr.attr == "astype":
                return Method("astype", obj)
            return getattr(obj, expr.attr)
        if op == "static_getitem":
            return env[expr.value.name][expr.index]
        if op == "getitem":
            return env[expr.value.name][env[expr.index.name]]
        if op == "build_tuple":
            return tuple(env[v.name] for v in expr.items)
        if op == "build_list":
            return [env[v.name] for v in expr.items]
        if op == "exhaust_iter":
            items = tuple(env[expr.value.name])
            if len(items) != expr.count:
                raise IRError(f"cannot unpack {len(items)} values into {expr.count}")
            return items
        if op == "getiter":
            return iter(env[expr.value.name])
        if op == "iternext":
            try:
                return (next(env[expr.value.name]), True)
            except StopIteration:
                return (None, False)
        if op == "pair_first":
            return env[expr.value.name][0]
        if op == "pair_second":
            return env[expr.value.name][1]
        if op == "cast":
            return env[expr.value.name]
        raise IRError(f"unsupported expression {op}: {expr}")
