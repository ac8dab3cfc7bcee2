"""Source listings annotated with async tasks, in the seed's format.

``listing(plan, source, after_partition)`` returns the kernel's source with
``# async_task i, j`` at the end of each line that has statements. After data
partitioning, a line that touches a tile split across consumers is printed once per
consumer slice with the split variables renamed ``name_g`` (g = 1..G), as the seed does
(``a_1``/``a_2`` loads in task 0, ``acc_1`` in task 1, ``acc_2`` in task 2).
"""
import re

from numba.cuda.core import ir

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _return_chain(func_ir):
    """Statements that only exist to return None (excluded from the listing)."""
    skip = set()
    for block in func_ir.blocks.values():
        if isinstance(block.terminator, ir.Return):
            name = block.terminator.value.name
            for stmt in reversed(block.body):
                if isinstance(stmt, ir.Assign) and stmt.target.name == name:
                    skip.add(id(stmt))
                    if isinstance(stmt.value, ir.Expr) and stmt.value.op == "cast":
                        name = stmt.value.value.name
    return skip


def _base(name):
    return name.split(".")[0]


def line_info(plan, after_partition):
    """Per source line: (tasks, split base names touched)."""
    tasks = plan.tasks if after_partition else plan.tasks_before_partition
    skip = _return_chain(plan.original_ir)
    lines = {}
    for sid, (stmt, _) in plan.stmts.items():
        if sid in skip or isinstance(stmt, (ir.Return, ir.Jump)):
            continue
        if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Arg):
            continue
        ts, names = lines.setdefault(stmt.loc.line, (set(), set()))
        ts |= tasks.get(sid, frozenset())
        if after_partition:
            for v in stmt.list_vars():
                if plan.split.get(v.name) is not None and not v.name.startswith("$"):
                    names.add(_base(v.name))
    return lines


def _fmt(ts):
    return "# async_task " + ", ".join(str(t) for t in sorted(ts))


def _code_part(text):
    """The line without a trailing ``# comment`` (so the annotation replaces it)."""
    import io
    import tokenize
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text.lstrip() + "\n").readline):
            if tok.type == tokenize.COMMENT:
                indent = len(text) - len(text.lstrip())
                return text[:indent + tok.start[1]].rstrip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return text


def listing(plan, source_lines, first_line, after_partition=False):
    info = line_info(plan, after_partition)
    out = []
    for offset, text in enumerate(source_lines):
        lineno = first_line + offset
        text = text.rstrip("\n")
        ts, names = info.get(lineno, (set(), set()))
        if not ts:
            out.append(text)
            continue
        text = _code_part(text)
        if not names:
            out.append(f"{text} {_fmt(ts)}")
            continue
        consumers = [t for t in sorted(ts) if t != 0]
        producer = 0 in ts
        for g in plan.consumer_tasks:
            renamed = _IDENT.sub(lambda m: f"{m.group(0)}_{g}" if m.group(0) in names else m.group(0), text)
            if producer and not consumers:
                out.append(f"{renamed} {_fmt({0})}")
            else:
                shown = ({0} if producer else set()) | ({g} if g in consumers else set())
                out.append(f"{renamed} {_fmt(shown)}")
    return "\n".join(out)


def report(fn, state):
    """explain() text: both listings, the channels, and the partitioned branches."""
    import inspect as _inspect
    plan = state.ws
    src, first = _inspect.getsourcelines(fn)
    body = [l for l in src if not l.lstrip().startswith("@")]
    first += len(src) - len(body)
    parts = ["# async tasks (before data partitioning)", listing(plan, body, first, False), "",
             f"# after data partitioning ({plan.num_consumers} consumer group(s), "
             + (f"ping-pong: group i computes whole tiles of tile-loop iterations i, "
                f"i+{plan.num_consumers}, ...)" if plan.ping_pong else
                f"split along {plan.partition_dim or '-'}"
                + (f", {plan.slice_size} per consumer)" if plan.partition_dim else ")")),
             listing(plan, body, first, True), "", "# channels"]
    parts += [f"#   {ch.describe()}" for ch in plan.channels] or ["#   (none)"]
    parts.append(f"# branches: " + ", ".join(
        f"warp group {t} -> block {label}" for t, label in sorted(plan.branches.items())))
    parts.append(f"# shared memory: {plan.smem_bytes} bytes; registers at entry "
                 f"{plan.entry_registers}, producer {plan.options.reg_dec_producer}, "
                 f"consumers {plan.options.reg_inc_consumer}")
    parts += [f"# note: {n}" for n in plan.notes]
    return "\n".join(parts)
