"""Random valid tile programs over every op the GPU backend lowers, one per seed.

``generate(seed, features)`` is deterministic: the same seed and feature set give the same
:class:`~numba_ws.fuzz.program.Program` (source, arrays, scalars, constexprs, options,
grid, target). Families (``Program.family``):

- ``ew``: 2-D element-wise work on (BM, BN) tiles of up to three loaded arrays, 1-D
  (BN,) / (BM, 1) / (1, BN) vectors, scalars; stores of the tile, its transpose and its
  row / column statistics.
- ``ew_loop``: a loop over the column (or row) tiles of a band with loop-carried tiles
  (``acc + t``, ``maximum``, ``acc * c + t``, row / column sums and maxima), loads before,
  inside and after the loop, optionally a store in every iteration.
- ``vec``: 1-D tiles of 1-D arrays, with 1-D reductions.
- ``gemm``: ``ws.dot`` over a K loop -- B as loaded or ``ws.trans`` of a loaded (N, K)
  tile, A loaded in the loop or once before it, or a register tile (``x * 2.0``,
  ``ws.maximum(x, 0.0)`` ...: the register-A wgmma); ``acc`` carried by the dot, added,
  scaled between dots, or a store per K step; bias / row vectors before the loop, a
  residual loaded after it, a random epilogue.
- ``attn``: ``s = dot(q, trans(k))`` then flash attention's running max / sum recurrence,
  a plain ``exp`` chain, or ``dot(dot(x, y).astype(..), w)``, with the register-A
  ``p.astype(..) @ v``.

With the optional features (:data:`OPTIONAL`, those this checkout has): ``sqrt``,
``rsqrt``, ``abs``, ``minimum``, ``sigmoid``, ``tanh``, ``gelu``, ``fma``, ``ws.where`` (on
a comparison of an exact leaf, or on an index mask; a scalar branch), ``ws.min`` beside
``sum`` / ``max``, ``argmax`` / ``argmin`` row statistics, and masks
(:mod:`numba_ws.fuzz.masks`: ``ws.arange`` index vectors, ``expand_dims`` /
``[None, :]``, comparisons combined with ``&`` / ``|``, as load masks with ``other``,
store masks and ``where`` conditions; ``ws.broadcast_to``). Axis reductions are spelled
by ``Gen.red``: ``keepdims=True`` where the language takes it.

Any of ``ew``, ``ew_loop``, ``vec`` and ``gemm`` may run as a persistent loop
``for tile in range(ws.program_id(0), n, ws.num_programs(0))`` with fewer programs than
tiles. Configurations: ``num_consumer_groups`` 1 / 2, ``num_buffers_warp_spec`` 1..4
(fewer where shared memory would not hold them), ``dot_in_flight`` for GEMMs, tile sizes,
dtypes (fp16, bf16, fp32, fp64, int32, int64), ragged array shapes, tile offsets shifted
off the tile grid (loads and stores), arrays with a wider row pitch or column-major, and
cc 9.0a or 8.0.

Validity by construction: every value's interval (:mod:`numba_ws.fuzz.intervals`, from the
declared input ranges) stays within the dtype (floats scaled back by powers of two, which
are exact, past :data:`LIMIT`; ints kept below :data:`ILIMIT`), ``exp`` arguments within
+-2 (``exp2``: +-3), ``log`` / ``sqrt`` / division arguments positive and away from 0,
integer tiles only with ``+ - *`` and integer scalars (no ``/``: NumPy gives float64),
tile operands of one dtype (the GPU does not mix), shapes powers of two (blocked
layouts) and GEMM tiles legal for wgmma / mma.sync.

``features`` names optional parts of the language (:data:`OPTIONAL`); the runner
detects which exist (:func:`numba_ws.fuzz.runner.detect_features`) and passes them in.
"""
from .exprs import FAMILIES, OPTIONAL, Gen, Retry  # noqa: F401
from .families import family_ew, family_ew_loop, family_vec
from .families_dot import family_attn, family_gemm
from .program import Program

FAMILY_FUNCS = {"ew": family_ew, "ew_loop": family_ew_loop, "vec": family_vec,
                "gemm": family_gemm, "attn": family_attn}


def _drop_dead(lines):
    """The lines without the assignments of variables nothing else reads (a dead
    ``ws.load`` is a compile error, "a producer load must have a consumer", and a load
    feeding only a dead loop-carried tile one of ws_verify), to a fixed point."""
    import re
    lines = list(lines)
    assign = re.compile(r"\s*([A-Za-z_]\w*) = ")
    while True:
        targets = {m.group(1) for line in lines if (m := assign.match(line))}
        dead = set()
        for var in targets:     # read anywhere but in its own updates (acc = acc + t)?
            word = re.compile(rf"\b{var}\b")
            if not any(word.search(line[m.end():] if (m := assign.match(line)) else line)
                       for line in lines if not (m := assign.match(line)) or m.group(1) != var):
                dead.add(var)
        lines = [line for line in lines
                 if not ((m := assign.match(line)) and m.group(1) in dead)]
        empty = [i for i, line in enumerate(lines) if line.lstrip().startswith("for ") and
                 (i + 1 == len(lines) or _indent(lines[i + 1]) <= _indent(line))]
        lines = [line for i, line in enumerate(lines) if i not in empty]
        if not dead and not empty:
            return lines


def _indent(line):
    return len(line) - len(line.lstrip())


def _source(g, name):
    params = [a.name for a in g.arrays] + list(g.scalars) + \
        [f"{k}: ws.constexpr" for k in g.constexprs]
    head = ("import math\n\nimport numba_ws as ws\n\n\n"
            f"def {name}({', '.join(params)}):\n")
    return head + "".join(line + "\n" for line in _drop_dead(g.lines))


def generate(seed, features=(), family=None, cc=None):
    """The program of ``seed`` (deterministic given ``features``); ``family`` / ``cc``
    force those choices (tests)."""
    features = tuple(sorted(f for f in features if f in OPTIONAL))
    for attempt in range(50):
        g = Gen([seed, attempt], features)
        g.options = {}
        fam = family or g.pick([f for f, _ in FAMILIES], [w for _, w in FAMILIES])
        target = cc or ("8.0" if g.chance(0.15) else "9.0a")
        try:
            grid = FAMILY_FUNCS[fam](g, target)
        except Retry:
            continue
        name = f"fuzz_{seed}"
        return Program(seed=seed, name=name, family=fam, source=_source(g, name),
                       arrays=g.arrays, scalars=g.scalars, constexprs=g.constexprs,
                       options=g.options, grid=grid, cc=target, features=features,
                       notes=g.notes)
    raise RuntimeError(f"generate({seed}): no valid program in 50 attempts")
