"""What ``kernel.partition(...)`` and ``kernel.explain(...)`` return: objects that print.

:class:`PlanView` wraps numba-cuda's compiler state after the partitioning passes (the
whole state stays reachable as ``.state``; ``.ws`` is the :class:`~numba_ws.passes.plan.Plan`,
``.func_ir`` the partitioned IR, and every other attribute is read from and written to the
state, so code written against the state keeps working). Its ``repr`` is a summary of tens of lines
(the state's own is tens of KB of typemap) and ``_repr_html_`` the same tables for
Jupyter. Everything shown is read off the plan and the partitioned IR; nothing is
recomputed:

- *tasks*: one row per warp group (0 = producer, 1..G = consumers) with its branch's entry
  block, its register limit (the ``setmaxnreg`` the registers pass put at the head of the
  branch, else the entry limit) and the anchor ops (loads, dots, stores) it runs;
- *channels*: per channel its consumers, slots x bytes, lowering (TMA / cp.async), where
  its slots and its full/empty mbarriers lie, and per member (one ``ws.load``) its array,
  tile, split and parts;
- *registers*: entry limit, producer / consumer limits and the budget they use;
- *layouts*: register tiles grouped by the layout the layouts pass chose (when it ran);
- *shared memory*: the byte ranges of slots, barriers, ping-pong turn barriers and the
  layout-conversion scratch, the staged stores' buffer (option tma_store), then the total
  the launch asks for.

:class:`Explanation` is the text ``explain()`` always returned (a ``str``, so every string
operation still works) that also renders in Jupyter and IPython.
"""
import html
from typing import NamedTuple

from .interpreter.ir_exec import stage_calls
from .passes.ir_tools import STORE_OPS
from .runtime.options import REGISTER_FILE

#: Threads per warp group.
GROUP_THREADS = 128
#: Bytes of one mbarrier; each slot has a full and an empty one.
MBARRIER_BYTES = 8


class Task(NamedTuple):
    """One warp group's clone of the kernel."""
    id: int                 # 0 producer, 1..G consumer groups
    role: str
    block: object           # entry label of its branch (None when fused)
    registers: int          # registers per thread while it runs
    setmaxnreg: str         # "dec", "inc" or "" (kept the entry limit)
    anchors: tuple          # ("load x", "dot acc.1", "store c", ...) in program order


class RegisterSplit(NamedTuple):
    entry: int              # registers per thread at launch
    producer: int
    consumers: int
    threads: int
    used: int               # registers of the whole CTA after setmaxnreg
    available: int          # threads x entry


class Region(NamedTuple):
    """A byte range of the kernel's dynamic shared memory."""
    offset: int
    bytes: int
    what: str


def target_name(cc):
    """``(9, 0, "a")`` -> ``"sm_90a"``, ``(8, 0)`` -> ``"sm_80"``."""
    return "sm_" + "".join(str(part) for part in cc)


def _plural(n, word, many=None):
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def _branch_ranges(plan):
    """task -> (first label, first label of the next clone) of its clone (consumer groups
    sharing one clone have the same range)."""
    starts = sorted(set(plan.branches.values()))
    return {task: (start, min((s for s in starts if s > start), default=float("inf")))
            for task, start in plan.branches.items()}


def _tasks_of_label(ranges, label):
    """The tasks whose clone holds block ``label`` (several for the shared consumer body)."""
    return [task for task, (lo, hi) in sorted(ranges.items()) if lo <= label < hi]


class PlanView:
    """The warp-specialization plan of one specialization (see the module docstring)."""

    def __init__(self, state):
        object.__setattr__(self, "state", state)

    # Every attribute this class does not define is numba-cuda's state's (``.ws`` the
    # Plan, ``.func_ir`` the partitioned IR, ``.typemap``, ...), read and written
    # through: the passes and the simulator can take a PlanView where they took the state.
    def __getattr__(self, name):
        if name == "state":          # not set yet (copy / unpickle): no recursion
            raise AttributeError(name)
        return getattr(self.state, name)

    def __setattr__(self, name, value):
        setattr(self.state, name, value)

    # -- the facts -------------------------------------------------------------------
    def _stage_calls_by_task(self):
        """task -> [(op name, stmt)] of the stage ops its clone calls, in IR order."""
        ranges = _branch_ranges(self.ws)
        out = {}
        for label, _, stmt, op in stage_calls(self.func_ir):
            for task in _tasks_of_label(ranges, label) or [None]:
                out.setdefault(task, []).append((op, stmt))
        return out

    def _constant_arg(self, stmt):
        value = self.func_ir.get_definition(stmt.value.args[0])
        return getattr(value, "value", None)

    def _defining_tasks(self):
        """IR variable name -> the tasks whose clone assigns it."""
        ranges = _branch_ranges(self.ws)
        out = {}
        for label, block in self.func_ir.blocks.items():
            tasks = _tasks_of_label(ranges, label)
            for stmt in block.body:
                target = getattr(stmt, "target", None)
                if tasks and hasattr(target, "name"):
                    out[target.name] = tasks
        return out

    @property
    def tasks(self):
        """One :class:`Task` per warp group, in task order."""
        plan = self.ws
        calls = self._stage_calls_by_task()
        anchors = {}
        for sid, op in plan.anchors.items():
            stmt, _ = plan.stmts[sid]
            what = stmt.value.args[0].name if op in STORE_OPS else stmt.target.name
            if what.startswith("$"):           # a temporary: name its line instead
                what = f"at line {stmt.loc.line}"
            for task in plan.tasks.get(sid, ()):
                anchors.setdefault(task, []).append((stmt.loc.line, f"{op} {what}"))
        if plan.fused:   # one warp group plays every task in turn
            everything = sorted({a for task in anchors.values() for a in task})
            anchors = {0: everything}
        ids = [0] if plan.fused else sorted(plan.branches) or sorted(anchors)
        out = []
        for task in ids:
            registers, how = plan.entry_registers, ""
            for op, stmt in calls.get(task, ()):
                if op in ("ws_reg_alloc", "ws_reg_dealloc"):
                    registers = self._constant_arg(stmt)
                    how = "inc" if op == "ws_reg_alloc" else "dec"
            role = ("every task in turn" if plan.fused else
                    "producer" if task == 0 else f"consumer {task}")
            block = min(plan.branches.values(), default=None) if plan.fused else \
                plan.branches.get(task)
            out.append(Task(task, role, block, registers, how,
                            tuple(text for _, text in sorted(anchors.get(task, ())))))
        return out

    @property
    def channels(self):
        """The plan's :class:`~numba_ws.passes.plan.Channel` objects."""
        return list(self.ws.channels)

    @property
    def registers(self):
        """The :class:`RegisterSplit` the kernel runs with."""
        plan = self.ws
        tasks = self.tasks
        producer = next((t.registers for t in tasks if t.id == 0), plan.entry_registers)
        consumers = [t.registers for t in tasks if t.id != 0]
        consumer = max(consumers, default=plan.entry_registers)
        threads = plan.num_threads
        used = GROUP_THREADS * (producer + consumer * len(consumers)) if tasks else \
            threads * plan.entry_registers
        return RegisterSplit(plan.entry_registers, producer, consumer, threads, used,
                             min(REGISTER_FILE, threads * plan.entry_registers))

    @property
    def layouts(self):
        """Register tile name (per clone, ``name__tN``) -> Layout; {} before the layouts pass."""
        return dict(getattr(self.ws, "layouts", None) or {})

    @property
    def shared_memory(self):
        """The :class:`Region` list of dynamic shared memory, by offset."""
        plan = self.ws
        regions = []
        for ch in plan.channels:
            regions.append(Region(ch.smem_offset, ch.slot_bytes * ch.num_slots,
                                  f"channel {ch.id} slots ({ch.num_slots} x {ch.slot_bytes} B)"))
            n = ch.num_slots
            regions.append(Region(ch.bar_offset, 2 * MBARRIER_BYTES * n,
                                  f"channel {ch.id} mbarriers ({n} full, {n} empty)"))
        if plan.ping_pong:
            g = plan.num_consumers
            regions.append(Region(plan.turn_offset, 2 * MBARRIER_BYTES * g,
                                  f"ping-pong turns ({g} barriers, {g} tokens)"))
        scratch = getattr(plan, "scratch_bytes", 0)
        if scratch:
            groups = plan.scratch_regions
            regions.append(Region(plan.scratch_offset, scratch * groups,
                                  f"layout scratch ({groups} x {scratch} B, one per "
                                  "consumer group)"))
        if plan.stage_bytes:
            groups = plan.stage_regions
            whose = (f"one, written by all {plan.stage_shared} consumer groups"
                     if plan.stage_shared > 1 else "one per consumer group")
            regions.append(Region(plan.stage_offset, plan.stage_bytes * groups,
                                  f"dot B operands written to shared memory ({groups} x "
                                  f"{plan.stage_bytes} B, {whose})"))
        if getattr(plan, "staging_bytes", 0) and plan.staged:
            groups = plan.group_regions
            regions.append(Region(plan.staging_offset, plan.staging_bytes * groups,
                                  f"store staging, tma_store ({groups} x "
                                  f"{plan.staging_bytes} B, one per consumer group)"))
        return sorted(regions)

    # -- the tables ------------------------------------------------------------------
    def _header(self):
        plan = self.ws
        consts = ", ".join(f"{k}={v!r}" for k, v in plan.constexprs.items()) or "none"
        opts = ", ".join(f"{k}={v}" for k, v in plan.options.as_dict().items())
        groups = 1 if plan.fused else 1 + plan.num_consumers
        if plan.fused:
            split = "no warp specialization (NUMBA_WS_DISABLE): one warp group runs every task"
        elif plan.ping_pong:
            split = (f"ping-pong: consumer group i computes whole tiles of tile-loop "
                     f"iterations i, i+{plan.num_consumers}, ...")
        elif plan.partition_dim:
            by = ("the rows of the stored tiles (no ws.dot)" if plan.split_source == "rows"
                  else plan.partition_dim)
            unit = {"M": " rows", "N": " columns"}.get(plan.partition_dim, "")
            split = f"split along {by}, {plan.slice_size}{unit} per consumer group"
        else:
            split = "not split: every consumer group computes the whole tiles"
        return [f"numba_ws plan: {plan.kernel_name} for {target_name(plan.cc)}, "
                f"{_plural(groups, 'warp group')} x {GROUP_THREADS} threads",
                f"constexprs: {consts}", f"options: {opts}", split]

    def _sections(self):
        """[(title, column names, rows)]: what repr and _repr_html_ show."""
        plan = self.ws
        sections = []
        tasks = [(f"{t.id}", t.role, "" if t.block is None else str(t.block),
                  f"{t.registers}" + (f" (setmaxnreg.{t.setmaxnreg})" if t.setmaxnreg else ""),
                  ", ".join(t.anchors)) for t in self.tasks]
        sections.append(("tasks", ("warp group", "role", "block", "registers", "anchor ops"),
                         tasks))
        rows = []
        for ch in plan.channels:
            where = "in the loop" if ch.in_loop else "outside loops"
            turns = ", taking turns (ping-pong)" if ch.ping_pong else ""
            rows.append((f"channel {ch.id}",
                         f"-> consumers {', '.join(map(str, ch.consumers))}{turns}; {where}; "
                         f"{_plural(ch.num_slots, 'slot')} x {ch.slot_bytes} B; "
                         f"{(ch.lowering or 'unlowered').upper()}; empty barrier expects "
                         f"{_plural(ch.arrivals, 'arrival')}"))
            for m in ch.members:
                name = "(expr)" if m["var"].startswith("$") else m["var"]
                rows.append((f"  {name}", _member_text(m, ch.lowering)))
        sections.append(("channels", ("channel", "what"), rows))
        r = self.registers
        if plan.fused or not r.producer or r.producer == r.consumers == r.entry:
            text = f"{r.entry} per thread at entry, kept by every warp group"
        else:
            text = (f"{r.entry} per thread at entry; producer {r.producer}, consumers "
                    f"{r.consumers}: {r.used} of the CTA's {r.available} "
                    f"({r.threads} threads x {r.entry})")
        sections.append(("registers", None, [(text,)]))
        sections.append(("layouts", ("layout", "register tiles", "warp groups"),
                         _layout_rows(self.layouts, self._defining_tasks())))
        smem = [(f"[{reg.offset}, {reg.offset + reg.bytes})", f"{reg.bytes} B", reg.what)
                for reg in self.shared_memory]
        smem.append(("total", f"{plan.smem_bytes} B", "asked at launch (with 1 KiB of "
                     "alignment slack when there are slots)" if plan.channels else
                     "asked at launch"))
        sections.append(("shared memory", ("bytes", "size", "what"), smem))
        if plan.notes:
            sections.append(("notes", None, [(n,) for n in plan.notes]))
        return sections

    # -- rendering -------------------------------------------------------------------
    def __repr__(self):
        lines = self._header()
        for title, columns, rows in self._sections():
            lines.append(f"{title}:")
            if not rows:
                lines.append("  (none)")
                continue
            if columns is not None and title != "channels":
                rows = [tuple(columns)] + rows
            widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
            for row in rows:
                cells = [cell.ljust(w) for cell, w in zip(row, widths)] + [row[-1]]
                lines.append(("  " + "  ".join(cells)).rstrip())
        return "\n".join(lines)

    def __str__(self):
        return repr(self)

    def _repr_pretty_(self, printer, cycle):
        printer.text(repr(self))

    def _repr_html_(self):
        esc = html.escape
        head = self._header()
        out = [f"<div class='numba-ws-plan'><b>{esc(head[0])}</b><br>"
               + "<br>".join(esc(line) for line in head[1:])]
        for title, columns, rows in self._sections():
            out.append(f"<h4 style='margin:0.6em 0 0.2em'>{esc(title)}</h4>")
            if not rows:
                out.append("<i>none</i>")
                continue
            if columns is None:
                out.append("<br>".join(esc(row[0]) for row in rows))
                continue
            out.append("<table><tr>" + "".join(f"<th style='text-align:left'>{esc(c)}</th>"
                                               for c in columns) + "</tr>")
            for row in rows:
                out.append("<tr>" + "".join(f"<td style='text-align:left'>{esc(c)}</td>"
                                            for c in row) + "</tr>")
            out.append("</table>")
        out.append("</div>")
        return "\n".join(out)


def _member_text(m, lowering):
    """One channel member (a ``ws.load``) in one line."""
    parts = m["parts"]
    shape = "x".join(map(str, m["shape"]))
    dtype = getattr(m["dtype"], "name", m["dtype"])
    split = "whole" if m.get("split_dim") is None else f"split along dim {m['split_dim']}"
    def part_text(p):   # bytes and slot offsets exist once lower_loads has run
        size = f" ({p['bytes']} B)" if "bytes" in p else ""
        return "x".join(map(str, p["shape"])) + size

    kinds = {part_text(p) for p in parts}
    placed = all("slot_offset" in p for p in parts)
    offsets = ", ".join(str(p["slot_offset"]) for p in parts) if placed else ""
    if len(kinds) == 1:
        where = f"{_plural(len(parts), 'part')} of {kinds.pop()}"
        if placed:
            where += f" at slot byte{'s' if len(parts) > 1 else ''} {offsets}"
    else:
        where = "parts " + ", ".join(
            part_text(p) + (f" at slot byte {p['slot_offset']}" if placed else "")
            for p in parts)
    text = f"{m['array']}[{shape}] {dtype}, line {m.get('line', '?')}, {split}: {where}"
    boxes = [p.get("boxes") for p in parts if p.get("boxes")]
    if lowering == "tma" and boxes:
        swizzle = parts[0].get("swizzle")
        text += f"; {_plural(sum(boxes), 'TMA box', 'TMA boxes')}" + (
            f", {swizzle} B swizzle" if swizzle else "")
    if m.get("transposed"):
        text += "; column-major: read through its transposed view"
    if lowering != "tma" and m.get("why"):
        text += f"; {m['why']}"
    if m.get("dot"):
        text += "; read by ws.dot"
    return text


def _layout_rows(layouts, tasks_of):
    """(layout name, tiles, warp groups) per distinct layout, in first-seen order;
    ``tasks_of`` maps an IR name to the tasks whose clone defines it."""
    groups = {}
    for name, layout in layouts.items():
        base = name.rpartition("__t")[0] or name
        tiles, tasks = groups.setdefault(layout.name, ({}, set()))
        tiles[base] = None
        tasks.update(tasks_of.get(name, ()))
    rows = []
    for layout, (tiles, tasks) in groups.items():
        named = [t for t in tiles if not t.startswith("$")]
        temps = len(tiles) - len(named)
        temporaries = _plural(temps, "temporary", "temporaries")
        text = ", ".join(named) + (f" (+{temporaries})" if temps and named else "")
        rows.append((layout, text or temporaries, ", ".join(map(str, sorted(tasks)))))
    return rows


class Explanation(str):
    """``explain()``'s text: a ``str`` that renders as preformatted text in Jupyter."""

    def __repr__(self):
        return str(self)

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))

    def _repr_html_(self):
        return f"<pre class='numba-ws-explain'>{html.escape(str(self))}</pre>"
