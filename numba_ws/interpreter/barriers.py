"""The simulated hardware of one CTA: mbarriers and the shared-memory slots of a channel.

:class:`Barrier` models ``mbarrier`` on sm_90 (see /work/shared/hopper-notes.md):

- initialised with ``expected`` arrivals; ``completed`` counts finished phases, so the
  current phase has parity ``completed % 2``;
- ``arrive(who, tx)`` is ``mbarrier.arrive.expect_tx``: it adds ``tx`` expected
  transaction bytes, then one arrival; ``complete_tx(n)`` is a copy landing (the byte
  count may go negative before the matching ``expect_tx``, as on the hardware);
- the current phase completes when every expected arrival came and the transaction count
  is back to 0; the barrier then resets for the next phase;
- ``passes(parity)`` is ``mbarrier.try_wait.parity``: true once the phase with that parity
  has completed, i.e. when the current phase's parity differs (a fresh barrier passes
  parity 1, which is why a producer's first ``acquire`` of a slot does not block).

:class:`ChannelState` holds, per channel of the plan, one full and one empty barrier per
slot, the slot data per ``(slot, part)`` and the per-slot counters the checks read. Fills
of a slot are numbered 0, 1, ... (fill ``n`` is ring pass ``n`` of that slot, so its
phase parity is ``n % 2``). Invariants: ``commits[s]`` fills were committed;
``waits[g][s]`` / ``releases[g][s]`` count consumer ``g``'s full-waits and releases;
consumer ``g`` holds fill ``releases[g][s]`` exactly while ``waits > releases``;
``landed[(s, part)]`` is the fill whose bytes sit in that part. With ping-pong consumers
(``Channel.ping_pong``) the groups take turns at one ring: the counters are shared (key
``TURNS``) and ``holder[s]`` is the group that waited for the slot's current fill.
"""
import numpy as np


class Barrier:
    """One mbarrier: arrivals, transaction bytes and phase parity (see module doc)."""

    def __init__(self, expected, name):
        self.expected = expected
        self.name = name
        self.completed = 0
        self.tx = 0
        self.arrived = []        # who arrived in the current phase, in order
        self.history = []        # per completed phase: tuple of who arrived

    @property
    def parity(self):
        return self.completed % 2

    def passes(self, parity):
        return self.parity != parity

    def arrive(self, who, tx=0):
        """One arrival (after adding ``tx`` expected bytes). Returns a problem or None."""
        problem = None
        if who in self.arrived:
            problem = (f"{self.name}: task {who} arrives twice in phase {self.completed} "
                       f"(more arrivals than the {self.expected} expected per phase)")
        self.tx += tx
        self.arrived.append(who)
        self._maybe_complete()
        return problem

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._maybe_complete()

    def _maybe_complete(self):
        if len(self.arrived) >= self.expected and self.tx == 0:
            self.history.append(tuple(self.arrived))
            self.completed += 1
            self.arrived = []

    def partial(self):
        """A description of an unfinished phase that has started, or None."""
        if not self.arrived and self.tx == 0:
            return None
        return (f"{self.name}: phase {self.completed} (parity {self.parity}) stays "
                f"incomplete with {len(self.arrived)} of {self.expected} arrival(s)"
                f"{' from tasks ' + str(sorted(set(self.arrived))) if self.arrived else ''}"
                f" and {self.tx} transaction byte(s) outstanding")


def part_bytes(member, part):
    """Bytes a copy of ``part`` completes on the full barrier (lower_loads' count)."""
    if "bytes" in part:
        return part["bytes"]
    return int(np.prod(part["shape"])) * member["dtype"].itemsize


#: The counter key of a ping-pong channel, whose groups share one ring.
TURNS = "turns"


class ChannelState:
    """Slots, barriers and counters of one channel (see module doc for the invariants)."""

    def __init__(self, ch, groups):
        self.ch = ch
        self.id = ch.id
        self.num_slots = ch.num_slots
        self.consumers = tuple(ch.consumers)
        self.tx_bytes = sum(part_bytes(m, p) for m in ch.members for p in m["parts"])
        n = range(self.num_slots)
        self.full = [Barrier(1, f"full barrier of channel {ch.id} slot {s}") for s in n]
        self.empty = [Barrier(ch.arrivals, f"empty barrier of channel {ch.id} slot {s}")
                      for s in n]
        self.data = {}
        self.landed = {}
        self.acquires = [0] * self.num_slots
        self.commits = [0] * self.num_slots
        keys = [TURNS] if ch.ping_pong else groups
        self.waits = {k: [0] * self.num_slots for k in keys}
        self.releases = {k: [0] * self.num_slots for k in keys}
        self.holder = [None] * self.num_slots    # ping-pong: the group holding the slot

    def key(self, g):
        """Whose counters group ``g``'s waits and releases advance (see module doc)."""
        return TURNS if self.ch.ping_pong else g

    def release_keys(self):
        """The counters whose releases a refill of a slot must wait for."""
        return [TURNS] if self.ch.ping_pong else list(self.consumers)

    def owners(self, g):
        """The groups whose releases complete a phase of an empty barrier released by g."""
        return (g,) if self.ch.ping_pong else self.consumers

    def holds(self, g, s):
        k = self.key(g)
        return self.waits[k][s] > self.releases[k][s] and \
            (not self.ch.ping_pong or self.holder[s] == g)

    def barriers(self):
        return self.full + self.empty

    def names(self):
        return ", ".join(m["var"] for m in self.ch.members)
