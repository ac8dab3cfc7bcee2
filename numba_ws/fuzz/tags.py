"""What a fuzzed program exercises, for a run's summary by feature.

:func:`tags` reads a :class:`~numba_ws.fuzz.program.Program`'s source and configuration:
ops (``op:...``), control flow (``flow:...``), configuration (``cfg:...``) and the
arrays' dtypes and views. :func:`table` counts outcomes per tag.
"""
import collections
import re

#: tag -> regular expression searched in the kernel's source
SOURCE_TAGS = {
    "op:dot": r"ws\.dot\(", "op:trans": r"ws\.trans\(", "op:exp/log": r"ws\.(exp2?|log)\(",
    "op:sqrt/rsqrt": r"ws\.r?sqrt\(", "op:sigmoid/tanh/gelu": r"ws\.(sigmoid|tanh|gelu)\(",
    "op:fma": r"ws\.fma\(", "op:abs": r"ws\.abs\(",
    "op:maximum/minimum": r"ws\.(maximum|minimum)\(",
    "op:divide": r" / ", "op:sum": r"ws\.sum\(", "op:max": r"ws\.max\(", "op:min": r"ws\.min\(",
    "op:argmax/argmin": r"ws\.arg(max|min)\(", "op:where": r"ws\.where\(",
    "op:cast": r"astype\(", "op:full/zeros": r"ws\.(full|zeros)\(",
    "op:arange": r"ws\.arange\(", "op:expand_dims": r"ws\.expand_dims\(|\[(None, :|:, None)\]",
    "op:broadcast_to": r"ws\.broadcast_to\(", "op:masked_load": r"ws\.load\([^\n]*mask=",
    "op:load_other": r"ws\.load\([^\n]*other=", "op:masked_store": r"ws\.store\([^\n]*mask=",
    "flow:loop": r"for \w+ in range\(ws\.cdiv", "flow:persistent": r"ws\.num_programs\(0\)",
    "flow:store_in_loop": r"\n {8,}ws\.store\(", "flow:scalar_args": r"\bs\d+\b",
}


def _loads_outside_loops(source):
    """Whether a load precedes a loop at its own indentation (a k-independent load)."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if "ws.load(" in line:
            ind = len(line) - len(line.lstrip())
            if any(ln.lstrip().startswith("for ") and len(ln) - len(ln.lstrip()) == ind
                   for ln in lines[i + 1:]):
                return True
    return False


def tags(program):
    """The sorted tags of ``program``."""
    src = program.source
    out = {t for t, pat in SOURCE_TAGS.items() if re.search(pat, src)}
    if _loads_outside_loops(src):
        out.add("flow:load_outside_loop")
    o = program.options
    out.add(f"cfg:groups={o.get('num_consumer_groups', 1)}")
    out.add(f"cfg:buffers={o.get('num_buffers_warp_spec', 1)}")
    if o.get("dot_in_flight"):
        out.add("cfg:dot_in_flight")
    out.add(f"cfg:cc={program.cc}")
    out.add(f"family:{program.family}")
    tiles = [v for k, v in program.constexprs.items() if k in ("BM", "BN", "B")]
    if any(n % t for a in program.arrays for n in a.shape for t in tiles if n > 1):
        out.add("cfg:ragged")
    for a in program.arrays:
        out.add(f"dtype:{a.dtype}")
        if a.view != "contig":
            out.add(f"view:{a.view}")
    if any("register A" in n for n in program.notes):
        out.add("op:dot_register_a")
    if any("tf32 dot" in n for n in program.notes):
        out.add("op:dot_tf32")
    return sorted(out)


#: columns of :func:`table`: outcome groups counted per tag
COLUMNS = {"programs": None, "compiled": ("match", "mismatch", "compiled"),
           "ran": ("match", "mismatch"), "mismatch": ("mismatch",),
           "compile_error": ("compile_error",), "unsupported": ("unsupported", "resource"),
           "crash": ("crash", "timeout", "launch_error", "sim_finding")}


def table(results):
    """{tag: {column: count}} over results that carry ``tags``."""
    out = collections.defaultdict(lambda: dict.fromkeys(COLUMNS, 0))
    for r in results:
        for t in r.get("tags", ()):
            row = out[t]
            for col, kinds in COLUMNS.items():
                row[col] += kinds is None or r["outcome"] in kinds
    return dict(sorted(out.items()))


def format_table(rows):
    """The table as text, one line per tag."""
    head = f"  {'feature':26s}" + "".join(f"{c:>14s}" for c in COLUMNS)
    return "\n".join([head] + [f"  {t:26s}" + "".join(f"{row[c]:14d}" for c in COLUMNS)
                               for t, row in rows.items()])
