"""Expressions of the generator: :class:`Node` (source text and interval), tiles a block
may load (:class:`Loadable`) and :class:`Gen`, the random state and the emitted lines of
one program, with a random expression of any shape and dtype (:meth:`Gen.ex`).
"""
import functools
import math

import numpy as np

from . import intervals as iv
from . import masks
from .intervals import Iv
from .program import ArraySpec

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("int32", "int64")
DOT_DTYPES = ("float16", "bfloat16")
#: magnitude past which a float expression is scaled back by a power of two
LIMIT = 64.0
#: magnitude of float values converted to ints; of small int operands
ILIMIT = 4096
#: magnitude an integer expression stays below (fp16 holds it)
IMAX = 32768
#: optional features: language ops that may or may not exist / lower on the GPU yet
OPTIONAL = ("sqrt", "rsqrt", "abs", "minimum", "sigmoid", "tanh", "gelu", "fma", "where",
            "int_maximum", "odd_pitch", "masks", "min", "argmax")
SMEM_BUDGET = {"9.0a": 200 * 1024, "8.0": 140 * 1024}
FAMILIES = (("ew", 3), ("ew_loop", 3), ("vec", 1.5), ("gemm", 3), ("attn", 2))
FLOAT_RANGES = ((-1.0, 1.0), (-2.0, 2.0), (-4.0, 4.0), (0.25, 2.0), (-8.0, 8.0))
INT_RANGES = ((-100, 100), (-1000, 1000), (0, 50))
SCALARS = (0.5, 1.25, -0.75, 2.0, 3.0, 0.1, -1.5)


class Node:
    """An expression: its source text (parenthesised where it is not atomic) and the
    abstract value of the generator's declared input ranges."""
    __slots__ = ("src", "val")

    def __init__(self, src, val):
        self.src, self.val = src, val

    @property
    def dtype(self):
        return self.val.dtype

    @property
    def shape(self):
        return self.val.shape


class Loadable:
    """A tile the current block may load: ``make()`` emits the load once and gives its
    Node (later uses reuse the variable)."""

    def __init__(self, gen, array, offsets, shape):
        self.gen, self.array, self.offsets, self.shape = gen, array, offsets, tuple(shape)
        self.node = None

    def make(self):
        if self.node is None:
            spec = self.gen.spec(self.array)
            var = self.gen.fresh("x")
            kw, other = masks.masked_load(self.gen, spec, self.offsets, self.shape)
            self.gen.emit(f"{var} = ws.load({self.array}, {self.offsets}, "
                          f"{self.gen.shape_src(self.shape)}{kw})")
            lo, hi = min(spec.lo, 0.0, other), max(spec.hi, 0.0, other)   # padding: 0, other
            self.node = Node(var, Iv(spec.dtype, self.shape, lo, hi))
            self.gen.env[var] = self.node
        return self.node


class Gen:
    def __init__(self, seed, features):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.features = set(features)
        self.lines, self.indent = [], 1
        self.arrays, self.scalars, self.constexprs = [], {}, {}
        self.env, self.loadables = {}, []
        self.counter = 0
        self.notes = []
        #: no reductions along axis 0 (dot programs split over 2 consumer groups by rows)
        self.rows_only = False

    # -- randomness --
    def pick(self, items, weights=None):
        items = list(items)
        if weights is None:
            return items[int(self.rng.integers(len(items)))]
        w = np.asarray(weights, float)
        return items[int(self.rng.choice(len(items), p=w / w.sum()))]

    def chance(self, p):
        return bool(self.rng.random() < p)

    def randint(self, lo, hi):
        """An int in [lo, hi]."""
        return int(self.rng.integers(lo, hi + 1))

    # -- emitting --
    def emit(self, line):
        self.lines.append("    " * self.indent + line)

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def bind(self, node, prefix="t"):
        var = self.fresh(prefix)
        self.emit(f"{var} = {node.src}")
        out = Node(var, node.val)
        self.env[var] = out
        return out

    def spec(self, name):
        return next(a for a in self.arrays if a.name == name)

    def array(self, prefix, shape, dtype, role="in", view=None, rng_range=None):
        name = self.fresh(prefix) if prefix not in ("out",) else f"out{len(self.arrays)}"
        if rng_range is None:
            rng_range = self.pick(INT_RANGES if dtype in INT_DTYPES else FLOAT_RANGES)
        if view is None:
            view = "contig"
            if role == "in" and len(shape) == 2 and self.chance(0.3):
                view = self.pick(("pitch16", "pitch4", "T"))
        self.arrays.append(ArraySpec(name, tuple(shape), dtype, role, float(rng_range[0]),
                                     float(rng_range[1]), view))
        return name

    def scalar(self, value):
        name = f"s{len(self.scalars)}"
        self.scalars[name] = value
        return name

    def dim_src(self, n):
        """A tile extent's source: the constexpr of that value, else the literal."""
        return next((k for k, v in self.constexprs.items() if v == n), str(n))

    def shape_src(self, shape):
        parts = [self.dim_src(s) for s in shape]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    def dt(self, name):
        return f"ws.{name}"

    # -- reductions spelled for this language version --
    def red(self, op, src, axis):
        """``ws.<op>(src, axis)`` keeping the reduced axis: ``keepdims=True`` where the
        language's reductions take it (NumPy's semantics, the axis dropped by default),
        else the older form, which always keeps it."""
        if _reductions_take_keepdims():
            return f"ws.{op}({src}, {axis}, keepdims=True)"
        return f"ws.{op}({src}, {axis})"

    # -- expression helpers ----------------------------------------------------------
    def cast(self, node, dt):
        if node.dtype == dt:
            return node
        src = (f"ws.astype({node.src}, {self.dt(dt)})" if self.chance(0.5)
               else f"{node.src}.astype({self.dt(dt)})")
        return Node(src, iv.astype(node.val, dt))

    def fit(self, node, limit=LIMIT):
        """A float node scaled back by a power of two when it could exceed ``limit``."""
        if node.dtype not in FLOAT_DTYPES or not node.val.mag > limit:
            return node
        if math.isinf(node.val.mag):
            raise Retry("unbounded value")
        k = max(1, math.ceil(math.log2(node.val.mag / limit)))
        c = 2.0 ** -k
        return Node(f"({node.src} * {c!r})", iv.mul(node.val, c))

    def literal(self, dt):
        if dt in INT_DTYPES:
            return self.pick((2, 3, -1, 5, 1))
        return self.pick(SCALARS)

    def scalar_operand(self, dt):
        """(source, value): a literal, or a runtime scalar argument."""
        if dt in FLOAT_DTYPES and self.chance(0.3):
            if not any(isinstance(v, float) for v in self.scalars.values()) or self.chance(0.3):
                name = self.scalar(self.pick((0.75, -1.5, 2.0, 0.3)))
            else:
                name = next(k for k, v in self.scalars.items() if isinstance(v, float))
            return name, self.scalars[name]
        if dt in INT_DTYPES and self.chance(0.2):
            name = self.scalar(self.pick((3, -2, 7)))
            return name, self.scalars[name]
        v = self.literal(dt)
        return repr(v), v

    # -- leaves ------------------------------------------------------------------------
    def leaf(self, shape, dt):
        """A loaded tile (a fresh load first), a bound value, the transpose of one, or a
        constant, converted to ``dt``."""
        shape = tuple(shape)
        fresh = [ld for ld in self.loadables if ld.shape == shape and ld.node is None]
        known = [n for n in self.env.values() if n.shape == shape]
        rev = [n for n in self.env.values()
               if len(shape) == 2 and shape[0] != shape[1] and n.shape == shape[::-1]]
        if fresh and (not known or self.chance(0.7)):
            node = self.pick(fresh).make()
        elif known and (not rev or self.chance(0.85)):
            node = self.pick(known)
        elif rev:
            r = self.pick(rev)
            node = Node(f"ws.trans({r.src})", iv.trans(r.val))
        else:
            v = self.literal(dt)
            return Node(f"ws.full({self.shape_src(shape)}, {v!r}, {self.dt(dt)})",
                        iv.full(shape, v, dt))
        if dt in INT_DTYPES and node.dtype in FLOAT_DTYPES:
            node = self.fit(node, ILIMIT)
        return self.cast(node, dt)

    # -- expressions -------------------------------------------------------------------
    def ex(self, shape, dt, depth):
        """A random expression of ``shape`` and dtype ``dt``."""
        shape = tuple(shape)
        if depth <= 0 or self.chance(0.15):
            return self.leaf(shape, dt)
        if dt in INT_DTYPES:
            return self.ex_int(shape, dt, depth)
        ops = [("neg", 0.6), ("scalar", 3), ("binary", 4), ("maximum", 1.5), ("div", 1.2),
               ("exp", 1.5), ("log", 0.8), ("bcast", 2.5), ("reduce", 2), ("cast", 1.2)]
        if len(shape) == 2:
            ops.append(("trans", 0.8))
        for name, w in (("sqrt", 0.5), ("rsqrt", 0.4), ("abs", 0.4), ("minimum", 0.8),
                        ("sigmoid", 0.5), ("tanh", 0.5), ("gelu", 0.4), ("fma", 0.6),
                        ("where", 1.0)):
            if name in self.features:
                ops.append((name, w))
        op = self.pick([o for o, _ in ops], [w for _, w in ops])
        return self.fit(getattr(self, f"op_{op}")(shape, dt, depth))

    def sub(self, shape, dt, depth):
        return self.ex(shape, dt, depth - 1)

    def op_neg(self, shape, dt, depth):
        a = self.sub(shape, dt, depth)
        return Node(f"(-{a.src})", iv.neg(a.val))

    def op_scalar(self, shape, dt, depth):
        a = self.sub(shape, dt, depth)
        src, v = self.scalar_operand(dt)
        form = self.pick(("mul", "add", "rsub", "mul"))
        if form == "mul":
            return Node(f"({a.src} * {src})", iv.mul(a.val, v))
        if form == "add":
            return Node(f"({a.src} + {src})", iv.add(a.val, v))
        return Node(f"({src} - {a.src})", iv.sub(v, a.val))

    def op_binary(self, shape, dt, depth):
        a, b = self.sub(shape, dt, depth), self.sub(shape, dt, depth)
        op = self.pick("+-*")
        rule = {"+": iv.add, "-": iv.sub, "*": iv.mul}[op]
        return Node(f"({a.src} {op} {b.src})", rule(a.val, b.val))

    def op_maximum(self, shape, dt, depth):
        a = self.sub(shape, dt, depth)
        if self.chance(0.4):
            c = self.pick((0.0, -0.5, 1.0))
            return Node(f"ws.maximum({a.src}, {c!r})", iv.maximum(a.val, c))
        b = self.sub(shape, dt, depth)
        return Node(f"ws.maximum({a.src}, {b.src})", iv.maximum(a.val, b.val))

    def op_minimum(self, shape, dt, depth):
        a, b = self.sub(shape, dt, depth), self.sub(shape, dt, depth)
        return Node(f"ws.minimum({a.src}, {b.src})", iv.minimum(a.val, b.val))

    def positive(self, shape, dt, depth, floor=0.25):
        """An expression >= ``floor`` > 0 (a denominator, a log argument)."""
        form = self.pick(("square", "exp", "relu"))
        a = self.fit(self.sub(shape, dt, depth), 4.0 if form == "square" else LIMIT)
        if form == "square":
            return Node(f"({a.src} * {a.src} + 1.0)", iv.add(iv.mul(a.val, a.val), 1.0))
        if form == "exp":
            e = self.fit(a, 2.0)
            return Node(f"ws.exp({e.src})", iv.exp(e.val))
        return Node(f"(ws.maximum({a.src}, 0.0) + 1.0)", iv.add(iv.maximum(a.val, 0.0), 1.0))

    def op_div(self, shape, dt, depth):
        a = self.sub(shape, dt, depth)
        if self.chance(0.3):
            c = self.pick((0.75, -1.25, 3.0))
            return Node(f"({a.src} / {c!r})", iv.truediv(a.val, c))
        d = self.positive(shape, dt, depth)
        return Node(f"({a.src} / {d.src})", iv.truediv(a.val, d.val))

    def op_exp(self, shape, dt, depth):
        two = self.chance(0.35)
        a = self.fit(self.sub(shape, dt, depth), 3.0 if two else 2.0)
        if two:
            return Node(f"ws.exp2({a.src})", iv.exp2(a.val))
        return Node(f"ws.exp({a.src})", iv.exp(a.val))

    def unary(self, name, a):
        """``ws.<name>(a)`` with its interval rule."""
        rule = getattr(iv, {"abs": "absolute"}.get(name, name))
        return Node(f"ws.{name}({a.src})", rule(a.val))

    def op_log(self, shape, dt, depth):
        return self.unary("log", self.positive(shape, dt, depth))

    def op_sqrt(self, shape, dt, depth):
        return self.unary("sqrt", self.positive(shape, dt, depth))

    def op_rsqrt(self, shape, dt, depth):
        return self.unary("rsqrt", self.positive(shape, dt, depth))

    def op_abs(self, shape, dt, depth):
        return self.unary("abs", self.sub(shape, dt, depth))

    def op_sigmoid(self, shape, dt, depth):
        return self.unary("sigmoid", self.fit(self.sub(shape, dt, depth), 8.0))

    def op_tanh(self, shape, dt, depth):
        return self.unary("tanh", self.fit(self.sub(shape, dt, depth), 8.0))

    def op_gelu(self, shape, dt, depth):
        return self.unary("gelu", self.fit(self.sub(shape, dt, depth), 8.0))

    def op_fma(self, shape, dt, depth):
        a, b, c = (self.fit(self.sub(shape, dt, depth), 8.0) for _ in range(3))
        return Node(f"ws.fma({a.src}, {b.src}, {c.src})", iv.fma(a.val, b.val, c.val))

    def op_where(self, shape, dt, depth):
        # the condition compares exact values (a leaf, or indices), so both sides pick
        # the same branch
        cond_src = masks.mask(self, shape) if "masks" in self.features and \
            self.chance(0.4) else None
        if cond_src is None:
            x = self.leaf(shape, dt)
            c = self.pick((0.0, 0.5, -0.25))
            cond_src = f"{x.src} {self.pick(('<', '>', '<=', '>='))} {c!r}"
        a, b = self.sub(shape, dt, depth), self.sub(shape, dt, depth)
        if self.chance(0.2):       # a scalar branch
            c = self.literal(dt)
            b = Node(repr(c), iv.full((), c, dt))
        cond = Iv("bool", shape, 0.0, 1.0)
        return Node(f"ws.where({cond_src}, {a.src}, {b.src})", iv.where(cond, a.val, b.val))

    def op_cast(self, shape, dt, depth):
        other = self.pick([d for d in FLOAT_DTYPES + INT_DTYPES if d != dt])
        a = self.sub(shape, other, depth)
        if a.dtype in INT_DTYPES and a.val.mag > 60000:
            return self.leaf(shape, dt)
        return self.cast(a, dt)

    def op_trans(self, shape, dt, depth):
        a = self.sub(shape[::-1], dt, depth)
        return Node(f"ws.trans({a.src})", iv.trans(a.val))

    def vector_shapes(self, shape):
        """(vector shape, reduced axis or None) that broadcast onto ``shape``."""
        if len(shape) == 1:
            return [((1,), 0)]
        out = [((shape[0], 1), 1)] + ([] if self.rows_only else [((1, shape[1]), 0)])
        out += [((shape[1],), None)] if any(ld.shape == (shape[1],) for ld in self.loadables) \
            else []
        return out

    def vector(self, shape, dt, depth):
        """A vector broadcasting onto ``shape``: a loaded one, a reduction, or math on one."""
        vshape, axis = self.pick(self.vector_shapes(shape))
        loads = [ld for ld in self.loadables if ld.shape == vshape] + \
            [n for n in self.env.values() if n.shape == vshape]
        if axis is None or (loads and self.chance(0.4)):
            node = self.pick(loads)
            node = node.make() if isinstance(node, Loadable) else node
            node = self.cast(node, dt)
        else:
            src_dt = dt if self.chance(0.7) else self.pick(FLOAT_DTYPES)
            t = self.fit(self.sub(shape, src_dt, depth), 8.0)
            op, rule = self.reduction()
            node = self.cast(Node(self.red(op, t.src, axis), rule(t.val, axis)), dt)
        if self.chance(0.25):
            e = self.fit(node, 2.0)
            node = Node(f"ws.exp({e.src})", iv.exp(e.val))
        return self.fit(node)

    def op_bcast(self, shape, dt, depth):
        a = self.sub(shape, dt, depth)
        v = self.vector(shape, dt, depth)
        if "masks" in self.features and self.chance(0.2):      # explicit broadcasting
            v = Node(f"ws.broadcast_to({v.src}, {self.shape_src(shape)})",
                     Iv(v.dtype, shape, v.val.lo, v.val.hi))
        op = self.pick(("+", "-", "*", "max", "/"))
        if op == "max":
            return Node(f"ws.maximum({a.src}, {v.src})", iv.maximum(a.val, v.val))
        if op == "/":
            if not v.val.lo > 0.1:
                v = Node(f"({v.src} * {v.src} + 1.0)", iv.add(iv.mul(v.val, v.val), 1.0))
            return Node(f"({a.src} / {v.src})", iv.truediv(a.val, v.val))
        rule = {"+": iv.add, "-": iv.sub, "*": iv.mul}[op]
        if self.chance(0.3):       # vector first: broadcasting either way round
            return Node(f"({v.src} {op} {a.src})", rule(v.val, a.val))
        return Node(f"({a.src} {op} {v.src})", rule(a.val, v.val))

    def op_reduce(self, shape, dt, depth):
        """Softmax-like forms: a bound tile minus its max (or mean) along an axis, the
        exponential of that, normalised by its sum."""
        axis = self.axis(shape)
        t = self.bind(self.fit(self.sub(shape, dt, depth), 2.0 if self.chance(0.5) else 8.0))
        form = self.pick(("sub_max", "sub_mean", "softmax", "softmax"))
        if form == "sub_mean":
            c = 1.0 / shape[axis]
            mean = Node(f"({self.red('sum', t.src, axis)} * {c!r})",
                        iv.mul(iv.reduce_sum(t.val, axis), c))
            mean = self.cast(mean, dt)
            return Node(f"({t.src} - {mean.src})", iv.sub(t.val, mean.val))
        mx = iv.reduce_max(t.val, axis)
        d = Node(f"({t.src} - {self.red('max', t.src, axis)})", iv.sub(t.val, mx))
        if form == "sub_max":
            return d
        d = self.fit(d, 4.0)
        e = self.bind(Node(f"ws.exp({d.src})", iv.exp(d.val)), "p")
        s = iv.reduce_sum(e.val, axis)
        out = iv.truediv(e.val, iv.astype(s, dt) if s.dtype != dt else s)
        ssrc = self.red("sum", e.src, axis)
        if s.dtype != dt:
            ssrc = f"{ssrc}.astype({self.dt(dt)})"
        return Node(f"({e.src} / {ssrc})", out)

    def reduction(self):
        """(op, interval rule) of a random reduction: sum, max, or min (a feature)."""
        ops = ("sum", "max") + (("min",) if "min" in self.features else ())
        op = self.pick(ops)
        return op, {"sum": iv.reduce_sum, "max": iv.reduce_max, "min": iv.reduce_min}[op]

    def axis(self, shape):
        """A reduction axis of ``shape`` (the last one only when :attr:`rows_only`)."""
        return len(shape) - 1 if self.rows_only else self.randint(0, len(shape) - 1)

    def using(self, node, var):
        """``node``, made to read ``var`` (an accumulator) if it does not already."""
        import re
        if re.search(rf"\b{var.src}\b", node.src):
            return node
        v = self.cast(var, node.dtype)
        if self.chance(0.5) and node.dtype in FLOAT_DTYPES:
            return self.fit(Node(f"ws.maximum({node.src}, {v.src})", iv.maximum(node.val, v.val)))
        return self.fit(Node(f"({node.src} + {v.src})", iv.add(node.val, v.val)))

    # -- integers ----------------------------------------------------------------------
    def ex_int(self, shape, dt, depth):
        ops = [("neg", 0.5), ("scalar", 2), ("binary", 3), ("bcast", 1.5), ("from_float", 1.5)]
        if len(shape) == 2:
            ops.append(("trans", 0.5))
        if "int_maximum" in self.features:
            ops.append(("maximum", 1))
        op = self.pick([o for o, _ in ops], [w for _, w in ops])
        if op == "neg":
            a = self.sub(shape, dt, depth)
            return Node(f"(-{a.src})", iv.neg(a.val))
        if op == "scalar":
            a = self.sub(shape, dt, depth)
            src, v = self.scalar_operand(dt)
            if a.val.mag * abs(v) <= ILIMIT and self.chance(0.5):
                return Node(f"({a.src} * {src})", iv.mul(a.val, v))
            return Node(f"({a.src} + {src})", iv.add(a.val, v))
        if op in ("binary", "maximum"):
            a, b = self.sub(shape, dt, depth), self.sub(shape, dt, depth)
            if op == "maximum":
                return Node(f"ws.maximum({a.src}, {b.src})", iv.maximum(a.val, b.val))
            sym = self.pick("+-*")
            if sym == "*" and a.val.mag * b.val.mag > IMAX:
                sym = "-"
            rule = {"+": iv.add, "-": iv.sub, "*": iv.mul}[sym]
            return self.int_fit(Node(f"({a.src} {sym} {b.src})", rule(a.val, b.val)), a)
        if op == "bcast":
            a = self.sub(shape, dt, depth)
            axis = self.axis(shape)
            t = self.sub(shape, dt, depth)
            red = iv.reduce_sum(t.val, axis)
            if red.mag > IMAX:
                return a
            return self.int_fit(Node(f"({a.src} + {self.red('sum', t.src, axis)})",
                                     iv.add(a.val, red)), a)
        if op == "trans":
            a = self.sub(shape[::-1], dt, depth)
            return Node(f"ws.trans({a.src})", iv.trans(a.val))
        f = self.fit(self.ex(shape, self.pick(FLOAT_DTYPES), depth - 1), 1000.0)
        return self.cast(f, dt)

    def int_fit(self, node, fallback):
        return node if node.val.mag <= IMAX else fallback

    def vector_of(self, shape, axis, dt):
        """A reduction along ``axis`` of a fresh expression (a row / column statistic)."""
        t = self.fit(self.ex(shape, dt if dt in FLOAT_DTYPES else "float32", 2), 8.0)
        op, rule = self.reduction()
        return Node(self.red(op, t.src, axis), rule(t.val, axis))

    # -- statements --------------------------------------------------------------------
    def compute(self, shape, dt, depth=None):
        """A few bound intermediates, then the final expression (not bound)."""
        for _ in range(self.randint(0, 2)):
            self.bind(self.ex(shape, self.pick((dt, dt, "float32")), self.randint(1, 2)))
        return self.ex(shape, dt, depth if depth is not None else self.randint(1, 3))

    def store(self, array, offsets, node):
        kw = masks.masked_store(self, node.shape, offsets, array)
        self.emit(f"ws.store({array}, {offsets}, {node.src}{kw})")


@functools.lru_cache(maxsize=None)
def _reductions_take_keepdims():
    import inspect
    from ..language import core
    return "keepdims" in inspect.signature(core.max).parameters


class Retry(Exception):
    """The random choices led somewhere the generator does not go: draw again."""


