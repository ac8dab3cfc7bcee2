"""Index tiles and masks for the generator (feature ``masks``): ``ws.arange`` index
vectors placed with ``[:, None]`` / ``[None, :]`` or ``ws.expand_dims``, compared with an
array extent or a literal and combined with ``&`` / ``|``; used as the ``mask`` (and
``other``) of loads, the ``mask`` of stores and the condition of ``ws.where``. Index
values are exact on both sides, so a mask never flips between the GPU and the
interpreter.
"""


def offsets_of(src):
    """The per-dimension offset expressions of an offsets tuple's source ``"(a, b)"``."""
    return [p.strip() for p in src.strip()[1:-1].split(",") if p.strip()]


def index(g, origin, extent, axis, ndim):
    """Source of ``origin + [0, extent)`` along ``axis``, shaped to broadcast onto an
    ``ndim``-D tile (``origin`` None: local indices)."""
    ar = f"ws.arange(0, {g.dim_src(extent)})"
    src = ar if origin in (None, "0") else f"({origin} + {ar})"
    if ndim == 1:
        return src
    if g.chance(0.3):
        return f"ws.expand_dims({src}, {1 if axis == 0 else 0})"
    return f"{src}[:, None]" if axis == 0 else f"{src}[None, :]"


def _term(g, shape, origins, array, axis):
    idx = index(g, origins[axis] if origins else None, shape[axis], axis, len(shape))
    form = g.pick(("edge", "cut", "from"), (2, 2, 1) if array else (0, 2, 1))
    if form == "edge":
        return f"({idx} < {array}.shape[{axis}])"
    if form == "cut":
        return f"({idx} < {g.randint(1, max(1, shape[axis] - 1))})"
    return f"({idx} >= {g.randint(1, max(1, shape[axis] // 2))})"


def mask(g, shape, origins=None, array=None):
    """Source of a boolean mask broadcastable to ``shape``: one or two comparisons of
    index vectors (``origins``: the tile's offsets, else local indices; ``array``: an
    array whose extents the indices may be compared with). None when every axis of
    ``shape`` has extent 1."""
    axes = [a for a, n in enumerate(shape) if n > 1]
    if not axes:
        return None
    first = _term(g, shape, origins, array, g.pick(axes))
    if not g.chance(0.4):
        return first
    return f"({first} {g.pick(('&', '|'))} {_term(g, shape, origins, array, g.pick(axes))})"


def masked_load(g, spec, offsets, shape):
    """``(mask=..., other=...)`` keywords for a load of ``spec`` at ``offsets`` (or "" for
    an unmasked load) and the extra value the loaded tile may hold (``other``)."""
    if "masks" not in g.features or not g.chance(0.3):
        return "", 0.0
    m = mask(g, shape, offsets_of(offsets), spec.name)
    if m is None:
        return "", 0.0
    if spec.dtype.startswith("int"):
        other = g.pick((0, -1, 7, int(spec.lo)))
    else:
        other = g.pick((0.0, 0.5, -1.0, spec.lo, spec.hi))
    return (f", mask={m}" + (f", other={other!r}" if other or g.chance(0.3) else ""),
            float(other))


def masked_store(g, shape, offsets, array):
    """``, mask=...`` for a store of a ``shape`` tile at ``offsets`` (or "")."""
    if "masks" not in g.features or not g.chance(0.25):
        return ""
    m = mask(g, shape, offsets_of(offsets), array)
    return f", mask={m}" if m is not None else ""
