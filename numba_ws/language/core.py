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
    # issue 15 item 3: math, integer operators, min / argmax / argmin reductions
    "sqrt", "rsqrt", "abs", "minimum", "sigmoid", "tanh", "gelu", "fma",
    "min", "argmax", "argmin",
    "floordiv", "mod", "lshift", "rshift", "and_", "or_", "xor", "invert",
    # issue 15 items 1-2: index tiles, views, comparisons (operators: no stubs); the
    # bitwise and_ / or_ / xor / invert above also act on boolean tiles
    "arange", "expand_dims", "broadcast_to", "lt", "le", "eq", "ne", "gt", "ge",
    # issue 15 item 4: NumPy reductions (the reduced axis dropped; squeeze undoes keepdims)
    "squeeze",
    # issue 16 item 2: element-wise atomic adds (split-K partial tiles into one output)
    "atomic_add",
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


def load(array, offsets, shape, mask=None, other=0):
    """Read the tile ``array[o0:o0+s0, o1:o1+s1]``.

    ``offsets`` is a tuple of ints (one per array dimension), ``shape`` a tuple of
    constexprs. The tile has the array's dtype. Element ``e`` reads the array where it
    is inside the array and ``mask[e]`` is True; everywhere else it reads ``other``
    (default 0: without ``mask`` and ``other`` a load reads 0 past the edge).
    ``mask``: a boolean tile broadcastable to ``shape`` (e.g. ``cols[None, :] < N``);
    ``other``: a scalar (``-math.inf``, ``math.nan``, any number), converted to the
    array's dtype as ``astype`` converts. Anchor op: the producer copies the whole box
    (TMA / cp.async fill 0 past the edge); with a mask or a nonzero ``other`` the
    consumer then applies ``where(in_bounds & mask, tile, other)`` after reading it
    (the anchors pass writes that out, so a masked load feeds element-wise code; as a
    ``ws.dot`` operand only A may be masked, it is then a register tile).
    """
    return _dispatch("load", array, offsets, shape, mask, other)


def store(array, offsets, tile, mask=None):
    """Write ``tile`` (cast to the array's dtype) at ``offsets``; element ``e`` is written
    only where it is inside the array and, with ``mask`` (a boolean tile broadcastable
    to the tile's shape), where ``mask[e]`` is True. On the GPU a warp whose part of a
    masked tile is wholly inside the array and wholly True stores as an unmasked one
    (vector stores); other warps make one predicated ``st.global`` per element (any
    layout, the accumulator's too)."""
    return _dispatch("store", array, offsets, tile, mask)


def atomic_add(array, offsets, tile, mask=None):
    """``array[offsets + e] += tile[e]`` for every element ``e`` inside the array (and,
    with ``mask``, where ``mask[e]`` holds), each add atomic (programs may add to the same
    elements in any order); ``tile`` is cast to the array's dtype first and the sum is
    rounded in it (Triton's ``tl.atomic_add`` of a block, without the old values).
    dtypes: float16, bfloat16, float32, float64, int32, int64. On the
    GPU: ``red.global.add`` per element or pair (bfloat16 from sm_90); with option
    ``tma_store=1`` an accumulator tile of 2-byte elements goes through shared memory and
    one ``cp.reduce.async.bulk.tensor ... .add`` per 64-column box."""
    return _dispatch("atomic_add", array, offsets, tile, mask)


def dot(a, b, acc=None):
    """Matrix product ``a @ b (+ acc)``: a (M, K), b (K, N) -> (M, N) float32.

    Inputs fp16 or bf16 (fp32 inputs run as tf32); products accumulate in float32.
    Anchor op: runs in the consumers, on the tensor cores.
    """
    return _dispatch("dot", a, b, acc)


def astype(tile, dtype):
    """``tile`` converted to ``dtype`` (round to nearest even). Also ``tile.astype(dtype)``;
    ``tile.dtype`` and ``tile.shape`` are the tile's dtype and shape (the program's shape,
    constants: ``x.astype(t.dtype)``, ``ws.program_id(0) * t.shape[0]``)."""
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
    """Element-wise ``a if cond else b``: ``cond`` a boolean tile, ``a`` / ``b`` tiles or
    scalars, all three broadcast together (NumPy rules). The result's dtype is that of
    the tile operands (a scalar is converted to it; two scalars: Numba's unification of
    their types). GPU: one ``selp`` per register; NaN and ±inf pass through unchanged."""
    return _dispatch("where", cond, a, b)


def max(x, axis=None, keepdims=False):
    """Maximum of a tile along ``axis``.

    ``axis`` (a constexpr int, or None: every element) is dropped from the shape, as in
    NumPy / Triton: (M, N) -> (N,) for axis 0, (M,) for axis 1, a scalar for axis=None or a
    1-D tile; ``keepdims=True`` keeps it with size 1 ((1, N), (M, 1), (1, 1)) so the result
    broadcasts back onto the tile. ``m[:, None]`` does the same for a (M,) result."""
    return _dispatch("max", x, axis, keepdims)


def sum(x, axis=None, keepdims=False):
    """Sum of a tile along ``axis`` (``axis`` and ``keepdims`` as :func:`max`: NumPy's);
    fp16/bf16 tiles are summed and returned in float32."""
    return _dispatch("sum", x, axis, keepdims)


def map(fn, *args):
    """``fn`` applied element by element: ``fn`` is a ``@numba.cuda.jit(device=True)``
    scalar function, ``args`` tiles (broadcast together) and scalars. The result has
    ``fn``'s return type for the tiles' element types. Inside a kernel, calling a device
    function on tiles directly (``gelu(acc)``) means the same."""
    return _dispatch("map", fn, *args)


def trans(x):
    """Transpose of a 2-D tile: (M, N) -> (N, M)."""
    return _dispatch("trans", x)


# -- issue 15 item 3: more math (GPU forms: codegen/math_ops.py, PTX and accuracy there) --

def sqrt(x):
    """Element-wise square root of a float tile, correctly rounded (``sqrt.rn.f32`` /
    ``sqrt.rn.f64``; fp16/bf16 through fp32, which rounds them correctly too)."""
    return _dispatch("sqrt", x)


def rsqrt(x):
    """Element-wise ``1 / sqrt(x)`` of a float tile: ``rsqrt.approx.f32`` on the GPU
    (relative error below 2**-22), ``1 / sqrt.rn.f64`` for float64."""
    return _dispatch("rsqrt", x)


def abs(x):
    """Element-wise absolute value of a float or int tile (exact; ``abs`` of the most
    negative int stays negative, as in NumPy)."""
    return _dispatch("abs", x)


def minimum(a, b):
    """Element-wise minimum of two tiles (or a tile and a scalar), with broadcasting. A NaN
    operand gives NaN (NumPy's ``minimum``; ``min.NaN.f32`` on the GPU)."""
    return _dispatch("minimum", a, b)


def sigmoid(x):
    """Element-wise ``1 / (1 + exp(-x))`` of a float tile (fast exp and reciprocal on the
    GPU: a few ulp; float64 through libdevice)."""
    return _dispatch("sigmoid", x)


def tanh(x):
    """Element-wise hyperbolic tangent of a float tile: ``tanh.approx.f32`` on the GPU
    (sm_75+; about 16.5 correct bits, relative error up to about 1.1e-5); float64
    through libdevice."""
    return _dispatch("tanh", x)


def gelu(x):
    """Element-wise exact (erf-based) GELU of a float tile: ``0.5 * x * (1 + erf(x /
    sqrt(2)))``, erf through libdevice (``__nv_erff`` / ``__nv_erf``) as numba's
    ``math.erf``. For the tanh approximation write a device function (README)."""
    return _dispatch("gelu", x)


def fma(a, b, c):
    """Element-wise ``a * b + c`` with one rounding (fused multiply-add) of float tiles or
    scalars, broadcast together: ``fma.rn.{f16,bf16,f32,f64}`` on the GPU."""
    return _dispatch("fma", a, b, c)


def min(x, axis=None, keepdims=False):
    """Minimum of a tile along ``axis`` (``axis`` and ``keepdims`` as :func:`max`:
    NumPy's). A NaN in the reduced elements gives NaN (NumPy's ``min``)."""
    return _dispatch("min", x, axis, keepdims)


def argmax(x, axis, keepdims=False):
    """Index (int32) of the maximum along ``axis`` (a constexpr int: axis=None, a flat
    index, is not supported), dropped from the shape unless ``keepdims`` (as :func:`max`).
    Ties give the smallest index; a NaN counts as the maximum (the first NaN wins), as
    NumPy's ``argmax``."""
    return _dispatch("argmax", x, axis, keepdims)


def argmin(x, axis, keepdims=False):
    """Index (int32) of the minimum along ``axis`` (as :func:`argmax`). Ties give the
    smallest index; the first NaN wins, as NumPy's ``argmin``."""
    return _dispatch("argmin", x, axis, keepdims)


# -- issue 15 items 1-2: index tiles and views -------------------------------------------

def arange(start, end):
    """The int32 1-D tile ``[start, start + 1, ..., end - 1]``; ``start`` and ``end`` are
    compile-time ints (literals or constexprs), ``end > start``. On the GPU its length
    must be a power of two unless its layout comes from an accumulator it is compared
    with; each register holds ``start`` + its coordinate (no memory, no conversion).
    ``ws.program_id(0) * BM + ws.arange(0, BM)`` gives the rows of a block."""
    return _dispatch("arange", start, end)


def expand_dims(x, axis):
    """A 1-D tile of N elements as (1, N) (``axis`` 0, same as ``x[None, :]``) or (N, 1)
    (``axis`` 1 or -1, same as ``x[:, None]``). On the GPU the same registers: (N, 1) is
    the transposed layout of (1, N), no data moves."""
    return _dispatch("expand_dims", x, axis)


def squeeze(x, axis):
    """``x`` without its size-1 ``axis`` (NumPy's ``squeeze``): (1, N) -> (N,) for axis 0,
    (M, 1) -> (M,) for axis 1, a (1,) tile -> its one element (a scalar). On the GPU the
    same registers (the inverse of :func:`expand_dims`)."""
    return _dispatch("squeeze", x, axis)


def broadcast_to(x, shape):
    """``x`` (a tile) repeated to ``shape`` (a tuple of compile-time ints) by NumPy's
    broadcasting rules. On the GPU a register selection when ``x`` is held as the
    result's row / column vector (the layouts pass arranges it)."""
    return _dispatch("broadcast_to", x, shape)


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
