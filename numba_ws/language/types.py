"""Numba types of the tile language.

Before the warp-specialization stage a tile has an abstract :class:`TileType` (dtype,
shape): it is typed, never lowered. The stage rewrites every tile op into per-warp-group
code whose values have concrete types: :class:`FragType` (a register fragment, one
UniTuple-like LLVM aggregate per thread) and :class:`SmemTileType` (a shared-memory tile:
a 32-bit shared address plus a compile-time layout).
"""
from numba.cuda import types
from llvmlite import ir as llvm_ir
from numba.cuda.datamodel import models
from numba.cuda.extending import typeof_impl, register_model

from .dtypes import DType, from_numba


class TileType(types.Type):
    """Abstract tile: ``dtype`` a Numba scalar type, ``shape`` a tuple of ints."""

    def __init__(self, dtype, shape):
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        super().__init__(name=f"Tile[{dtype}, {'x'.join(map(str, self.shape))}]")

    @property
    def ndim(self):
        return len(self.shape)


class FragType(types.Type):
    """A register tile held by one warp group: ``dtype``, tile ``shape`` (1-D or 2-D) and
    a :class:`numba_ws.codegen.layouts.Layout` of ``layouts.shape2d(shape)``.

    Its value is an LLVM aggregate of ``count = layout.count`` scalars per thread, held in
    SSA values (constant indices only). Without ``layout``: the wgmma accumulator layout
    for a (rows % 64, cols % 8) tile, its row-vector slice for (rows, 1).
    Types compare by (dtype, shape, layout content), so two layouts built differently but
    holding the same elements in the same registers are one type.
    """

    def __init__(self, dtype, shape, layout=None):
        from ..codegen import layouts
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        if layout is None:
            layout = default_frag_layout(self.shape)
        if layout.shape != layouts.shape2d(self.shape):
            raise ValueError(f"layout {layout.name} does not fit a {self.shape} tile")
        self.layout = layout
        self.count = layout.count
        super().__init__(name=f"Frag[{dtype}, {'x'.join(map(str, self.shape))}, "
                              f"{layout.name}]")

    @property
    def key(self):
        return self.dtype, self.shape, self.layout.key

    def __len__(self):
        return self.count


def default_frag_layout(shape):
    """The accumulator layout of a (rows, cols) tile, or its row slice for (rows, 1)."""
    from ..codegen import layouts
    rows = shape[0]
    if len(shape) == 2 and shape[1] == 1:
        return layouts.slice_of(layouts.acc(rows, 8), 1)
    if len(shape) != 2:
        raise ValueError(f"a {shape} register tile needs an explicit layout")
    return layouts.acc(*shape)


class SmemTileType(types.Type):
    """A tile in shared memory: a uint32 shared-window address; the layout is in the type.

    ``layout`` is ``(rows, cols, transposed)`` of the part as stored (lower_loads);
    ``swizzle`` the part's :class:`numba_ws.codegen.smem_tiles.PartLayout` when it is not
    the swizzle that ``codegen.swizzle.swizzle_for(cols * itemsize)`` gives (None: that
    one, which is what the tensor cores read).
    """

    def __init__(self, dtype, shape, layout, swizzle=None):
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        self.layout = layout
        self.swizzle = swizzle
        sw = "" if swizzle is None else f", sw{swizzle}"
        super().__init__(name=f"Smem[{dtype}, {'x'.join(map(str, self.shape))}, {layout}{sw}]")


class DTypeType(types.Literal, types.Dummy):
    """The type of a ``ws.float16``-like global: a literal carrying the DType's name."""

    def __init__(self, name):
        self._literal_init(name)
        super(types.Literal, self).__init__(name=f"ws.{name}")

    @property
    def dtype(self):
        from .dtypes import from_name
        return from_name(self.literal_value).numba


class LayoutType(types.Dummy):
    """The type of a :class:`numba_ws.codegen.layouts.Layout` passed to an intrinsic as an
    IR global: the layout is part of the type (compile-time only, no value)."""

    def __init__(self, layout):
        self.layout = layout
        super().__init__(name=f"ws.layout[{layout.name}]")

    @property
    def key(self):
        return self.layout.key


def _register_layout_typeof():
    from ..codegen.layouts import Layout

    @typeof_impl.register(Layout)
    def _typeof_layout(val, c):
        return LayoutType(val)


_register_layout_typeof()


@typeof_impl.register(DType)
def _typeof_dtype(val, c):
    return DTypeType(val.name)


register_model(TileType)(models.OpaqueModel)
register_model(DTypeType)(models.OpaqueModel)


@register_model(SmemTileType)
class SmemTileModel(models.PrimitiveModel):
    """A shared-memory tile is its uint32 shared-window address."""

    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, llvm_ir.IntType(32))


@register_model(FragType)
class FragModel(models.UniTupleModel):
    """A fragment is an LLVM array of ``count`` scalars held in SSA values."""


def numba_dtype_name(ty):
    d = from_numba(ty)
    return d.name if d is not None else str(ty)
