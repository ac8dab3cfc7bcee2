#!/usr/bin/env python3
"""Generate docs/language.md, the language reference, from the op tables.

    python3 scripts/gen_language_doc.py           # rewrite docs/language.md
    python3 scripts/gen_language_doc.py --check   # exit 1 if it is out of date

Every entry is derived, so a new op appears by itself:

- the ops and their order: ``numba_ws.language.core.OP_NAMES``;
- signature and text: the op's stub in ``numba_ws.language.core`` (its docstring); an
  operator op (``add``, ``lt``, ...; ``numba_ws.language.typing.OPERATORS``) is shown as
  its Python syntax, with the docstring of its interpreter rule;
- where it runs: *interpreter* when ``numba_ws.interpreter.ops.INTERPRET`` has a rule;
  *sm_90a* / *sm_80* from ``numba_ws.codegen.lowering.LOWERING``: the rule is called on a
  stand-in lowerer whose plan targets that cc, and a rule that refuses the op (raises a
  compile error saying "no GPU lowering" before it reads the statement, as
  ``lowering._not_yet`` does) marks the op "interpreter only" on that target with the
  rule's reason; any other rule lowers it;
- dtypes: the interpreter rule (the reference semantics) run on small tiles of every
  numba_ws dtype (arguments made from the parameter names: ``x``/``a``/``b``/``c``/
  ``tile`` tiles, ``cond`` a boolean tile, ``array`` an array, ``dtype`` the dtype
  itself, ``axis`` the last axis, ``shape``/``offsets`` to match); what it accepts and
  the result's dtype. Ops whose parameters are not tiles (``program_id``, ``arange``,
  ...) have no dtype line: their docstring says what they take.
"""
import argparse
import inspect
import operator
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from numba_ws.codegen import lowering  # noqa: E402
from numba_ws.interpreter import ops as interp  # noqa: E402
from numba_ws.language import core, dtypes  # noqa: E402
from numba_ws.language.typing import OPERATORS  # noqa: E402

DOC = ROOT / "docs" / "language.md"
#: (name in the page, plan.cc the lowering rules see)
TARGETS = (("sm_90a", (9, 0, "a")), ("sm_80", (8, 0)))
#: Python syntax of the operators ``OPERATORS`` maps op names to.
SYNTAX = {operator.add: "a + b", operator.sub: "a - b", operator.mul: "a * b",
          operator.truediv: "a / b", operator.floordiv: "a // b", operator.mod: "a % b",
          operator.lshift: "a << b", operator.rshift: "a >> b", operator.and_: "a & b",
          operator.or_: "a | b", operator.xor: "a ^ b", operator.neg: "-x",
          operator.invert: "~x", operator.lt: "a < b", operator.le: "a <= b",
          operator.eq: "a == b", operator.ne: "a != b", operator.gt: "a > b",
          operator.ge: "a >= b"}
TILE_PARAMS = ("x", "a", "b", "c", "tile")


# -- where an op runs --------------------------------------------------------------------

class _ReadsStatement(Exception):
    """The rule went on to read the statement or the lowerer: it lowers the op."""


class _Stand:
    """A stand-in whose listed attributes exist; reading any other raises _ReadsStatement."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)

    def __getattr__(self, name):
        raise _ReadsStatement(name)

    def __getitem__(self, key):
        raise _ReadsStatement(key)


class _Refused(Exception):
    pass


def gpu_support(rule, cc):
    """(lowered?, reason if not) of LOWERING ``rule`` for a plan targeting ``cc``."""
    lowerer = _Stand(p=_Stand(error=lambda msg, loc=None: _Refused(msg)),
                     plan=_Stand(cc=cc))
    try:
        rule(lowerer, _Stand(loc=None), _Stand())
    except _Refused as e:
        if "no GPU lowering" in str(e):
            return False, str(e)
    except Exception:   # noqa: BLE001  (_ReadsStatement, or a stand-in it cannot use)
        pass
    return True, ""


# -- dtypes ------------------------------------------------------------------------------

def _tile(shape, dtype):
    """1, 2, 3, ... in ``shape``, as ``dtype`` (every value valid for log, sqrt, ...)."""
    return np.arange(1, int(np.prod(shape)) + 1, dtype=np.float64).reshape(shape) \
        .astype(dtype.dtype)


def _arguments(params, shape, dtype, target=None):
    """Sample arguments for an interpreter rule, by parameter name (``target``: the value
    of a ``dtype`` parameter, default ``dtype``); None if a required parameter has a name
    this probe does not know (``fn`` of ``map``: its result depends on the function)."""
    args = []
    for p in params:
        if p.kind == p.VAR_POSITIONAL or p.name in TILE_PARAMS:
            args.append(_tile(shape, dtype))
        elif p.name == "cond":
            args.append(np.ones(shape, bool))
        elif p.name == "array":
            args.append(_tile(tuple(2 * s for s in shape), dtype))
        elif p.name == "dtype":
            args.append(target or dtype)
        elif p.name == "axis":
            args.append(len(shape) - 1)
        elif p.name == "shape":
            args.append(shape)
        elif p.name == "offsets":
            args.append((0,) * len(shape))
        elif p.name == "value":
            args.append(1)
        elif p.default is not p.empty:
            break
        else:
            return None
    return args


def _result(rule, args):
    """The result's DType (None for no tile result), or raise if the rule refuses."""
    out = rule(*args)
    return dtypes.from_numpy(out.dtype) if hasattr(out, "dtype") else None


def dtype_table(name):
    """What the interpreter accepts for op ``name``: ``("each", [(dtype, result)])`` per
    input dtype, ``("pairs", [(from, to)])`` for an op with a tile and a ``dtype``
    (``astype``), or None when the op takes no tiles or cannot be probed."""
    rule = interp.INTERPRET[name]
    params = list(inspect.signature(rule).parameters.values())
    names = {p.name for p in params}
    if not (names & set(TILE_PARAMS + ("cond", "array", "dtype"))
            or any(p.kind == p.VAR_POSITIONAL for p in params)):
        return None
    kinds = list(dtypes.ALL.values())
    for shape in ((4, 4), (4,)):
        if _arguments(params, shape, kinds[0]) is None:
            return None
        if "dtype" in names and names & set(TILE_PARAMS):
            pairs = []
            for d in kinds:
                for t in kinds:
                    try:
                        _result(rule, _arguments(params, shape, d, t))
                        pairs.append((d, t))
                    except Exception:   # noqa: BLE001  (the rule refused the pair)
                        pass
            if pairs:
                return "pairs", pairs
            continue
        accepted = []
        for d in kinds:
            try:
                accepted.append((d, _result(rule, _arguments(params, shape, d))))
            except Exception:   # noqa: BLE001  (the rule refused this dtype)
                pass
        if accepted:
            return "each", accepted
    return None


def _dtype_name(d):
    return f"`ws.{getattr(d, 'attr', d.name)}`"


def dtype_text(table):
    """One line: the accepted dtypes and what they give."""
    kind, rows = table
    kinds = list(dtypes.ALL.values())
    if kind == "pairs":
        if len(rows) == len(kinds) ** 2:
            return f"from any of the {len(kinds)} dtypes to any (the result has ``dtype``)"
        refused = [(d, t) for d in kinds for t in kinds if (d, t) not in rows]
        return ("from any dtype to any (the result has ``dtype``) except "
                + ", ".join(f"{_dtype_name(d)} -> {_dtype_name(t)}" for d, t in refused))
    ins = [d for d, _ in rows]
    refused = [d for d in kinds if d not in ins]

    def listed(ds):
        return "every dtype" if ds == kinds else ", ".join(_dtype_name(d) for d in ds)

    results = {r for _, r in rows}
    if results == {None}:
        text = listed(ins)
    elif len(results) == 1:
        text = f"{listed(ins)} -> {_dtype_name(results.pop())}"
    else:
        same = [d for d, r in rows if r is d]
        to = {}
        for d, r in rows:
            if r is not d:
                to.setdefault(r, []).append(d)
        parts = [f"{listed(ds)} -> {_dtype_name(r)}" for r, ds in to.items()]
        if same:
            parts.append(f"{listed(same)} -> the same dtype" if not to else
                         "the others keep their dtype")
        text = "; ".join(parts)
    if refused:
        text += "; refused: " + ", ".join(_dtype_name(d) for d in refused)
    return text


# -- text --------------------------------------------------------------------------------

def _markdown(doc):
    """Sphinx roles (:func:`max`) as code spans; double-backtick spans kept."""
    return re.sub(r":(?:func|data|class|mod|attr|meth):`~?([^`]+)`",
                  lambda m: f"``{m.group(1).rsplit('.', 1)[-1]}``", doc)


def op_entry(name):
    stub = getattr(core, name, None)
    if name in OPERATORS:
        fn = OPERATORS[name]
        signature = SYNTAX.get(fn, f"operator.{fn.__name__}(a, b)")
        doc = inspect.getdoc(interp.INTERPRET[name]) or f"``{signature}`` on tiles."
        label = f"`{signature}`"
    else:
        signature = f"ws.{name}{inspect.signature(stub)}"
        doc = inspect.getdoc(stub) or "(no docstring)"
        label = f"ws.{name}"
    runs = {"interpreter": (name in interp.INTERPRET, "")}
    for target, cc in TARGETS:
        runs[target] = gpu_support(lowering.LOWERING[name], cc)
    table = dtype_table(name)
    return {"name": name, "label": label, "title": f"`{signature}`", "doc": _markdown(doc),
            "runs": runs,
            "dtypes": dtype_text(table) if table else None}


def _mark(ok):
    return "yes" if ok else "no"


def render(entries):
    names = ", ".join(f"`ws.{getattr(d, 'attr', d.name)}`" for d in dtypes.ALL.values())
    lines = [
        "# The numba_ws language",
        "",
        "<!-- Generated by scripts/gen_language_doc.py from the ops' docstrings and op "
        "tables; do not edit. -->",
        "",
        "Generated from the op tables (`numba_ws.language.core.OP_NAMES`, the stubs' "
        "docstrings, `numba_ws.interpreter.ops.INTERPRET`, "
        "`numba_ws.codegen.lowering.LOWERING`) by `python3 scripts/gen_language_doc.py`; "
        "tests/test_language_doc.py fails when this page is out of date. A kernel is one "
        "program instance per thread block; tiles are 1-D or 2-D with compile-time shapes "
        "(README.md, docs/layouts.md).",
        "",
        "- **Where it runs**: *interpreter*: NumPy arrays, torch CPU tensors or "
        "`NUMBA_WS_INTERPRET=1`; *sm_90a*: Hopper (wgmma, TMA, setmaxnreg); *sm_80*: "
        "Ampere (mma.sync, cp.async; `NUMBA_WS_CC=8.0` on a newer GPU). \"no\" means the "
        "GPU lowering refuses the op with a compile error naming it (the interpreter "
        "runs it).",
        "- **dtypes**: what the interpreter (the reference semantics) accepts, found by "
        "running it on small tiles of every dtype, and the result's dtype.",
        f"- **The dtypes**: {names}.",
        "",
        "| op | interpreter | sm_90a | sm_80 | what |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        first = e["doc"].split("\n\n")[0].replace("\n", " ")
        first = first.split(". ")[0].rstrip(".") + "."
        runs = " | ".join(_mark(e["runs"][t][0]) for t in ("interpreter", "sm_90a", "sm_80"))
        label, first = (text.replace("|", "\\|") for text in (e["label"], first))
        lines.append(f"| [{label}](#{e['name']}) | {runs} | {first} |")
    lines.append("")
    for e in entries:
        lines += [f"<a id=\"{e['name']}\"></a>", "", f"## {e['name']}", "",
                  e["title"], "", e["doc"], ""]
        if e["dtypes"]:
            lines += [f"**dtypes**: {e['dtypes']}.", ""]
        where = [t for t in ("interpreter", "sm_90a", "sm_80") if e["runs"][t][0]]
        lines.append(f"**runs**: {', '.join(where)}.")
        for target in ("sm_90a", "sm_80"):
            ok, why = e["runs"][target]
            if not ok:
                lines.append(f"Not on {target}: {why}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def generate():
    return render([op_entry(name) for name in core.OP_NAMES])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if docs/language.md differs from what would be generated")
    opts = p.parse_args(argv)
    text = generate()
    if opts.check:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(f"{DOC.relative_to(ROOT)} is out of date: run python3 "
                  "scripts/gen_language_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)} ({len(core.OP_NAMES)} ops)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
