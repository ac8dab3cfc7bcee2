"""One differential check: the interpreter's outputs, their error bounds, the comparison.

:func:`prepare` builds a program's host arguments for one data seed; :func:`reference`
runs the kernel in the NumPy interpreter on copies of them; :func:`error_bounds` runs the
abstract interpretation of :mod:`numba_ws.fuzz.bounds` on the same inputs; :func:`compare`
checks a device's outputs against the reference, element by element:

- elements the interpreter did not store (the abstract run, which follows the same
  control flow, says which) must still hold the poison (NaN, ints
  :data:`~numba_ws.fuzz.program.INT_POISON`) on the device, and so must the
  :data:`~numba_ws.fuzz.program.GUARD` rows after every output;
- a stored element is within its bound: ``|got - ref| <= tol`` (``tol == 0``: bit for
  bit; NaN equals NaN); an element never written by the device (still poisoned) fails
  unless the reference is NaN there too; elements whose bound is infinite are not
  compared and are counted as ``unchecked``.

A failing output reports its ``worst`` element: the largest error relative to its
bound (an element written or left unwritten against the reference counts as worst).

The report also gives, per output, the error and the largest bound relative to the
output's largest magnitude (``err_rel``, ``bound_rel``) -- how tight the check was.
"""
from dataclasses import dataclass

import numpy as np

from . import bounds
from .program import INT_POISON, cut, host_arguments, load_kernel


#: nonzero bounds are widened by 1 % (float64 rounding of the bound itself; a 1-ulp
#: difference can sit right at ``2 u |v|``)
MARGIN = 1.01


@dataclass
class Launch:
    """A program's host launch: ``bases`` and ``recipes`` per array (program order),
    the kernel function, and the positional order of the launch arguments."""
    program: object
    fn: object
    bases: dict
    recipes: dict

    def views(self, bases=None):
        bases = self.bases if bases is None else bases
        return {n: cut(bases[n], self.recipes[n]) for n in bases}

    def positional(self, views):
        p = self.program
        return [views[a.name] for a in p.arrays] + list(p.scalars.values())

    def outputs(self):
        return [a.name for a in self.program.arrays if a.role == "out"]


def prepare(program, data_seed, folder):
    fn = load_kernel(program, folder)
    pairs = host_arguments(program, data_seed)
    return Launch(program, fn, {n: b for n, (b, _) in pairs.items()},
                  {n: r for n, (_, r) in pairs.items()})


def fresh_bases(launch):
    return {n: b.copy() for n, b in launch.bases.items()}


def reference(launch):
    """Output bases (guard rows included) after the interpreter ran the program."""
    from ..interpreter.run import InterpretedKernel
    bases = fresh_bases(launch)
    views = launch.views(bases)
    p = launch.program
    InterpretedKernel(launch.fn)[p.grid](*launch.positional(views), **p.meta)
    return {n: bases[n] for n in launch.outputs()}


def error_bounds(launch):
    """{output name: tolerance array of the output's shape} (nan where not stored)."""
    p = launch.program
    bases = fresh_bases(launch)
    views = launch.views(bases)
    args = {a.name: views[a.name] for a in p.arrays}
    args.update(p.scalars)
    args.update(p.constexprs)
    outs = [views[n] for n in launch.outputs()]
    tol = bounds.tolerances(launch.fn, p.grid, args, outs)
    return {n: tol[id(views[n])] for n in launch.outputs()}


def _poisoned(a):
    if a.dtype.kind in "iu":
        return a == INT_POISON
    return np.isnan(a.astype(np.float64))


def compare(launch, ref, got, tol):
    """{'ok', 'outputs': [per-output dicts]} for device output bases ``got``."""
    report, ok = [], True
    for spec in launch.program.arrays:
        if spec.role != "out":
            continue
        n = spec.shape[0]
        rv, g = ref[spec.name][:n], got[spec.name]
        gv, t = g[:n], tol[spec.name]
        guard_bad = int(np.count_nonzero(~_poisoned(g[n:])))
        stored = ~np.isnan(t)            # the interpreter stored these (same control flow)
        finite = stored & np.isfinite(t)
        r64, g64 = rv.astype(np.float64), gv.astype(np.float64)
        with np.errstate(all="ignore"):
            same = (g64 == r64) | (np.isnan(g64) & np.isnan(r64))
            diff = np.where(same, 0.0, np.abs(g64 - r64))
        diff = np.where(np.isnan(diff), np.inf, diff)
        pg = _poisoned(gv)
        untouched = ~stored & pg
        within = finite & (diff <= np.where(finite, t * MARGIN, 0.0))
        bad = ~(untouched | within | (stored & ~finite))
        nbad = int(np.count_nonzero(bad))
        shown = finite & np.isfinite(r64)
        scale = float(np.max(np.abs(r64[shown]), initial=0.0))
        err = float(np.max(np.where(finite, diff, 0.0), initial=0.0))
        tmax = float(np.max(np.where(finite, t, 0.0), initial=0.0))
        entry = {"name": spec.name, "dtype": spec.dtype, "elements": int(rv.size),
                 "stored": int(np.count_nonzero(stored)),
                 "unchecked": int(np.count_nonzero(stored & ~finite)),
                 "exact": bool(tmax == 0.0 and not np.any(stored & ~finite)),
                 "bad": nbad, "guard_written": guard_bad, "max_err": err, "max_ref": scale,
                 "err_rel": err / scale if scale else err,
                 "bound_rel": tmax / scale if scale else tmax}
        if nbad:
            with np.errstate(all="ignore"):     # unwritten / stray elements count as worst
                excess = np.where(finite, diff / np.maximum(t, 1e-300), np.inf)
            idx = np.unravel_index(int(np.argmax(np.where(bad, excess, -1.0))), bad.shape)
            idx = tuple(int(i) for i in idx)
            entry["worst"] = {"index": list(idx), "got": _num(gv[idx]),
                                  "want": _num(rv[idx]), "bound": _num(t[idx]),
                                  "why": ("written by the device only" if not stored[idx]
                                          else "not written by the device" if pg[idx]
                                          else "beyond the bound")}
        if nbad or guard_bad:
            ok = False
        report.append(entry)
    return {"ok": ok, "outputs": report}


def _num(x):
    v = float(np.asarray(x).astype(np.float64))
    return v if np.isfinite(v) else repr(v)


def describe_mismatch(result):
    """One line per failing output of a :func:`compare` result."""
    lines = []
    for o in result["outputs"]:
        if not o["bad"] and not o["guard_written"]:
            continue
        text = f"{o['name']} ({o['dtype']}): {o['bad']} of {o['elements']} elements wrong"
        if o["guard_written"]:
            text += f", {o['guard_written']} written past the end"
        fb = o.get("worst")
        if fb:
            text += (f"; worst at {fb['index']}: got {fb['got']}, want {fb['want']} "
                     f"(bound {fb['bound']}, {fb['why']})")
        text += f"; max err {o['err_rel']:.3g} of max |ref| (bound {o['bound_rel']:.3g})"
        lines.append(text)
    return lines
