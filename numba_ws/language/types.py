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
    """Register fragment of a (rows, cols) tile held by one warp group.

    Layout (wgmma accumulator, see codegen/fragments.py): ``rows`` a multiple of 64, each
    64-row block holds cols/2 values per thread, so ``count = rows // 64 * cols // 2``.
    ``vector`` fragments (1-D over rows: a row statistic) hold 2 values per 64 rows.
    """

    def __init__(self, dtype, shape):
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        rows = self.shape[0]
        cols = self.shape[1] if len(self.shape) == 2 else 1
        if len(self.shape) == 2 and cols > 1:
            self.count = (rows // 64) * (cols // 2)
        else:
            self.count = (rows // 64) * 2
        super().__init__(name=f"Frag[{dtype}, {'x'.join(map(str, self.shape))}]")

    def __len__(self):
        return self.count


class SmemTileType(types.Type):
    """A tile in shared memory: a uint32 shared-window address; the layout is in the type.

    ``layout`` is a hashable description chosen by the lower_loads pass (box widths,
    swizzle bytes, whether the tile is K-major).
    """

    def __init__(self, dtype, shape, layout):
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        self.layout = layout
        super().__init__(name=f"Smem[{dtype}, {'x'.join(map(str, self.shape))}, {layout}]")


class DTypeType(types.Literal, types.Dummy):
    """The type of a ``ws.float16``-like global: a literal carrying the DType's name."""

    def __init__(self, name):
        self._literal_init(name)
        super(types.Literal, self).__init__(name=f"ws.{name}")

    @property
    def dtype(self):
        from .dtypes import from_name
        return from_name(self.literal_value).numba


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
