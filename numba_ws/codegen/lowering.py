"""How each language op reaches the GPU: ``LOWERING`` has the keys of ``OP_NAMES``.

A rule ``rule(lowerer, stmt, builder)`` appends the replacement statements for ``stmt``
(an ``x = op(...)`` call of the partitioned IR) to ``builder`` and returns them, or
returns None when the statement stays as it is (scalar ops and tile operators, which
numba lowers through ``lower_builtin`` registrations in :mod:`.tile_ops`). Ops without a
GPU form raise a compile error naming the op and the line: they run in the interpreter.
"""
from numba.cuda import types
from numba.cuda.core import ir

from ..language import core, stage_ops as so
from ..passes.channels import parameter_name
from ..passes.ir_tools import callee_object
from . import channel_ops as cg
from . import frag_math as fm
from . import index_ops as ix
from . import layouts as lay
from . import math_ops as mo
from . import reduce_ops as ro
from . import regtile as rt
from . import tile_ops as to
from .atomics import gpu_tile_atomic_add
from .epilogue import gpu_frag_store, gpu_frag_store_masked
from .mma_sync import gpu_dot_rs_sm80, gpu_dot_sm80
from .staged_store import box_columns, gpu_frag_store_edge_staged, gpu_frag_store_staged
from .wgmma_rs import gpu_dot_rs


def _keep(lowerer, stmt, b):
    return None


def _args(stmt):
    return stmt.value.args


def layout_of(lowerer, var):
    """The layout the layouts pass chose for register tile ``var`` (an IR global)."""
    return lowerer.plan.layouts[var.name]


def _fill(lowerer, stmt, b, value, shape, dtype):
    layout = b.glob(layout_of(lowerer, stmt.target), "layout")
    return b.call(rt.gpu_tile_fill, [value, shape, dtype, layout], target=stmt.target)


def _zeros(lowerer, stmt, b):
    shape, dtype = _args(stmt)
    return _fill(lowerer, stmt, b, b.const(0.0), shape, dtype)


def _full(lowerer, stmt, b):
    shape, value, dtype = _args(stmt)
    return _fill(lowerer, stmt, b, value, shape, dtype)


def scratch_args(lowerer, b):
    """The literal (offset, bytes per region, first consumer group) of the scratch region
    the layouts pass reserved."""
    plan = lowerer.plan
    return [b.const(plan.scratch_offset), b.const(plan.scratch_bytes),
            b.const(plan.scratch_first_group)]


def _dot(lowerer, stmt, b):
    """sm_90: wgmma with A from shared memory (``gpu_dot``) or from registers
    (``gpu_dot_rs``, e.g. ``p.astype(ws.float16) @ v``); below: mma.sync with A from
    shared memory through ldmatrix (``gpu_dot_sm80``) or from registers
    (``gpu_dot_rs_sm80``). Reads of the result wait for it: the partitioner put
    ``ws_dot_wait`` + ``ws_dot_fence`` before the first one that is not another dot's
    accumulator."""
    a, bb = _args(stmt)[:2]
    acc = _args(stmt)[2] if len(_args(stmt)) > 2 else b.const(None)
    in_registers = _dot_operands_in_registers(lowerer, stmt)
    if tuple(lowerer.plan.cc[:2]) < (9, 0):
        fn = gpu_dot_rs_sm80 if in_registers else gpu_dot_sm80
    else:
        fn = gpu_dot_rs if in_registers else to.gpu_dot
    return b.call(fn, [a, bb, acc], target=stmt.target)


def _astype(lowerer, stmt, b):
    fty = lowerer.state.typemap[stmt.value.func.name]
    if isinstance(fty, types.BoundFunction):
        method = lowerer.fir.get_definition(stmt.value.func)
        tile, dtype = method.value, _args(stmt)[0]
    else:
        tile, dtype = _args(stmt)
    return b.call(to.gpu_frag_astype, [tile, dtype], target=stmt.target)


def _store(lowerer, stmt, b):
    """A 2-D tile in the accumulator layout: the epilogue store (codegen/epilogue.py; its
    16-byte quad-transposed path only on sm_90, where consumers have 232 registers; under
    sm_80's 168 it spilled: persistent GEMM, 248 B). Any other register tile:
    ``regtile.gpu_tile_store``. With a mask (the anchors pass made it the 4th argument):
    ``epilogue.gpu_frag_store_masked`` for the accumulator layout, else
    ``regtile.gpu_tile_store_masked``."""
    array, offsets, tile, *mask = _args(stmt)
    chunk = lowerer.plan.staged.get(stmt.target.name)
    if chunk and not lowerer.plan.staging_edge_only:
        return _staged_store(lowerer, stmt, b, chunk)
    layout = lowerer.plan.layouts.get(tile.name)
    shape = lowerer.state.typemap[tile.name].shape
    if layout is not None and len(shape) == 2 and shape[1] > 1 and lay.fits_acc(shape) \
            and layout == lay.acc(*shape):
        wide = b.const(tuple(lowerer.plan.cc[:2]) >= (9, 0))
        if mask:
            return b.call(gpu_frag_store_masked, [array, offsets, tile, mask[0], wide],
                          target=stmt.target)
        if chunk:            # tma_store=2: edge tiles through TMA
            return b.call(gpu_frag_store_edge_staged, [array, offsets, tile, wide]
                          + _staging_args(lowerer, b, tile, array, chunk), target=stmt.target)
        return b.call(gpu_frag_store, [array, offsets, tile, wide], target=stmt.target)
    if mask:
        return b.call(rt.gpu_tile_store_masked, [array, offsets, tile, mask[0]],
                      target=stmt.target)
    return b.call(rt.gpu_tile_store, [array, offsets, tile], target=stmt.target)


def _atomic_add(lowerer, stmt, b):
    """Staged (the staged_stores pass chose it: bulk tensor reduce-adds) or
    ``atomics.gpu_tile_atomic_add`` (one ``red.global.add`` per element, any layout)."""
    array, offsets, tile, *mask = _args(stmt)
    chunk = lowerer.plan.staged.get(stmt.target.name)
    if chunk:
        return _staged_store(lowerer, stmt, b, chunk, reduce_add=1)
    return b.call(gpu_tile_atomic_add, [array, offsets, tile,
                                        mask[0] if mask else b.const(None),
                                        b.const(lowerer.arch)], target=stmt.target)


def _staged_store(lowerer, stmt, b, chunk, reduce_add=0):
    """A store (or atomic add) the staged_stores pass chose:
    ``staged_store.gpu_frag_store_staged`` through the output's tensor map (boxes of the
    tile's rows x 64 columns, 128-byte swizzle)."""
    array, offsets, tile = _args(stmt)
    return b.call(gpu_frag_store_staged, [array, offsets, tile]
                  + _staging_args(lowerer, b, tile, array, chunk) + [b.const(reduce_add)],
                  target=stmt.target)


def _staging_args(lowerer, b, tile, array, chunk):
    """The tensor maps, the output's map index and the buffer's literals of a staged
    store (``staged_store`` intrinsics)."""
    plan = lowerer.plan
    rows = lowerer.state.typemap[tile.name].shape[0]
    idx = lowerer.tmap_index(parameter_name(lowerer.fir, array),
                             dict(phys=(rows,), box_cols=box_columns(2), swizzle=128), False)
    c = b.const
    return [lowerer.tmaps_var, c(idx), c(plan.staging_offset), c(plan.staging_bytes),
            c(plan.first_consumer_group), c(chunk)]


def _trans(lowerer, stmt, b):
    x = _args(stmt)[0]
    if x.name in lowerer.plan.layouts:
        return b.call(rt.gpu_tile_trans, [x], target=stmt.target)
    return b.call(to.gpu_smem_trans, [x], target=stmt.target)


def _unary(fn):
    def rule(lowerer, stmt, b):
        return b.call(fn, [_args(stmt)[0]], target=stmt.target)
    return rule


def _maximum(lowerer, stmt, b):
    x, y = _args(stmt)
    return b.call(fm.gpu_frag_maximum, [x, y], target=stmt.target)


def _minimum(lowerer, stmt, b):
    x, y = _args(stmt)
    return b.call(mo.gpu_frag_minimum, [x, y], target=stmt.target)


def _fma(lowerer, stmt, b):
    x, y, z = _args(stmt)
    return b.call(mo.gpu_frag_fma, [x, y, z], target=stmt.target)


def _reduce(name):
    def rule(lowerer, stmt, b):
        x, axis = _args(stmt)[:2]       # keepdims: always True here (passes/anchors.py)
        return b.call(ro.gpu_tile_reduce, [x, axis, b.const(name)] + scratch_args(lowerer, b),
                      target=stmt.target)
    return rule


def _is_smem_view(lowerer, var, seen=None):
    """Whether ``var`` is a shared-memory tile: a ``ws_view`` of a channel slot, possibly
    through copies and ``trans`` (every definition of ``var`` is followed)."""
    seen = set() if seen is None else seen
    if var.name in seen:
        return False
    seen.add(var.name)
    for d in lowerer.fir._definitions.get(var.name, ()):
        if isinstance(d, ir.Var) and _is_smem_view(lowerer, d, seen):
            return True
        if isinstance(d, ir.Expr) and d.op == "call":
            fn = callee_object(d, lowerer.state.typemap)
            if fn is so.ws_view:
                return True
            if fn is core.trans and d.args and _is_smem_view(lowerer, d.args[0], seen):
                return True
    return False


def _dot_operands_in_registers(lowerer, stmt):
    """True when the dot's A operand is a register tile (e.g. ``p.astype(ws.float16)``)
    rather than a tile loaded by ws.load: then the dot is ``wgmma_rs.gpu_dot_rs``."""
    return not _is_smem_view(lowerer, _args(stmt)[0])


def _not_yet(name):
    def rule(lowerer, stmt, b):
        raise lowerer.p.error(
            f"ws.{name} has no GPU lowering yet (it runs in the interpreter: "
            "NUMBA_WS_INTERPRET=1)", stmt.loc)
    return rule


def _arange(lowerer, stmt, b):
    """``ws.arange(start, end)``: ``index_ops.gpu_arange`` in the layout the layouts pass
    chose (a free source: each register holds start + its column)."""
    start, end = _args(stmt)
    n = lowerer.state.typemap[stmt.target.name].shape[0]
    layout = b.glob(layout_of(lowerer, stmt.target), "layout")
    return b.call(ix.gpu_arange, [start, b.tuple([b.const(n)]), layout], target=stmt.target)


def _expand_dims(lowerer, stmt, b):
    x, axis = _args(stmt)
    return b.call(ix.gpu_expand_dims, [x, axis], target=stmt.target)


def _squeeze(lowerer, stmt, b):
    x, axis = _args(stmt)
    return b.call(ix.gpu_squeeze, [x, axis], target=stmt.target)


def _broadcast_to(lowerer, stmt, b):
    x, shape = _args(stmt)
    return b.call(ix.gpu_broadcast_to, [x, shape], target=stmt.target)


def _where(lowerer, stmt, b):
    cond, x, y = _args(stmt)
    return b.call(ix.gpu_frag_where, [cond, x, y], target=stmt.target)


def _load(lowerer, stmt, b):
    raise lowerer.p.error("a ws.load was left unpartitioned (its result feeds no consumer?)",
                          stmt.loc)


LOWERING = {
    "program_id": _keep,
    "num_programs": _keep,
    "cdiv": _keep,
    "zeros": _zeros,
    "full": _full,
    "load": _load,
    "store": _store,
    "atomic_add": _atomic_add,
    "dot": _dot,
    "astype": _astype,
    "exp": _unary(fm.gpu_frag_exp),
    "exp2": _unary(fm.gpu_frag_exp2),
    "log": _unary(fm.gpu_frag_log),
    "maximum": _maximum,
    "where": _where,
    "max": _reduce("max"),
    "sum": _reduce("sum"),
    "trans": _trans,
    "add": _keep,
    "sub": _keep,
    "mul": _keep,
    "truediv": _keep,
    "map": _keep,
    "neg": _keep,   # ``-x`` is a unary expression: operator.neg on FragType (frag_math)
    # issue 15 items 1-2 (codegen/index_ops.py); operators lower through lower_builtin
    "arange": _arange,
    "expand_dims": _expand_dims,
    "broadcast_to": _broadcast_to,
    "lt": _keep, "le": _keep, "eq": _keep, "ne": _keep, "gt": _keep, "ge": _keep,
    "and_": _keep, "or_": _keep, "xor": _keep, "invert": _keep,
    # issue 15 item 3 (codegen/math_ops.py); // % << >> lower through lower_builtin
    "sqrt": _unary(mo.gpu_frag_sqrt), "rsqrt": _unary(mo.gpu_frag_rsqrt),
    "abs": _unary(mo.gpu_frag_abs), "sigmoid": _unary(mo.gpu_frag_sigmoid),
    "tanh": _unary(mo.gpu_frag_tanh), "gelu": _unary(mo.gpu_frag_gelu),
    "minimum": _minimum, "fma": _fma,
    "min": _reduce("min"), "argmax": _reduce("argmax"), "argmin": _reduce("argmin"),
    # issue 15 item 4 (codegen/index_ops.py)
    "squeeze": _squeeze,
    "floordiv": _keep, "mod": _keep, "lshift": _keep, "rshift": _keep,
}

