"""What the schedule simulator reports: :class:`Finding` and its kinds.

A finding names the channel, slot, phase parity, task (0 producer, 1..G consumers) and
source line where the problem shows, plus the program instance and seed that showed it.
:class:`Findings` merges repeats of one (kind, channel, slot, task, line) into ``count``,
keeping the first occurrence's message.
"""
from dataclasses import dataclass

KINDS = {
    "deadlock": "every unfinished warp group is blocked",
    "overwrite": "a slot is written while a consumer has not released its previous contents",
    "read_not_full": "a consumer reads a slot that is not full (or that it never waited for)",
    "read_after_release": "a consumer reads a slot after releasing it",
    "wrong_phase": "a wait on a phase other than the one the ring position needs",
    "arrival_count": "a barrier gets arrivals that can never complete a phase correctly",
    "dot_in_flight": "a slot is released or overwritten while a ws.dot still reads it",
    "acc_in_flight": "a ws.dot result is read before a ws_dot_wait retires that dot",
    "bad_slot": "a slot index outside the channel's slots",
    "tma_coordinate": "a TMA box whose innermost coordinate is not a multiple of 16 bytes "
                      "(the GPU stops with an illegal instruction)",
    "exception": "the program raised while running",
    "step_limit": "the run did not finish within the step limit",
}


def role(task):
    return "producer" if task == 0 else f"consumer {task}"


@dataclass
class Finding:
    """One problem (see module doc); ``kind`` is a key of :data:`KINDS`."""
    kind: str
    message: str
    channel: object = None
    slot: object = None
    phase: object = None
    task: object = None
    line: object = None
    file: object = None
    pid: object = None
    seed: object = None
    count: int = 1

    def key(self):
        return (self.kind, self.channel, self.slot, self.task, self.line)

    def __str__(self):
        where = [f"{n} {v}" for n, v in (("channel", self.channel), ("slot", self.slot),
                                         ("phase", self.phase)) if v is not None]
        if self.task is not None:
            where.append(f"task {self.task} ({role(self.task)})")
        if self.line is not None:
            where.append(f"{self.file or 'line'}:{self.line}")
        where += [f"program {self.pid}", f"seed {self.seed}"]
        times = f" [x{self.count}]" if self.count > 1 else ""
        return f"[{self.kind}] {self.message} ({', '.join(where)}){times}"


class Findings(list):
    """Findings in order of discovery, repeats merged into ``count``."""

    def add(self, finding):
        for f in self:
            if f.key() == finding.key():
                f.count += 1
                return
        self.append(finding)
