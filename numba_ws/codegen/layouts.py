"""Register layouts: which thread of a warp group holds which element of a register tile.

A register tile lives in the 128 threads of one warp group (lane ``l`` 0..31 of warp
``w`` 0..3 of the group). Its layout maps (register ``i``, lane, warp) to the tile
coordinate (row, column) held there::

    coord(i, l, w) = regs[i] + sum_b bit_b(l) * lanes[b] + sum_b bit_b(w) * warps[b]

Every lane / warp *basis* is a power of two along one dimension, or ``(0, 0)``: threads
that differ only in such a bit hold the same elements (*replicas*; a store writes each
element once, from the replica whose replica bits are 0). ``regs`` is an explicit list
(so register counts need not be powers of two: the wgmma accumulator of N = 24 columns
has 12 registers), distinct per thread. The thread part of every coordinate is a sum of
distinct powers of two, so codegen computes it once (shifts and ors of ``tid``) and adds
a compile-time ``regs[i]`` per register: no local memory, no run-time indexing.

This is the layout algebra of design.md §6, written for numba_ws (Triton's
``LinearLayout`` and CuTe's layouts are the references studied). The families:

- :func:`acc` — the ``wgmma.mma_async m64nNk16`` f32 accumulator (PTX ISA 9.7.15.5.1.1.1,
  Figure 149; codegen/fragments.py has the derivation): per 64-row block ``mi``, register
  ``4j + 2h + c`` of lane ``l`` of warp ``w`` is row ``64 mi + 16 w + l // 4 + 8 h``,
  column ``8 j + 2 (l % 4) + c``. The mma.sync ``m16n8k16`` C/D fragment per warp is the
  same map (codegen/mma_sync.py), and so are the A operands of register-A wgmma and of
  mma.sync (codegen/wgmma_rs.py), for a (rows, K) fp16/bf16 tile: one layout serves the
  tensor cores on sm_80 and sm_90a.
- :func:`blocked` — for element-wise and reduction work: each thread holds ``vec``
  contiguous columns (16 bytes of the tile's narrowest dtype: one ``ld.shared.v4`` /
  ``st.global.v4``), lanes then warps spread over columns and rows, what is left repeats
  in registers.
- :func:`slice_of` — a row vector (R, 1) or a column vector (1, C): what reducing a tile
  along an axis leaves, in the threads that held it; it broadcasts back onto the parent
  by register selection (:func:`broadcast_index`).
- :func:`transposed` — ``ws.trans`` of a register tile: the same registers, coordinates
  swapped (free).

1-D tiles of N elements use 2-D layouts of shape (1, N) (NumPy broadcasting aligns a
(N,) vector with the last axis of a (R, N) tile). Layouts compare by content
(:attr:`Layout.key`), not by name: ``slice_of(acc(128, 64), 1) == slice_of(acc(128,
128), 1)``, which is why attention's row statistics combine across its two dots.
"""

LANES = 32
WARPS = 4
THREADS = LANES * WARPS
LANE_BITS = 5
WARP_BITS = 2
ZERO = (0, 0)


def _pow2(n):
    return n > 0 and n & (n - 1) == 0


def _log2(n):
    return n.bit_length() - 1


class Layout:
    """A register layout of a 2-D ``shape`` over one warp group (module docstring).

    ``kind`` names how it was made (for dumps and errors); equality and hashing use
    :attr:`key` = (shape, regs, lanes, warps) only.
    """

    __slots__ = ("kind", "shape", "regs", "lanes", "warps", "key")

    def __init__(self, kind, shape, regs, lanes, warps):
        self.kind = kind
        self.shape = tuple(int(s) for s in shape)
        self.regs = tuple((int(r), int(c)) for r, c in regs)
        self.lanes = tuple((int(r), int(c)) for r, c in lanes)
        self.warps = tuple((int(r), int(c)) for r, c in warps)
        if len(self.shape) != 2 or len(self.lanes) != LANE_BITS or len(self.warps) != WARP_BITS:
            raise ValueError(f"layout {kind}: 2-D shape, {LANE_BITS} lane and {WARP_BITS} warp "
                             "bases expected")
        for basis in self.lanes + self.warps:
            if basis != ZERO and (min(basis) != 0 or not _pow2(max(basis))):
                raise ValueError(f"layout {kind}: basis {basis} is not a power of two along "
                                 "one dimension")
        self.key = (self.shape, self.regs, self.lanes, self.warps)

    def __eq__(self, other):
        return isinstance(other, Layout) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"Layout({self.name})"

    @property
    def name(self):
        return f"{self.kind}[{self.shape[0]}x{self.shape[1]}]"

    @property
    def count(self):
        """Registers per thread."""
        return len(self.regs)

    # -- host-side model (the tests check codegen against it) ------------------------
    def thread_offset(self, lane, warp):
        """(row, col) that thread (lane, warp) adds to every ``regs[i]``."""
        r = c = 0
        for b, (dr, dc) in enumerate(self.lanes):
            if lane >> b & 1:
                r, c = r + dr, c + dc
        for b, (dr, dc) in enumerate(self.warps):
            if warp >> b & 1:
                r, c = r + dr, c + dc
        return r, c

    def coord(self, i, lane, warp):
        tr, tc = self.thread_offset(lane, warp)
        return self.regs[i][0] + tr, self.regs[i][1] + tc

    @property
    def replica_lane_mask(self):
        """Lane bits whose basis is (0, 0): lanes differing there hold the same values."""
        return sum(1 << b for b, basis in enumerate(self.lanes) if basis == ZERO)

    @property
    def replica_warp_mask(self):
        return sum(1 << b for b, basis in enumerate(self.warps) if basis == ZERO)

    def is_owner(self, lane, warp):
        """Whether thread (lane, warp) is the replica that writes its elements."""
        return not (lane & self.replica_lane_mask) and not (warp & self.replica_warp_mask)

    def holders(self):
        """{(row, col): [(i, lane, warp), ...]} over every register of every thread."""
        out = {}
        for warp in range(WARPS):
            for lane in range(LANES):
                for i in range(self.count):
                    out.setdefault(self.coord(i, lane, warp), []).append((i, lane, warp))
        return out

    def check(self):
        """Raise ValueError unless every element of ``shape`` is held, none outside it,
        and each thread holds distinct elements; returns self."""
        rows, cols = self.shape
        held = self.holders()
        outside = [rc for rc in held if not (0 <= rc[0] < rows and 0 <= rc[1] < cols)]
        missing = rows * cols - (len(held) - len(outside))
        if outside or missing:
            raise ValueError(f"layout {self.name}: {len(outside)} coordinates outside the "
                             f"tile, {missing} elements held by nobody")
        if len(set(self.regs)) != len(self.regs):
            raise ValueError(f"layout {self.name}: a thread holds an element twice")
        return self

    def runs(self, max_len):
        """Maximal groups of consecutive registers holding consecutive columns of one row,
        each at most ``max_len`` long and starting at a column that is a multiple of its
        length: ``[(first register, length)]`` covering every register in order. What one
        vector load or store of ``length`` elements can move."""
        out, i = [], 0
        while i < self.count:
            r, c = self.regs[i]
            n = 1
            while (n < max_len and i + n < self.count
                   and self.regs[i + n] == (r, c + n)):
                n += 1
            while n > 1 and (c % n or not _pow2(n)):
                n -= 1
            out.append((i, n))
            i += n
        return out


# -- the families -------------------------------------------------------------------

def itemsize(dtype):
    """Bytes of one element of Numba type ``dtype`` (booleans are bytes; numba-cuda's
    bfloat16 has a bitwidth but is not a types.Float)."""
    return max(1, getattr(dtype, "bitwidth", 8) // 8)


def shape2d(shape):
    """The 2-D layout shape of a tile shape: (N,) -> (1, N)."""
    shape = tuple(int(s) for s in shape)
    return (1, shape[0]) if len(shape) == 1 else shape


def acc(rows, cols):
    """The wgmma / mma.sync accumulator layout of a (rows, cols) tile: rows % 64 == 0,
    cols % 8 == 0 (register order ``mi * cols / 2 + 4 j + 2 h + c``, module docstring)."""
    if rows % 64 or cols % 8 or rows <= 0 or cols <= 0:
        raise ValueError(f"the accumulator layout needs rows % 64 == 0 and cols % 8 == 0, "
                         f"got ({rows}, {cols})")
    regs = [(64 * mi + 8 * h, 8 * j + c)
            for mi in range(rows // 64) for j in range(cols // 8)
            for h in (0, 1) for c in (0, 1)]
    lanes = [(0, 2), (0, 4), (1, 0), (2, 0), (4, 0)]
    warps = [(16, 0), (32, 0)]
    return Layout("acc", (rows, cols), regs, lanes, warps)


def fits_acc(shape):
    rows, cols = shape2d(shape)
    return rows % 64 == 0 and cols % 8 == 0


def blocked(shape, itemsize):
    """Element-wise layout of a power-of-two ``shape`` for elements of ``itemsize`` bytes.

    Each thread holds ``vec = min(cols, 16 // itemsize)`` contiguous columns; lanes cover
    columns first, then rows; warps rows first, then columns; the rest repeats in
    registers (columns first, then rows). Threads beyond the tile are replicas.
    """
    rows, cols = shape2d(shape)
    if not (_pow2(rows) and _pow2(cols)):
        raise ValueError(f"register tiles for element-wise work need power-of-two shapes, "
                         f"got ({rows}, {cols})")
    vec = min(cols, max(1, 16 // itemsize))
    reg_bases = [(0, 1 << k) for k in range(_log2(vec))]
    col, row = vec, 1
    lanes, warps = [], []
    for _ in range(LANE_BITS):
        if col < cols:
            lanes.append((0, col))
            col *= 2
        elif row < rows:
            lanes.append((row, 0))
            row *= 2
        else:
            lanes.append(ZERO)
    for _ in range(WARP_BITS):
        if row < rows:
            warps.append((row, 0))
            row *= 2
        elif col < cols:
            warps.append((0, col))
            col *= 2
        else:
            warps.append(ZERO)
    while col < cols:
        reg_bases.append((0, col))
        col *= 2
    while row < rows:
        reg_bases.append((row, 0))
        row *= 2
    regs = []
    for i in range(1 << len(reg_bases)):
        r = sum(reg_bases[b][0] for b in range(len(reg_bases)) if i >> b & 1)
        c = sum(reg_bases[b][1] for b in range(len(reg_bases)) if i >> b & 1)
        regs.append((r, c))
    return Layout(f"blocked{vec}", (rows, cols), regs, lanes, warps)


def _project(rc, axis):
    return (rc[0], 0) if axis == 1 else (0, rc[1])


def slice_of(parent, axis):
    """The layout of ``parent`` reduced along ``axis`` (0: a (1, C) column vector; 1: a
    (R, 1) row vector), held by the same threads: each thread keeps one register per
    distinct kept coordinate (first-appearance order); bases along ``axis`` become
    replicas."""
    rows, cols = parent.shape
    shape = (rows, 1) if axis == 1 else (1, cols)
    regs = list(dict.fromkeys(_project(rc, axis) for rc in parent.regs))
    lanes = [_project(b, axis) for b in parent.lanes]
    warps = [_project(b, axis) for b in parent.warps]
    return Layout(f"slice{axis}({parent.kind})", shape, regs, lanes, warps)


def broadcast_index(vec, full, axis):
    """For each register of ``full``, the register of ``vec`` holding the same row (axis
    1) or column (axis 0) in the same thread; None unless ``vec == slice_of(full, axis)``
    (then a broadcast is a compile-time register selection)."""
    if vec != slice_of(full, axis):
        return None
    index = {rc: j for j, rc in enumerate(vec.regs)}
    return [index[_project(rc, axis)] for rc in full.regs]


def transposed(layout):
    """``ws.trans`` of a register tile: the same registers, (row, col) swapped."""
    swap = lambda rc: (rc[1], rc[0])  # noqa: E731
    return Layout(f"T({layout.kind})", layout.shape[::-1], [swap(rc) for rc in layout.regs],
                  [swap(b) for b in layout.lanes], [swap(b) for b in layout.warps])


def default_for(shape, itemsize):
    """The layout a register tile gets when nothing constrains it: :func:`blocked`."""
    return blocked(shape, itemsize)
