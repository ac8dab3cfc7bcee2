"""Channel discovery for the code-partition pass (seed: 代码划分, step 1).

A channel is a group of loads (single task: the producer) of one block whose results
are read by the same set of consumer tasks and that are issued together: no statement
between two loads of a group reads a tile of the group (``k = load; s = dot(q, k);
v = load`` gives two channels, so the consumer can wait for, and release, k before v
arrives). One full/empty barrier pair and one slot hold every load of the group;
``num_buffers_warp_spec`` slots inside a loop, else 1.
Each member lists its parts (one per consumer group when the tile is split by the data
partition) and its aliases (copies, ``trans`` views, bound ``astype``), whose last use
decides when the slot is released. With ping-pong consumers the groups take turns at
the ring (``Channel.ping_pong``): one group releases each fill.
"""
from numba.cuda.core import ir
from numba.cuda.core.analysis import compute_cfg_from_blocks

from ..language.dtypes import from_numba
from .ir_tools import stmt_uses, tile_op
from .plan import Channel

PRODUCER = 0


def _loop_blocks(cfg):
    body = set()
    for loop in cfg.loops().values():
        body |= set(loop.body)
    return body


def parameter_name(func_ir, var):
    """The kernel parameter ``var`` is a copy of (through an inlined helper's argument
    copies: ``blocks_sum_v18_a = a``), else ``var``'s own name. Tensor maps and
    ``plan.array_info`` are keyed by parameter."""
    seen = set()
    while var.name not in seen:
        seen.add(var.name)
        defs = func_ir._definitions.get(var.name, [])
        if len(defs) != 1:
            break
        d = defs[0]
        if isinstance(d, ir.Arg):
            return d.name
        if not isinstance(d, ir.Var):
            break
        var = d
    return var.name


def _aliases(func_ir, typemap, root):
    """Variables that view the same shared-memory tile as ``root`` (copies, trans)."""
    names, changed = {root}, True
    while changed:
        changed = False
        for block in func_ir.blocks.values():
            for stmt in block.body:
                if not isinstance(stmt, ir.Assign) or stmt.target.name in names:
                    continue
                v = stmt.value
                src = None
                if isinstance(v, ir.Var):
                    src = v.name
                elif isinstance(v, ir.Expr) and tile_op(stmt, typemap) == "trans":
                    src = v.args[0].name
                elif isinstance(v, ir.Expr) and v.op == "getattr":
                    src = v.value.name   # ``x.astype``: the call through it reads x
                if src in names:
                    names.add(stmt.target.name)
                    changed = True
    return names


def _issued_together(block, loads, func_ir, typemap):
    """Split ``loads`` (one block, same readers) into runs in block order: a run ends
    where a statement reads a tile of it (or a view of one) before the next load."""
    wanted = {id(s) for s in loads}
    runs, run, names = [], [], set()
    for stmt in block.body:
        if id(stmt) in wanted:
            run.append(stmt)
            names |= _aliases(func_ir, typemap, stmt.target.name)
        elif run and names & stmt_uses(stmt):
            runs.append(run)
            run, names = [], set()
    return runs + ([run] if run else [])


def find_channels(plan, func_ir, typemap, error):
    cfg = compute_cfg_from_blocks(func_ir.blocks)
    looped = _loop_blocks(cfg)
    groups = {}
    for sid, op in plan.anchors.items():
        if op != "load":
            continue
        stmt, label = plan.stmts[sid]
        var = stmt.target.name
        readers = set()
        for block in func_ir.blocks.values():
            for s in block.body:
                if var in stmt_uses(s):
                    readers |= plan.tasks[id(s)]
        if PRODUCER in readers:
            raise error(f"the tile loaded into {var!r} is used by the producer (to compute "
                        "another load's address?); only consumers may read loaded tiles",
                        stmt.loc)
        groups.setdefault((label, tuple(sorted(readers))), []).append(stmt)
    channels = []
    runs = [(label, readers, run) for (label, readers), loads in groups.items()
            for run in _issued_together(func_ir.blocks[label], loads, func_ir, typemap)]
    for label, readers, loads in sorted(runs, key=lambda r: r[2][0].loc.line):
        in_loop = label in looped
        ring = plan.options.num_buffers_warp_spec if in_loop else 1
        ch = Channel(id=len(channels), loads=loads, consumers=readers, in_loop=in_loop,
                     num_slots=ring, block_label=label, arrivals=len(readers))
        if plan.ping_pong:
            if not in_loop:
                raise error(f"ping_pong=1: {loads[0].target.name} is loaded outside the "
                            "persistent tile loop; with ping-pong consumers every load must "
                            "be inside it", loads[0].loc)
            ch.ping_pong, ch.arrivals = True, 1
        for stmt in loads:
            ty = typemap[stmt.target.name]
            dim = plan.split.get(stmt.target.name)
            parts = []
            for g in (range(plan.num_consumers) if dim is not None else [0]):
                shape = list(ty.shape)
                offset = [0] * ty.ndim
                if dim is not None:
                    shape[dim] = plan.slice_size
                    offset[dim] = g * plan.slice_size
                parts.append({"shape": tuple(shape), "offset": tuple(offset)})
            ch.members.append({
                "var": stmt.target.name, "array": parameter_name(func_ir, stmt.value.args[0]),
                "dtype": from_numba(ty.dtype), "shape": ty.shape, "split_dim": dim,
                "parts": parts, "aliases": _aliases(func_ir, typemap, stmt.target.name),
                "line": stmt.loc.line})
        part_id = 0
        for member in ch.members:
            for part in member["parts"]:
                part["id"], part_id = part_id, part_id + 1
        channels.append(ch)
    return channels
