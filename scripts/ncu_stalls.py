#!/usr/bin/env python3
"""Where one kernel's warps stall, per SASS instruction: Nsight Compute's PC sampling.

    python3 scripts/ncu_stalls.py NAME OUTDIR KERNEL_REGEX -- PROGRAM [ARGS...]

Profiles the third launch matching KERNEL_REGEX (``-s 2 -c 1``, ``--clock-control none``)
with the SourceCounters, WarpStateStats and SpeedOfLight sections into
``OUTDIR/NAME.ncu-rep``, exports the SASS source page (``NAME_source.csv``) and the raw
metrics (``NAME_raw.csv``), and prints: the sampled stall reasons of the whole kernel,
the instructions holding the most samples, and the samples per opcode. Any sm ncu
supports; run on the GPU machine.
"""
import collections
import csv
import io
import re
import subprocess
import sys


def _ncu(args, out=None):
    res = subprocess.run(["ncu"] + args, capture_output=True, text=True)
    if out:
        with open(out, "w") as f:
            f.write(res.stdout)
    if res.returncode:
        print(f"ncu {' '.join(args[:4])} ... exit {res.returncode}: {res.stderr[-600:]}")
    return res.stdout


def _rows(text):
    """CSV rows after ncu's '==PROF==' chatter."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def _number(cell):
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return 0.0


def stall_reasons(raw_csv):
    """(metric, value) of the kernel's sampled stall counts, largest first."""
    rows = _rows(raw_csv)
    if len(rows) < 2:
        return []
    head, last = rows[0], rows[-1]
    pairs = [(h, _number(v)) for h, v in zip(head, last)
             if "pcsamp_warps_issue_stalled" in h and not h.endswith("not_issued")]
    return sorted(pairs, key=lambda p: -p[1])


def source_table(source_csv):
    """(header, rows) of the SASS source page; rows are dicts."""
    rows = _rows(source_csv)
    starts = [i for i, r in enumerate(rows) if r and r[0] == "Address"]
    if not starts:
        return [], []
    head, rows = rows[starts[0]], rows[starts[0]:]
    return head, [dict(zip(head, r)) for r in rows[1:] if len(r) == len(head)]


def main():
    if "--" not in sys.argv or len(sys.argv) < 6:
        sys.exit(__doc__)
    name, outdir, regex = sys.argv[1:4]
    program = sys.argv[sys.argv.index("--") + 1:]
    rep = f"{outdir}/{name}"
    _ncu(["--clock-control", "none", "--section", "SourceCounters", "--section",
          "WarpStateStats", "--section", "SpeedOfLight", "-k", f"regex:{regex}", "-s", "2",
          "-c", "1", "-f", "-o", rep] + program)
    raw = _ncu(["-i", rep + ".ncu-rep", "--page", "raw", "--csv"], rep + "_raw.csv")
    src = _ncu(["-i", rep + ".ncu-rep", "--page", "source", "--csv", "--print-source", "sass"],
               rep + "_source.csv")
    print(f"== {name}: stall reasons (PC samples, whole kernel)")
    reasons = stall_reasons(raw)
    total = sum(v for _, v in reasons) or 1.0
    for metric, v in reasons[:14]:
        print(f"  {metric.split('stalled_')[-1]:<34} {v:10.0f} {100 * v / total:5.1f} %")
    head, table = source_table(src)
    print(f"== {name}: source columns: {head}")
    samples = next((h for h in head if h.startswith("Warp Stall Sampling (All")), None)
    text = next((h for h in head if h == "Source"), None)
    if not (samples and text and table):
        print(f"  no per-instruction samples in the source page ({len(table)} rows)")
        return
    total = sum(_number(r[samples]) for r in table) or 1.0
    print(f"== {name}: top instructions by stall samples (of {total:.0f})")
    ranked = sorted(table, key=lambda r: -_number(r[samples]))
    for r in ranked[:40]:
        print(f"  {r.get('Address', '?'):>8} {100 * _number(r[samples]) / total:5.1f} %  "
              f"{r[text][:90]}")
    per_op = collections.Counter()
    for r in table:
        op = re.sub(r"^@!?U?P\w+\s+", "", r[text].strip()).split(" ")[0]
        per_op[op] += _number(r[samples])
    print(f"== {name}: samples per opcode")
    for op, v in per_op.most_common(20):
        print(f"  {op:<36} {100 * v / total:5.1f} %")


if __name__ == "__main__":
    main()
