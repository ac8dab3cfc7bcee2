"""``verify(kernel, grid, *args, **meta)``: check a warp-specialized kernel on the CPU.

1. Static checks: the kernel is compiled through ``kernel.partition`` up to ``ws_verify``,
   so the register budget (``ws_registers``) and the shared-memory and tensor-core shape
   checks (``ws_verify``) run; their errors propagate.
2. The schedule simulator (:mod:`numba_ws.interpreter.simulator`) runs the partitioned IR
   for a few seeds over the program ids of the grid, each seed on fresh copies of the
   array arguments.
3. The outputs of every seed are compared with a reference run of the original tile
   program on the same program ids. With ``exact=True`` (default) both sides use
   INTERPRET's rules with a fixed-order fp32 dot and must agree bit for bit (BLAS sums in
   an order that depends on the tile shape, so a consumer's row slice of a dot can differ
   from the whole dot in the last bit); with ``exact=False`` both use INTERPRET as is and
   must agree within a tolerance of a few ulps of the output dtype.

verify's own keywords (``seeds``, ``max_programs``, ``raise_on_finding``, ``exact``,
``max_delay``) are reserved; every other keyword is a constexpr or a launch option.
"""
import itertools
from dataclasses import dataclass, field

import numpy as np

from .errors import WSScheduleError
from .interpreter.run import Interpreter, with_device_functions_mapped
from .interpreter.simulator import Findings, language_ops, simulate
from .passes.registers import register_split
from .passes.verify import smem_limit
from .runtime.binding import bind, resolve_grid


@dataclass
class Report:
    """What :func:`verify` found. ``ok``: no finding and outputs equal to the reference."""
    kernel: str
    grid: tuple
    config: dict
    seeds: tuple
    programs: list
    findings: list
    outputs_match: bool
    max_error: float
    comparison: str
    smem_bytes: int
    smem_limit: int
    registers: dict
    channels: list = field(default_factory=list)
    steps: int = 0
    mismatches: list = field(default_factory=list)

    @property
    def ok(self):
        return not self.findings and self.outputs_match

    @property
    def kinds(self):
        return {f.kind for f in self.findings}

    def __str__(self):
        cfg = ", ".join(f"{k}={v}" for k, v in self.config.items())
        r = self.registers
        out = [f"schedule check of {self.kernel}: {'OK' if self.ok else 'PROBLEMS'}",
               f"  config: {cfg}",
               f"  grid {self.grid}: {len(self.programs)} program(s) simulated x seeds "
               f"{list(self.seeds)}, {self.steps} scheduling steps",
               f"  shared memory: {self.smem_bytes} of {self.smem_limit} bytes",
               f"  registers: {r['entry']} at entry; producer {r['producer']}, consumers "
               f"{r['consumer']}; budget {r['used']} of {r['available']} per CTA"]
        out += [f"  {c}" for c in self.channels]
        verdict = "match" if self.outputs_match else "DIFFER"
        out.append(f"  outputs vs interpreter ({self.comparison}): {verdict}, max |error| "
                   f"{self.max_error:.3g}")
        out += [f"    {m}" for m in self.mismatches]
        out.append(f"  findings: {len(self.findings)}")
        out += [f"  - {f}" for f in self.findings]
        return "\n".join(out)


def _programs(grid, cap):
    """Program ids to simulate: all (row-major), or ``cap`` of them spread evenly."""
    pids = list(itertools.product(*(range(n) for n in grid)))
    if cap is None or cap >= len(pids):
        return pids
    idx = sorted({round(i * (len(pids) - 1) / max(cap - 1, 1)) for i in range(cap)})
    return [pids[i] for i in idx]


class _Reference(Interpreter):
    """The interpreter with a chosen op table (the fixed-order dot in exact mode)."""

    def __init__(self, grid, table):
        super().__init__(grid)
        self.table = table

    def call(self, name, *args):
        return self.table[name](*args)


def reference(fn, grid, args, pids, table):
    """Run the original tile program ``fn(**args)`` for ``pids`` (arrays updated in place)."""
    interp = _Reference(grid, table)
    fn = with_device_functions_mapped(fn)
    args = {n: v.item() if isinstance(v, np.generic) else v for n, v in args.items()}
    for pid in pids:
        with interp.program(pid), np.errstate(all="ignore"):
            fn(**args)


def _fresh(args):
    return {n: v.copy() if isinstance(v, np.ndarray) else v for n, v in args.items()}


def _compare(name, got, want, exact):
    """(equal, max |error|, description or None) of one array argument."""
    if exact:
        same = np.array_equal(got, want, equal_nan=True)
        tol = None
    else:
        finfo = np.finfo(want.dtype) if np.issubdtype(want.dtype, np.floating) else None
        rtol = 4 * float(finfo.eps) if finfo is not None else 0.0
        finite = np.abs(want[np.isfinite(want)].astype(np.float64))
        scale = float(finite.max()) if finite.size else 0.0
        tol = rtol * max(scale, 1.0)
        same = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                           atol=tol, equal_nan=True)
    with np.errstate(all="ignore"):
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    err = float(np.nanmax(diff)) if diff.size and not np.isnan(diff).all() else 0.0
    if same:
        return True, err, None
    bad = int(np.count_nonzero(~np.isclose(got.astype(np.float64), want.astype(np.float64),
                                           rtol=0, atol=tol or 0, equal_nan=True)))
    first = np.argwhere(diff > (tol or 0))
    at = tuple(int(i) for i in first[0]) if len(first) else "?"
    return False, err, f"{name}: {bad} element(s) differ, first at {at}, max |error| {err:.3g}"


def check_state(state, fn, grid, args, meta, seeds=3, max_programs=None, exact=True,
                max_delay=8, raise_on_finding=False):
    """Simulate an already partitioned ``state`` of ``fn`` (see :func:`verify`).

    Tests use this on a state whose IR or plan they changed on purpose.
    """
    bound = bind(fn, args, meta)
    grid = resolve_grid(grid, bound.meta)
    pids = _programs(grid, max_programs)
    seeds = tuple(range(seeds)) if isinstance(seeds, int) else tuple(seeds)
    table = language_ops(exact)
    want = _fresh(bound.args)
    reference(fn, grid, want, pids, table)
    findings, steps, match, max_err, mismatches = Findings(), 0, True, 0.0, []
    for seed in seeds:
        got = _fresh(bound.args)
        _, n = simulate(state, grid, got, pids, seed, table, findings, max_delay)
        steps += n
        for name, value in got.items():
            if isinstance(value, np.ndarray):
                same, err, text = _compare(name, value, want[name], exact)
                max_err = max(max_err, err)
                if not same:
                    match = False
                    mismatches.append(f"seed {seed}: {text}")
    plan = state.ws
    report = Report(
        kernel=fn.__name__, grid=tuple(grid), config=plan.options.as_dict(), seeds=seeds,
        programs=pids, findings=list(findings), outputs_match=match, max_error=max_err,
        comparison="bitwise, fixed-order fp32 dot" if exact else "within 4 ulps of the output",
        smem_bytes=plan.smem_bytes, smem_limit=smem_limit(plan.cc),
        registers=_registers(plan), channels=[c.describe() for c in plan.channels],
        steps=steps, mismatches=mismatches)
    if raise_on_finding and not report.ok:
        raise WSScheduleError(str(report))
    return report


def _registers(plan):
    opts = plan.options
    r, dec, inc = register_split(opts)
    producer, consumer = dec or r, inc or r
    return {"entry": r, "producer": producer, "consumer": consumer,
            "used": 128 * producer + opts.num_consumer_groups * 128 * consumer,
            "available": opts.num_threads * r}


def verify(kernel, grid, *args, seeds=3, max_programs=None, raise_on_finding=False,
           exact=True, max_delay=8, **meta):
    """Partition ``kernel`` for ``args``/``meta`` and check its schedule; a :class:`Report`.

    ``kernel``: a ``@numba_ws.jit`` kernel or a plain tile function; ``grid``: tuple, int
    or ``callable(meta)``; ``seeds``: how many seeds (or which); ``max_programs``: cap on
    the program ids simulated per seed (default all); ``raise_on_finding``: raise
    :class:`~numba_ws.errors.WSScheduleError` (its text is the report) unless ``ok``;
    ``max_delay``: a copy lands 1..max_delay scheduling steps after it is issued.
    Compile errors of the partitioning and static-check passes propagate.
    """
    from .runtime.jit import Kernel, jit
    kern = kernel if isinstance(kernel, Kernel) else jit(kernel)
    state = kern.partition(*args, **meta)
    from .codegen.debug import drop_releases   # NUMBA_WS_DEBUG_DROP_RELEASE: as the GPU gets it
    drop_releases(state)
    return check_state(state, kern.fn, grid, args, meta, seeds=seeds,
                       max_programs=max_programs, exact=exact, max_delay=max_delay,
                       raise_on_finding=raise_on_finding)
