"""Ops that only the warp-specialization stage writes into the IR (never user code).

They are the seed's channel and register ops, as plain IR calls: the partitioned IR is
ordinary Numba IR calling these stubs, typed by ``STAGE_TYPING``, executed on the CPU by
the schedule simulator (``numba_ws.interpreter.simulator``) and lowered to PTX by
``numba_ws.codegen.lowering``. ``ch`` is a literal channel id (index into
``plan.channels``); ``slot`` and ``phase`` are runtime ints.

| op | seed name | meaning |
|---|---|---|
| ws_warp_group() | | this thread's warp group: 0 producer, 1..G consumers |
| ws_producer_acquire(ch, slot, phase) | ProducerAcquire | wait until ``slot`` is empty |
| ws_copy(ch, slot, part, array, offsets, shape) | (the load) | start the copy of one tile part into ``slot`` |
| ws_tma_copy / ws_cp_async_copy | | ws_copy after load lowering |
| ws_producer_commit(ch, slot) | ProducerCommit | mark ``slot`` full once its copies land |
| ws_consumer_wait(ch, slot, phase) | ConsumerWait | wait until ``slot`` is full |
| ws_view(ch, slot, part) | | the tile part held in ``slot`` (shared memory) |
| ws_dot_wait(n) | | wait until at most ``n`` dot groups are in flight (wgmma.wait_group) |
| ws_dot_fence(acc, redefine) | | the accumulator, pinned after the last ws_dot_wait |
| ws_consumer_release(ch, slot) | ConsumerRelease | give ``slot`` back to the producer |
| ws_consumer_release_prev(ch, prev) | ConsumerRelease | release slot ``prev`` if >= 0 (deferred) |
| ws_reg_alloc(n) / ws_reg_dealloc(n) | RegAlloc / RegDealloc | setmaxnreg inc / dec |
| ws_turn_wait(group, phase) | | ping-pong: wait for consumer ``group``'s turn; the ring counter handed over |
| ws_turn_pass(group, ring) | | ping-pong: hand the turn and ``ring`` to consumer ``group`` |
| ws_tile_read(view) | | a shared-memory tile read into registers (for element-wise use) |
| ws_tile_convert(x, shape) | | ``x`` in another register layout (``shape``: x's, or a broadcast of it) |
| ws_tile_stage(x) | | register tile ``x`` written to the warp group's operand buffer: a dot's B in shared memory |

The layouts of register tiles are the layouts pass's (``passes/layouts.py``): it writes
the last three ops and records every register tile's layout in ``plan.layouts``.
"""
from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.typing.templates import infer_global

from .types import TileType
from .templates import _template_for
from .typing import literal_int, literal_shape


def ws_warp_group():
    """Warp group index of the calling thread."""


def ws_producer_acquire(ch, slot, phase):
    """ProducerAcquire: wait for the empty barrier of ``slot`` (parity ``phase ^ 1``)."""


def ws_copy(ch, slot, part, array, offsets, shape):
    """Copy the tile ``array[offsets : offsets + shape]`` into part ``part`` of ``slot``."""


def ws_tma_copy(ch, slot, part, array, offsets, shape):
    """ws_copy lowered to TMA (cp.async.bulk.tensor completing on the full barrier)."""


def ws_cp_async_copy(ch, slot, part, array, offsets, shape):
    """ws_copy by the 128 producer threads: cp.async pieces (16 / 8 / 4 bytes) or, per load,
    predicated ld.global + st.shared (lower_loads decides), zero fill at the edges."""


def ws_producer_commit(ch, slot):
    """ProducerCommit: arrive on the full barrier of ``slot`` when the copies land."""


def ws_consumer_wait(ch, slot, phase):
    """ConsumerWait: wait for the full barrier of ``slot`` with parity ``phase``."""


def ws_view(ch, slot, part, shape, dtype):
    """The shared-memory tile of part ``part`` of ``slot`` (shape, dtype as given)."""


def ws_dot_wait(n):
    """Wait until at most ``n`` asynchronous dot groups of this warp group are pending."""


def ws_dot_fence(acc, redefine):
    """``acc`` itself, ordered after the preceding ws_dot_wait: no read of the accumulator
    may move above the wait (the tensor cores may still be writing it before).
    ``redefine`` (literal 0 / 1): rewrite fp32 registers in place (see
    ``codegen.tile_ops.gpu_frag_fence``), needed for results of earlier blocks."""


def ws_consumer_release(ch, slot):
    """ConsumerRelease: arrive on the empty barrier of ``slot``."""


def ws_consumer_release_prev(ch, prev_slot):
    """ConsumerRelease of the slot read by the previous dot, if ``prev_slot >= 0``."""


def ws_reg_alloc(n):
    """RegAlloc: raise this warp group's register limit to ``n`` (setmaxnreg.inc)."""


def ws_reg_dealloc(n):
    """RegDealloc: lower this warp group's register limit to ``n`` (setmaxnreg.dec)."""


def ws_turn_wait(group, phase):
    """Ping-pong: wait (parity ``phase``) until consumer ``group`` (0-based, literal) has
    the turn; returns the ring counter the previous group handed over."""


def ws_turn_pass(group, ring):
    """Ping-pong: store ``ring`` for consumer ``group`` (literal), then give it the turn."""


def ws_tile_read(view):
    """The shared-memory tile ``view`` (a slot part) read into registers."""


def ws_tile_convert(x, shape):
    """Register tile ``x`` in the layout ``plan.layouts`` gives the result, broadcast to
    ``shape`` (x's shape, or a (R, N) it stretches onto)."""


def ws_tile_stage(x):
    """Register tile ``x`` (a dot's B operand: a masked load, a computed tile) written to
    this warp group's operand buffer in shared memory, in the layout wgmma / ldmatrix
    read (``codegen/operand_stage.py``); the result is that shared-memory tile."""


def _none(*_):
    return types.none


def _int_args(name, *literal_positions):
    def rule(*args):
        for i in literal_positions:
            literal_int(args[i], f"{name} argument {i}")
        for a in args:
            if not isinstance(a, types.Integer):
                raise TypingError(f"{name}: int arguments expected, got {args}")
        return types.none
    return rule


def _copy(ch, slot, part, array, offsets, shape):
    literal_int(ch, "ws_copy(ch)")
    if not isinstance(array, types.Array):
        raise TypingError(f"ws_copy(array) expects an array, got {array}")
    literal_shape(shape, "ws_copy(shape)")
    return types.none


def _view(ch, slot, part, shape, dtype):
    from .types import DTypeType
    if not isinstance(dtype, DTypeType):
        raise TypingError(f"ws_view(dtype) must be a ws dtype, got {dtype}")
    return TileType(dtype.dtype, literal_shape(shape, "ws_view(shape)"))


def _turn_wait(group, phase):
    _int_args("ws_turn_wait", 0)(group, phase)
    return types.int64


def _tile_read(view):
    """ws_tile_read / ws_tile_stage: the same tile, in registers / in shared memory."""
    if not isinstance(view, TileType):
        raise TypingError(f"ws_tile_read / ws_tile_stage expects a tile, got {view}")
    return view


def _tile_convert(x, shape):
    if not isinstance(x, TileType):
        raise TypingError(f"ws_tile_convert expects a tile, got {x}")
    return TileType(x.dtype, literal_shape(shape, "ws_tile_convert(shape)"))


STAGE_TYPING = {
    "ws_warp_group": lambda: types.int64,
    "ws_producer_acquire": _int_args("ws_producer_acquire", 0),
    "ws_copy": _copy,
    "ws_tma_copy": _copy,
    "ws_cp_async_copy": _copy,
    "ws_producer_commit": _int_args("ws_producer_commit", 0),
    "ws_consumer_wait": _int_args("ws_consumer_wait", 0),
    "ws_view": _view,
    "ws_dot_wait": _int_args("ws_dot_wait", 0),
    "ws_dot_fence": lambda acc, redefine: acc,
    "ws_consumer_release": _int_args("ws_consumer_release", 0),
    "ws_consumer_release_prev": _int_args("ws_consumer_release_prev", 0),
    "ws_reg_alloc": _int_args("ws_reg_alloc", 0),
    "ws_reg_dealloc": _int_args("ws_reg_dealloc", 0),
    "ws_turn_wait": _turn_wait,
    "ws_turn_pass": _int_args("ws_turn_pass", 0),
    "ws_tile_read": _tile_read,
    "ws_tile_convert": _tile_convert,
    "ws_tile_stage": _tile_read,
}

STAGE_STUBS = {name: globals()[name] for name in STAGE_TYPING}

for _name, _stub in STAGE_STUBS.items():
    infer_global(_stub, types.Function(_template_for(_stub, STAGE_TYPING[_name])))
