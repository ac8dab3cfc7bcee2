"""Schedule simulator: runs the *partitioned* Numba IR (``state.func_ir`` after
``ws_verify``) with one coroutine per warp group on simulated Hopper hardware.

One program instance at a time: every warp group is a :class:`~.ir_exec.GroupRun`
generator; at each scheduling step a seeded RNG picks one runnable group and runs it to
its next language or stage op. Stage ops act on :mod:`.barriers` (mbarriers, slots):

- ``ws_producer_acquire(ch, s, p)`` blocks until empty[s] passes parity ``p ^ 1``;
- ``ws_copy`` snapshots the tile now and lands it at a random later step (an async copy),
  then completes its bytes on full[s]; ``ws_producer_commit`` is one arrival with
  ``expect_tx`` of the whole slot (full[s] expects 1 arrival + every part's bytes); a TMA
  copy, and a staged (TMA) ``ws.store`` / ``ws.atomic_add``, whose innermost coordinate is
  not a multiple of 16 bytes is a ``tma_coordinate`` finding (the GPU faults on it);
- ``ws_consumer_wait(ch, s, p)`` blocks until full[s] passes parity ``p``; ``ws_view``
  returns a copy of the part and records it as a view of (channel, slot, fill);
- ``ws.dot`` is asynchronous (one wgmma group): it reads its view operands' slots, and
  its result may not be read (except as the ``acc`` of a later dot), until a
  ``ws_dot_wait(n)`` leaves at most ``n`` newer dots in flight; ``ws_dot_fence(acc)`` is
  ``acc``; ``ws_consumer_release`` (and ``ws_consumer_release_prev`` with a slot >= 0)
  arrives on empty[s] (``channel.arrivals`` expected per phase);
- ``ws_tile_stage(x)`` (a dot's register B written to the group's own operand buffer)
  is a copy of the tile: no slot, no barrier;
- ``ws_tile_read(view)`` (the layouts pass's read of a slot part into registers) is a read
  of the view's slot, checked like any other; ``ws_tile_convert`` is the value itself
  (broadcast to its shape);
- ping-pong (``Channel.ping_pong``): ``ws_turn_wait(i, p)`` blocks until consumer i's
  turn barrier passes parity ``p`` and returns the ring counter that ``ws_turn_pass(i,
  ring)`` handed over; the groups then share one set of slot counters.

Findings (:data:`KINDS`) name channel, slot, phase, task and source line. The checks rest
on one protocol invariant: the ``k``-th wait of a group on a slot's barrier is for that
barrier's phase ``k`` (parity ``k % 2``; with ping-pong, the ``k``-th wait of any group,
the turns ordering them), and fill ``n`` of a slot may only be written once every
consumer released fills ``0..n-1``.
"""
import heapq
import itertools
import os
from collections import namedtuple

import numpy as np

from . import ops as _ops
from .barriers import Barrier, ChannelState, part_bytes
from .findings import KINDS, Finding, Findings, role  # noqa: F401  (KINDS re-exported)
from .ir_exec import GroupRun, IRError, Wait
from .ops import INTERPRET
from .run import Interpreter

ViewRef = namedtuple("ViewRef", "ch slot part group fill")
#: One in-flight ws.dot (a wgmma group): its line, the (channel, slot) it reads, its result.
Dot = namedtuple("Dot", "line reads result")


class _Abort(Exception):
    """Stop simulating this program instance (its state is no longer meaningful)."""


def fixed_order_dot(a, b, acc=None):
    """``INTERPRET['dot']`` with a fixed fp32 summation order per element (no BLAS).

    The result of a dot on any row or column slice equals the same slice of the whole dot
    bit for bit, so a consumer's share of a data-partitioned dot can be compared exactly.
    """
    if a.dtype != b.dtype or a.ndim != 2 or b.ndim != 2:
        return INTERPRET["dot"](a, b, acc)          # its error messages
    if a.dtype == np.float32:
        a32, b32 = _ops._tf32(a), _ops._tf32(b)
    else:
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(all="ignore"):
        out = np.einsum("ik,kj->ij", _ops._plain(a32), _ops._plain(b32), optimize=False)
        if acc is not None:
            out += _ops._plain(acc)
    return _ops.as_tile(out)


def language_ops(exact=True):
    """The op table the simulator (and the reference run) use: INTERPRET, with
    :func:`fixed_order_dot` when ``exact``."""
    table = dict(INTERPRET)
    if exact:
        table["dot"] = fixed_order_dot
    return table


class Machine:
    """One program instance on the simulated CTA; the hooks :class:`GroupRun` calls."""

    def __init__(self, state, args, findings, rng, ops, pid, seed, max_delay, max_steps):
        plan = state.ws
        self.fir, self.args, self.ops = state.func_ir, args, ops
        self.groups = tuple(sorted(plan.branches))   # one warp group per task clone
        self.channels = [ChannelState(ch, self.groups) for ch in plan.channels]
        self.findings, self.rng, self.pid, self.seed = findings, rng, pid, seed
        self.staged = plan.staged                     # store target -> chunk: TMA stores
        self.max_delay, self.max_steps = max_delay, max_steps
        self.copies, self.seq, self.step = [], itertools.count(), 0
        self.dots = {g: [] for g in self.groups}      # per group: in-flight [Dot]
        self.results = {}                              # id(result) -> (result, Dot)
        self.views = {}                                # id(tile) -> (tile, ViewRef)
        n = plan.num_consumers                         # ping-pong turns, per group:
        self.turns = [Barrier(1, f"turn barrier of task {g + 1}") for g in range(n)]
        self.tokens = [0] * n                          # the ring counter handed over
        self.turn_waits = [0] * n

    # -- findings ---------------------------------------------------------------------
    def find(self, kind, message, run=None, cs=None, slot=None, phase=None, task=None,
             stmt=None):
        stmt = stmt if stmt is not None else (run.stmt if run is not None else None)
        loc = getattr(stmt, "loc", None)
        self.findings.add(Finding(
            kind, message, channel=cs.id if cs is not None else None, slot=slot, phase=phase,
            task=task if task is not None else (run.group if run is not None else None),
            line=getattr(loc, "line", None),
            file=os.path.basename(loc.filename) if getattr(loc, "filename", None) else None,
            pid=self.pid, seed=self.seed))

    # -- stage ops --------------------------------------------------------------------
    def stage(self, run, name, args, stmt):
        if name == "ws_warp_group":
            return run.group
        if name == "ws_dot_wait":
            self._retire(run.group, args[0])
        if name in ("ws_turn_wait", "ws_turn_pass"):
            return (yield from getattr(self, "_" + name[3:])(run, *args))
        if name == "ws_tile_read":          # ld.shared of a view: a read of its slot
            self.read(run, [args[0]])
            yield None
            return _ops.as_tile(np.array(args[0], copy=True))
        if name == "ws_tile_stage":         # the group's own operand buffer: no slot
            yield None
            return _ops.as_tile(np.array(args[0], copy=True))
        if name == "ws_tile_convert":       # registers only: no slot, no barrier
            yield None
            return _ops.as_tile(np.array(np.broadcast_to(args[0], tuple(args[1])), copy=True))
        if name in ("ws_dot_wait", "ws_reg_alloc", "ws_reg_dealloc", "ws_dot_fence"):
            yield None
            return args[0] if name == "ws_dot_fence" else None
        if not 0 <= args[0] < len(self.channels):
            raise IRError(f"{name}: no channel {args[0]}")
        cs, slot = self.channels[args[0]], args[1]
        if name == "ws_consumer_release_prev" and slot < 0:
            yield None                      # no previous slot to give back
            return None
        if not 0 <= slot < cs.num_slots:
            self.find("bad_slot", f"{name} uses slot {slot} but channel {cs.id} "
                      f"({cs.names()}) has {cs.num_slots} slot(s)", run, cs, slot)
            raise _Abort
        handler = {"ws_producer_acquire": self._acquire, "ws_producer_commit": self._commit,
                   "ws_consumer_wait": self._wait, "ws_view": self._view,
                   "ws_consumer_release": self._release,
                   "ws_consumer_release_prev": self._release}.get(name, self._copy)
        return (yield from handler(run, cs, slot, *args[2:]))

    def _turn_wait(self, run, group, parity):
        """ws_turn_wait: the m-th wait of group i expects parity m % 2 (group 0: (m+1) % 2,
        its first turn is its own); returns the ring counter handed over."""
        if group != run.group - 1:
            self.find("bad_slot", f"task {run.group} waits for the turn of task {group + 1}",
                      run)
        m, bar = self.turn_waits[group], self.turns[group]
        want = (m + (group == 0)) % 2
        if parity != want:
            self.find("wrong_phase", f"turn wait {m} of task {group + 1} uses parity "
                      f"{parity}, expected {want}", run, phase=parity)
        yield Wait(lambda: bar.passes(parity), f"ws_turn_wait {m} (parity {parity}) on the "
                   f"{bar.name}", bar, None, None, parity)
        self.turn_waits[group] += 1
        return self.tokens[group]

    def _turn_pass(self, run, group, ring):
        """ws_turn_pass: hand the ring counter and the turn to consumer ``group``."""
        self.tokens[group] = ring
        problem = self.turns[group].arrive(run.group)
        if problem:
            self.find("arrival_count", problem, run)
        yield None

    def _retire(self, g, n):
        """ws_dot_wait(n): all but the newest ``n`` dot groups of ``g`` complete."""
        dots = self.dots[g]
        keep = dots[len(dots) - n:] if n else []
        for dot in dots[:len(dots) - len(keep)]:
            self.results.pop(id(dot.result), None)
        self.dots[g] = keep

    def _acquire(self, run, cs, s, phase):
        k, bar = cs.acquires[s], cs.empty[s]
        if phase != k % 2:
            self.find("wrong_phase", f"ProducerAcquire of slot {s} is pass {k} of that slot "
                      f"(phase {k % 2}) but waits with phase {phase}", run, cs, s, phase)
        yield Wait(lambda: bar.passes(phase ^ 1),
                   f"ws_producer_acquire pass {k} (phase {phase}) on the {bar.name}",
                   bar, cs.id, s, phase)
        if bar.completed > k:
            self.find("wrong_phase", f"ProducerAcquire pass {k} of slot {s} waits for phase "
                      f"{k - 1} of the {bar.name}, which already completed phase {k} too",
                      run, cs, s, phase)
        cs.acquires[s] += 1

    def _copy(self, run, cs, s, part_id, array, offsets, shape):
        try:
            member, part = cs.ch.part(part_id)
        except KeyError:
            raise IRError(f"channel {cs.id} has no part {part_id}") from None
        if tuple(shape) != tuple(part["shape"]):
            raise IRError(f"{member['var']}: a copy of shape {tuple(shape)} into a part of "
                          f"shape {tuple(part['shape'])}")
        n = cs.commits[s]
        if cs.acquires[s] <= n:
            self.find("overwrite", f"the producer copies {member['var']} into slot {s} (fill "
                      f"{n}) without a ProducerAcquire of it", run, cs, s, n % 2)
        for c in cs.release_keys():
            if cs.releases[c][s] < n:
                self.find("overwrite", f"the producer copies {member['var']} (fill {n}) into "
                          f"slot {s} while task {c} has not released fill "
                          f"{cs.releases[c][s]} of it", run, cs, s, n % 2)
        for g, dots in self.dots.items():
            lines = [d.line for d in dots if (cs.id, s) in d.reads]
            if lines:
                self.find("dot_in_flight", f"the producer overwrites slot {s} while the "
                          f"ws.dot at line {lines[0]} of task {g} still reads it",
                          run, cs, s, n % 2)
        if member.get("path") == "tma":
            self._tma_coordinate(run, offsets[0 if member["transposed"] else -1],
                                 member["dtype"].itemsize, f"the TMA load of "
                                 f"{member['var']}", cs, s)
        tile = self.ops["load"](array, tuple(offsets), tuple(shape))
        land = self.step + int(self.rng.integers(1, self.max_delay + 1))
        heapq.heappush(self.copies, (land, next(self.seq), cs, s, part_id, tile, n,
                                     part_bytes(member, part)))
        yield None

    def _commit(self, run, cs, s):
        problem = cs.full[s].arrive(run.group, cs.tx_bytes)
        if problem:
            self.find("arrival_count", problem, run, cs, s, cs.commits[s] % 2)
        cs.commits[s] += 1
        yield None

    def _wait(self, run, cs, s, phase):
        g = run.group
        k, bar = cs.waits[cs.key(g)][s], cs.full[s]
        if phase != k % 2:
            self.find("wrong_phase", f"ConsumerWait of slot {s} is pass {k} of that slot "
                      f"(phase {k % 2}) but waits with phase {phase}", run, cs, s, phase)
        yield Wait(lambda: bar.passes(phase), f"ws_consumer_wait pass {k} (phase {phase}) "
                   f"on the {bar.name}", bar, cs.id, s, phase)
        if bar.completed >= k + 2:
            self.find("wrong_phase", f"ConsumerWait pass {k} of slot {s} waits for phase {k} "
                      f"of the {bar.name}, which already completed phase {k + 1} too",
                      run, cs, s, phase)
        cs.waits[cs.key(g)][s] += 1
        cs.holder[s] = g

    def _view(self, run, cs, s, part_id, shape, dtype):
        g = run.group
        fill = cs.releases[cs.key(g)][s]
        member = cs.ch.part(part_id)[0]
        if not cs.holds(g, s):
            if fill > 0:
                self.find("read_after_release", f"task {g} reads {member['var']} from slot {s} "
                          f"after releasing fill {fill - 1}, without waiting for the next",
                          run, cs, s, fill % 2)
            else:
                self.find("read_not_full", f"task {g} reads {member['var']} from slot {s} "
                          "without a ConsumerWait on it", run, cs, s, 0)
        elif cs.landed.get((s, part_id)) != fill or cs.full[s].completed <= fill:
            self.find("read_not_full", f"task {g} reads {member['var']} from slot {s} for fill "
                      f"{fill} but that fill is not full (the full barrier completed "
                      f"{cs.full[s].completed} phase(s))", run, cs, s, fill % 2)
        data = cs.data.get((s, part_id))
        view = _ops.as_tile(np.array(data if data is not None else np.zeros(shape, dtype.dtype),
                                      dtype=dtype.dtype, copy=True))
        if view.shape != tuple(shape):
            raise IRError(f"ws_view shape {tuple(shape)} but the part holds {view.shape}")
        self.views[id(view)] = (view, ViewRef(cs.id, s, part_id, g, fill))
        yield None
        return view

    def _release(self, run, cs, s):
        g = run.group
        fill, bar = cs.releases[cs.key(g)][s], cs.empty[s]
        if not cs.holds(g, s):
            self.find("arrival_count", f"task {g} releases slot {s} which it does not hold: "
                      "an extra arrival on its empty barrier", run, cs, s, fill % 2)
        for d in self.dots[g]:
            if (cs.id, s) in d.reads:
                self.find("dot_in_flight", f"task {g} releases slot {s} while the ws.dot at "
                          f"line {d.line} may still read it (no ws_dot_wait retiring it "
                          "before the release)", run, cs, s, fill % 2)
                break
        before = bar.completed
        problem = bar.arrive(g)
        if problem:
            self.find("arrival_count", problem, run, cs, s, fill % 2)
        owners = cs.owners(g)
        if bar.completed > before and set(bar.history[-1]) != set(owners):
            self.find("arrival_count", f"phase {before} of the {bar.name} completed with "
                      f"arrivals from tasks {sorted(bar.history[-1])}; one from each consumer "
                      f"{list(owners)} is needed (it expects {bar.expected})",
                      run, cs, s, fill % 2)
        cs.releases[cs.key(g)][s] += 1
        cs.holder[s] = None
        yield None

    # -- language ops and reads of views ----------------------------------------------
    def _ref(self, value):
        entry = self.views.get(id(value)) if isinstance(value, np.ndarray) else None
        return entry[1] if entry is not None and entry[0] is value else None

    def read(self, run, values):
        for v in values:
            pending = self.results.get(id(v)) if isinstance(v, np.ndarray) else None
            if pending is not None and pending[0] is v:
                self.find("acc_in_flight", f"task {run.group} reads the result of the ws.dot "
                          f"at line {pending[1].line} before a ws_dot_wait retires that dot "
                          "(the tensor cores may still be writing it)", run)
            ref = self._ref(v)
            if ref is None:
                continue
            cs, s = self.channels[ref.ch], ref.slot
            var = cs.ch.part(ref.part)[0]["var"]
            if not cs.holds(ref.group, s) or cs.releases[cs.key(ref.group)][s] != ref.fill:
                self.find("read_after_release", f"task {ref.group} reads {var} (slot {s}, "
                          f"fill {ref.fill}) after releasing it", run, cs, s, ref.fill % 2)
            elif cs.landed.get((s, ref.part)) != ref.fill:
                self.find("overwrite", f"slot {s} was overwritten while task {ref.group} still "
                          f"reads {var} (fill {ref.fill})", run, cs, s, ref.fill % 2)

    def op(self, run, name, args, kws):
        """A language op. A dot's ``acc`` may be an in-flight dot result (wgmma chains its
        accumulator in registers); every other operand is a read."""
        if name in ("store", "atomic_add") and run.stmt.target.name in self.staged:
            self._tma_coordinate(run, args[1][-1], args[0].dtype.itemsize,
                                 f"the staged (TMA) ws.{name}")
        acc = kws.get("acc", args[2] if len(args) > 2 else None) if name == "dot" else None
        self.read(run, [v for v in list(args) + list(kws.values()) if acc is None or v is not acc])
        result = self.ops[name](*args, **kws)
        if name == "dot":
            operands = list(args[:2]) + [kws.get("a"), kws.get("b")]
            refs = [r for r in map(self._ref, operands) if r is not None]
            dot = Dot(run.stmt.loc.line, {(r.ch, r.slot) for r in refs}, result)
            self.dots[run.group].append(dot)
            self.results[id(result)] = (result, dot)
        elif name == "trans" and self._ref(args[0]) is not None:
            self.views[id(result)] = (result, self._ref(args[0]))
        return result

    def _tma_coordinate(self, run, coordinate, itemsize, what, cs=None, slot=None):
        """A finding when a TMA box's innermost ``coordinate`` (elements) is not a multiple
        of 16 bytes: the static checks (passes/offset_align.py) should have kept the
        access off TMA; this catches their misses on the values a launch really has."""
        if int(coordinate) * itemsize % 16:
            self.find("tma_coordinate", f"{what} starts at innermost coordinate "
                      f"{int(coordinate)} ({int(coordinate) * itemsize} bytes, not a "
                      f"multiple of 16)", run, cs, slot)

    # -- scheduling -------------------------------------------------------------------
    def _land(self, until):
        while self.copies and self.copies[0][0] <= until:
            _, _, cs, s, part_id, tile, fill, nbytes = heapq.heappop(self.copies)
            cs.data[(s, part_id)] = tile
            cs.landed[(s, part_id)] = fill
            cs.full[s].complete_tx(nbytes)

    def run(self):
        """Simulate this program instance to its end, a deadlock or an error."""
        runs = {g: GroupRun(self.fir, self.args, self, g) for g in self.groups}
        gens = {g: r.run() for g, r in runs.items()}
        waits, live = dict.fromkeys(self.groups), list(self.groups)
        try:
            while live:
                self._land(self.step)
                ready = [g for g in live if waits[g] is None or waits[g].ready()]
                if not ready:
                    if self.copies:
                        self.step = max(self.step, self.copies[0][0])
                        continue
                    self._deadlock(runs, waits, live)
                    break
                g = ready[int(self.rng.integers(len(ready)))]
                try:
                    waits[g] = gens[g].send(None)
                except StopIteration:
                    live.remove(g)
                    waits[g] = None
                except _Abort:
                    return self.step
                except Exception as e:      # the kernel's own error, or unmodelled IR
                    self.find("exception", f"{type(e).__name__}: {e}", runs[g])
                    return self.step
                self.step += 1
                if self.step > self.max_steps:
                    self.find("step_limit", f"stopped after {self.max_steps} steps; still "
                              f"running: tasks {live}")
                    return self.step
        finally:
            for gen in gens.values():
                gen.close()
        self._land(float("inf"))
        self._end_checks(runs, waits, live)
        return self.step

    def _deadlock(self, runs, waits, live):
        lines, first = [], None
        for g in live:
            w, stmt = waits[g], runs[g].stmt
            bar = w.barrier
            missing = ""
            cs = self.channels[w.channel] if w.channel is not None else None
            if cs is not None and bar in cs.empty and not cs.ch.ping_pong:
                missing = sorted(set(cs.consumers) - set(bar.arrived))
                missing = f"; no arrival yet from tasks {missing}" if missing else ""
            lines.append(f"task {g} ({role(g)}) at line {stmt.loc.line}: {w.what}; the barrier "
                         f"completed {bar.completed} phase(s), {len(bar.arrived)} of "
                         f"{bar.expected} arrival(s) and {bar.tx} tx byte(s) pending{missing}")
            first = first or (g, w, stmt)
        g, w, stmt = first
        self.find("deadlock", "every unfinished warp group is blocked:\n    " +
                  "\n    ".join(lines),
                  cs=self.channels[w.channel] if w.channel is not None else None, slot=w.slot,
                  phase=w.phase, task=g, stmt=stmt)

    def _end_checks(self, runs, waits, live):
        for cs in self.channels:
            for s in range(cs.num_slots):
                for bar in (cs.full[s], cs.empty[s]):
                    text = bar.partial()
                    if text is None:
                        continue
                    blocked = [g for g in live if waits[g] is not None and waits[g].barrier is bar]
                    who = f"; it blocks task(s) {blocked}" if blocked else " at the end of the run"
                    stmt = runs[blocked[0]].stmt if blocked else None
                    self.find("arrival_count", text + who, cs=cs, slot=s, phase=bar.parity,
                              task=blocked[0] if blocked else None, stmt=stmt)


def simulate(state, grid, args, pids, seed, ops=None, findings=None, max_delay=8,
             max_steps=2_000_000):
    """Run the partitioned IR of ``state`` for each program id of ``pids`` (in order).

    ``args``: parameter name -> value (arrays are used in place, as on the GPU);
    ``grid``: the resolved grid. Returns ``(findings, steps)``.
    """
    findings = Findings() if findings is None else findings
    ops = ops or language_ops()
    interp = Interpreter(grid)
    args = {n: v.item() if isinstance(v, np.generic) else v for n, v in args.items()}
    steps = 0
    for i, pid in enumerate(pids):
        rng = np.random.default_rng([seed, i])
        with interp.program(pid), np.errstate(all="ignore"):
            steps += Machine(state, args, findings, rng, ops, tuple(pid), seed,
                             max_delay, max_steps).run()
    return findings, steps
