"""The tile language: what a ``@numba_ws.jit`` kernel may call.

A kernel is a *tile program*: one instance per thread block. Scalars are uniform over
the block; tiles are 1-D or 2-D blocks of values whose shapes are compile-time constants
(``ws.constexpr`` parameters or literals). These functions are stubs: inside a kernel the
compiler types and lowers them (:mod:`numba_ws.language.typing`,
:mod:`numba_ws.codegen.lowering`), and in interpreter mode they run the NumPy rules of
:mod:`numba_ws.interpreter.ops`. The three tables share the keys of :data:`OP_NAMES`.
"""
import contextvars

from ..errors import WSUsageError

#: The interpreter that runs the current program instance (set by numba_ws.interpreter).
_ACTIVE = contextvars.ContextVar("numba_ws_active_interpreter", default=None)

#: Every op of the language, one key per row of the typing, lowering and interpreter tables.
OP_NAMES = (
    "program_id", "num_programs", "cdiv", "zeros", "full", "load", "store", "dot",
    "astype", "exp", "exp2", "log", "maximum", "where", "max", "sum", "trans",
    "add", "sub", "mul", "truediv", "neg", "map",
)


class constexpr:
    """Annotation for a compile-time constant parameter: ``BM: ws.constexpr``.

    Its value (an int, bool, float, str or ws dtype) is part of the compiled
    specialization; tile shapes must be built from int constexprs and literals. A test
    on constexprs (``if ACT == "leaky_relu":``, ``if HAS_BIAS:``, ``if BK == 64:``) is
    decided at compile time: the branch not taken is neither typed nor compiled.
    """

    def __init__(self, value=None):
        self.value = value

    def __repr__(self):
        return f"constexpr({self.value!r})"


def _dispatch(name, *args):
    interp = _ACTIVE.get()
    if interp is None:
        raise WSUsageError(
            f"numba_ws.{name}() can only be called inside a @numba_ws.jit kernel "
            "(compiled, or run by the interpreter)")
    return interp.call(name, *args)


def program_id(axis):
    """Index of this program instance along grid axis ``axis`` (0, 1 or 2). int."""
    return _dispatch("program_id", axis)


def num_programs(axis):
    """Number of program instances along grid axis ``axis``. int."""
    return _dispatch("num_programs", axis)


def cdiv(a, b):
    """Ceiling division of integers: ``(a + b - 1) // b``. Usable on the host too."""
    if _ACTIVE.get() is None:
        return -(-a // b)
    return _dispatch("cdiv", a, b)


def zeros(shape, dtype):
    """A tile of ``shape`` (constexpr tuple) filled with 0 of ``dtype``."""
    return _dispatch("zeros", shape, dtype)


def full(shape, value, dtype):
    """A tile of ``shape`` (constexpr tuple) filled with scalar ``value`` cast to ``dtype``."""
    return _dispatch("full", shape, value, dtype)


def load(array, offsets, shape):
    """Read the tile ``array[o0:o0+s0, o1:o1+s1]``; elements past the array's edge read 0.

    ``offsets`` is a tuple of ints (one per array dimension), ``shape`` a tuple of
    constexprs. The tile has the array's dtype. Anchor op: runs in the producer.
    """
    return _dispatch("load", array, offsets, shape)


def store(array, offsets, tile):
    """Write ``tile`` (cast to the array's dtype) at ``offsets``; writes past the edge are dropped."""
    return _dispatch("store", array, offsets, tile)


def dot(a, b, acc=None):
    """Matrix product ``a @ b (+ acc)``: a (M, K), b (K, N) -> (M, N) float32.

    Inputs fp16 or bf16 (fp32 inputs run as tf32); products accumulate in float32.
    Anchor op: runs in the consumers, on the tensor cores.
    """
    return _dispatch("dot", a, b, acc)


def astype(tile, dtype):
    """``tile`` converted to ``dtype`` (round to nearest even). Also ``tile.astype(dtype)``."""
    return _dispatch("astype", tile, dtype)


def exp(x):
    """Element-wise e**x. fp16/bf16 tiles are computed in float32 and rounded back."""
    return _dispatch("exp", x)


def exp2(x):
    """Element-wise 2**x."""
    return _dispatch("exp2", x)


def log(x):
    """Element-wise natural logarithm."""
    return _dispatch("log", x)


def maximum(a, b):
    """Element-wise maximum of two tiles (or a tile and a scalar), with broadcasting."""
    return _dispatch("maximum", a, b)


def where(cond, a, b):
    """Element-wise ``a if cond else b`` with broadcasting."""
    return _dispatch("where", cond, a, b)


def max(x, axis):
    """Maximum of a 2-D tile along ``axis`` (constexpr 0 or 1), the reduced axis kept with
    size 1: (M, N) -> (M, 1) for axis 1, (1, N) for axis 0, so it broadcasts back."""
    return _dispatch("max", x, axis)


def sum(x, axis):
    """Sum of a 2-D tile along ``axis`` (constexpr 0 or 1), the reduced axis kept with size
    1 (as :func:`max`); fp16/bf16 tiles are summed and returned in float32."""
    return _dispatch("sum", x, axis)


def map(fn, *args):
    """``fn`` applied element by element: ``fn`` is a ``@numba.cuda.jit(device=True)``
    scalar function, ``args`` tiles (broadcast together) and scalars. The result has
    ``fn``'s return type for the tiles' element types. Inside a kernel, calling a device
    function on tiles directly (``gelu(acc)``) means the same."""
    return _dispatch("map", fn, *args)


def trans(x):
    """Transpose of a 2-D tile: (M, N) -> (N, M)."""
    return _dispatch("trans", x)


def static_range(*bounds):
    """``range(start, stop, step)`` unrolled at compile time (issue 15 item 5; Triton's
    ``tl.static_range``): the bounds must be compile-time ints (constexprs, literals and
    arithmetic on them) and ``ws.static_range`` is the iterable of a ``for`` loop. The
    body is repeated once per value with the loop variable a constant (so ``if i == 0:``
    is decided per copy). Not an op (no OP_NAMES row): the compiler unrolls the loop
    before typing (passes/static_range.py); the interpreter runs it as ``range``."""
    if not 1 <= len(bounds) <= 3 or not all(
            isinstance(b, int) and not isinstance(b, bool) for b in bounds):
        raise WSUsageError(f"ws.static_range(start, stop, step) takes 1 to 3 int bounds, "
                           f"got {bounds!r}")
    return range(*bounds)
