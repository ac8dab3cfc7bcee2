"""Source listings annotated with async tasks, in the seed's format.

``listing(plan, source, after_partition)`` returns the kernel's source with
``# async_task i, j`` at the end of each line that has statements. After data
partitioning, a line that touches a tile split across consumers is printed once per
consumer slice with the split variables renamed ``name_g`` (g = 1..G), as the seed does
(``a_1``/``a_2`` loads in task 0, ``acc_1`` in task 1, ``acc_2`` in task 2), and with
each consumer's rows (or columns) written out where the line names them, as the seed's
``offs_m_1``/``offs_m_2``: a split ``ws.load``/``ws.zeros``/``ws.full`` gets the slice
shape (``BM // 2``) and a split ``ws.load``/``ws.store`` of consumer g the slice's
offset (``pid_m * BM + BM // 2`` for g = 2 of 2).
"""
import ast
import re

from numba.cuda.core import ir

from .ir_tools import STORE_OPS, tile_op

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


#: Language ops whose call names a split tile's offsets and/or shape:
#: op -> (index of the offsets argument or None, index of the shape argument or None).
_SHAPED = {"load": (1, 2), "store": (1, None), "atomic_add": (1, None), "zeros": (None, 0),
           "full": (None, 0)}
_ARG_NAMES = {"load": ("array", "offsets", "shape"), "store": ("array", "offsets", "tile"),
              "atomic_add": ("array", "offsets", "tile"),
              "zeros": ("shape", "dtype"), "full": ("shape", "value", "dtype")}


def _split_dim_of(plan, stmt, op):
    """The split dim of the tile a load/zeros/full makes or a store writes (None: whole)."""
    if op in STORE_OPS:
        args = stmt.value.args
        return plan.split.get(args[2].name) if len(args) > 2 else None
    return plan.split.get(stmt.target.name)


def line_info(plan, after_partition):
    """Per source line: (tasks, split base names touched, whether a split tile is touched,
    [(op, split dim)] of its loads/stores/zeros/full in evaluation order)."""
    tasks = plan.tasks if after_partition else plan.tasks_before_partition
    skip = _return_chain(plan.original_ir)
    lines = {}
    for sid, (stmt, _) in plan.stmts.items():
        if sid in skip or isinstance(stmt, (ir.Return, ir.Jump)):
            continue
        if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Arg):
            continue
        ts, names, touched, calls = lines.setdefault(stmt.loc.line,
                                                     (set(), set(), [False], []))
        ts |= tasks.get(sid, frozenset())
        if after_partition:
            for v in stmt.list_vars():
                if plan.split.get(v.name) is not None:
                    touched[0] = True
                    if not v.name.startswith("$"):
                        names.add(_base(v.name))
            op = tile_op(stmt, plan.original_typemap)
            if op in _SHAPED:
                calls.append((op, _split_dim_of(plan, stmt, op)))
    return {line: (ts, names, touched[0], calls) for line, (ts, names, touched, calls)
            in lines.items()}


def _calls_in_order(tree):
    """Call nodes of ``tree`` in Python's evaluation order (arguments before the call)."""
    out = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            visit(child)
        if isinstance(node, ast.Call):
            out.append(node)
    visit(tree)
    return out


def _call_op(call):
    name = getattr(call.func, "attr", None) or getattr(call.func, "id", None)
    return name if name in _SHAPED else None


def _argument(call, op, index):
    if index is None:
        return None
    if index < len(call.args):
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == _ARG_NAMES[op][index]), None)


def _paren(text):
    return text if re.fullmatch(r"[A-Za-z_0-9.]+", text) else f"({text})"


class _Slices:
    """Rewrites one line for consumer slice k (0-based) of G: the split dim of each split
    load/store/zeros/full call gets the slice's shape and offset."""

    def __init__(self, plan, info, source_lines, first_line):
        self.groups = plan.num_consumers
        self.full = plan.slice_size * self.groups
        self.size_text = self._size_text(info, source_lines, first_line) or str(self.full)

    def _size_text(self, info, source_lines, first_line):
        """How the kernel writes the split dim's full size (``BM``), from the first split
        load/zeros/full whose shape names it."""
        for lineno in sorted(info):
            calls = info[lineno][3]
            if not any(dim is not None for _, dim in calls):
                continue
            text = source_lines[lineno - first_line] if 0 <= lineno - first_line < len(
                source_lines) else ""
            for call, op, dim, code in self._paired(_code_part(text.rstrip("\n")), calls):
                shape = _argument(call, op, _SHAPED[op][1])
                if isinstance(shape, ast.Tuple) and dim < len(shape.elts):
                    return _segment(code, shape.elts[dim])
        return None

    @staticmethod
    def _paired(text, calls):
        """(ast call, op, split dim, stripped source) for each split call of the line,
        when the line parses alone and its calls pair one to one with the IR's."""
        code = text.strip()
        tree = None
        for candidate in (code, code + " pass"):
            try:
                tree = ast.parse(candidate)
                break
            except SyntaxError:
                continue
        if tree is None:
            return []
        out = []
        for op in _SHAPED:
            nodes = [c for c in _calls_in_order(tree) if _call_op(c) == op]
            dims = [dim for o, dim in calls if o == op]
            if len(nodes) != len(dims):
                continue
            out += [(n, op, dim, code) for n, dim in zip(nodes, dims) if dim is not None]
        return out

    def rewrite(self, text, calls, k):
        pairs = self._paired(text, calls)
        if not pairs:
            return text
        code = pairs[0][3].encode()
        edits = []   # (start byte, end byte, new text) in the stripped line
        part = f"{_paren(self.size_text)} // {self.groups}"
        for call, op, dim, _ in pairs:
            offs_i, shape_i = _SHAPED[op]
            shape = _argument(call, op, shape_i)
            if isinstance(shape, ast.Tuple) and dim < len(shape.elts):
                el = shape.elts[dim]
                edits.append((el.col_offset, el.end_col_offset,
                              f"{_paren(_segment(pairs[0][3], el))} // {self.groups}"))
            offs = _argument(call, op, offs_i)
            if k and isinstance(offs, ast.Tuple) and dim < len(offs.elts):
                el = offs.elts[dim]
                base = _segment(pairs[0][3], el)
                step = part if k == 1 else f"{k} * {part}"
                edits.append((el.col_offset, el.end_col_offset,
                              step if base == "0" else f"{base} + {step}"))
        for start, end, new in sorted(edits, reverse=True):
            code = code[:start] + new.encode() + code[end:]
        indent = text[:len(text) - len(text.lstrip())]
        return indent + code.decode()


def _segment(code, node):
    """The source text of a one-line ``node`` of ``code`` (col offsets are UTF-8 bytes)."""
    return code.encode()[node.col_offset:node.end_col_offset].decode()


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
    slices = _Slices(plan, info, source_lines, first_line) if after_partition \
        and plan.slice_size else None
    out = []
    for offset, text in enumerate(source_lines):
        lineno = first_line + offset
        text = text.rstrip("\n")
        ts, names, touched, calls = info.get(lineno, (set(), set(), False, []))
        if not ts:
            out.append(text)
            continue
        text = _code_part(text)
        if not touched:
            out.append(f"{text} {_fmt(ts)}")
            continue
        consumers = [t for t in sorted(ts) if t != 0]
        producer = 0 in ts
        for g in plan.consumer_tasks:
            sliced = slices.rewrite(text, calls, g - 1) if slices else text
            renamed = _IDENT.sub(lambda m: f"{m.group(0)}_{g}" if m.group(0) in names
                                 else m.group(0), sliced)
            if producer and not consumers:
                out.append(f"{renamed} {_fmt({0})}")
            else:
                shown = ({0} if producer else set()) | ({g} if g in consumers else set())
                out.append(f"{renamed} {_fmt(shown)}")
    return "\n".join(out)


def report(fn, state):
    """explain() text: both listings, the channels (each load's path: TMA, cp.async or
    ld.global, and why), and the partitioned branches."""
    import inspect as _inspect
    plan = state.ws
    try:
        src, first = _inspect.getsourcelines(fn)
        body = [l for l in src if not l.lstrip().startswith("@")]
        first += len(src) - len(body)
        head = []
    except (OSError, TypeError):        # exec, python -c, a REPL: no source file
        body, first = ir_lines(plan)
        head = [f"# no source text for {getattr(fn, '__name__', 'the kernel')!r} (made by "
                "exec, python -c or a REPL?): each line lists its IR statements"]
    parts = head + ["# async tasks (before data partitioning)",
                    listing(plan, body, first, False), "",
             f"# after data partitioning ({plan.num_consumers} consumer group(s), "
             + (f"ping-pong: group i computes whole tiles of tile-loop iterations i, "
                f"i+{plan.num_consumers}, ...)" if plan.ping_pong else
                f"split along {_split_what(plan)}"
                + (f", {plan.slice_size} per consumer)" if plan.partition_dim else ")")),
             listing(plan, body, first, True), "", "# channels"]
    for ch in plan.channels:
        parts.append(f"#   {ch.describe()}")
        parts += [f"#     {m['var']} = load of {m['array']!r}: {m['why']}"
                  for m in ch.members if m.get("why")]   # the path each load took
    if not plan.channels:
        parts.append("#   (none)")
    parts.append(f"# branches: " + ", ".join(
        f"warp group {t} -> block {label}" for t, label in sorted(plan.branches.items())))
    parts.append(f"# shared memory: {plan.smem_bytes} bytes; registers at entry "
                 f"{plan.entry_registers}, producer {plan.options.reg_dec_producer}, "
                 f"consumers {plan.options.reg_inc_consumer}")
    parts += [f"# note: {n}" for n in plan.notes]
    return "\n".join(parts)


def ir_lines(plan):
    """(lines, first line number) standing in for the source of a kernel that has none:
    per source line, its statements of the original IR (``target = ws.op(...)``)."""
    by_line = {}
    for block in plan.original_ir.blocks.values():
        for stmt in block.body:
            line = getattr(stmt.loc, "line", None)
            op = tile_op(stmt, plan.original_typemap)
            target = getattr(getattr(stmt, "target", None), "name", "$")
            if line is None or isinstance(getattr(stmt, "value", None), ir.Arg) \
                    or (op is None and target.startswith("$")):
                continue
            text = f"ws.{op}(...)" if op else "..."
            by_line.setdefault(line, []).append(
                text if target.startswith("$") else f"{target} = {text}")
    if not by_line:
        return [], 1
    first, last = min(by_line), max(by_line)
    return [f"    {'; '.join(by_line.get(n, []))}\n" for n in range(first, last + 1)], first


def _split_what(plan):
    if plan.split_source == "rows":
        return "the rows of the stored tiles (no ws.dot)"
    return plan.partition_dim or "-"
