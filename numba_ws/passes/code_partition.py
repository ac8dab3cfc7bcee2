"""Pass 4 — code partitioning (seed: 代码划分).

1. Channels (:mod:`.channels`): a load (single task, the producer) whose result is read
   by other tasks.
   Loads of one block read by the same consumers and issued together (no read of one
   between them) form one channel (one barrier pair, one slot holding every load of
   the group). Inside a loop a channel gets
   ``num_buffers_warp_spec`` slots, else 1.
2. One clone of the function body per task, keeping only that task's statements; a
   branch whose condition the task does not compute becomes a jump to the end of the
   region it controls. Variables are renamed ``name__tN``; labels shifted per task.
3. Channel ops (see :mod:`numba_ws.language.stage_ops`): the producer does
   ``ProducerAcquire -> ws_copy per part -> ProducerCommit``; consumers do
   ``ConsumerWait -> ws_view per part -> ...uses... -> ws_dot_wait(0) -> ConsumerRelease``.
   When the slot's last reader is a dot whose result only feeds the accumulator of dots
   in the loop (a GEMM main loop), that dot stays in flight instead: ``ws_dot_wait(1)``
   then ``ws_consumer_release_prev`` gives back the *previous* slot, and every exit of
   the loop waits for all dots (``ws_dot_fence`` then pins the accumulators after that
   wait) and releases the last one.
   Each task carries one ring counter per channel (``bufferIndex = ring % slots``,
   ``phase = (ring // slots) % 2``; ``ring & (slots - 1)`` and ``(ring >> log2 slots) & 1``
   when ``slots`` is a power of two: the signed 64-bit division of ``%`` / ``//`` cost
   ~25 instructions between a consumer's last wgmma wait and its next wgmma), incremented
   once per pass through the channel.
   A release comes after the last use of the slot in its block, following views
   through ``trans`` and copies, and after the tensor-core reads completed. When that
   last use is a dot (not kept in flight), the release waits for that dot only: it
   follows the next wait that retires it (a read of its or an older dot's result), else
   the block's end (``wait_group n``, the n dots issued after it staying in flight; the
   newest dot's slots are carried to the immediate post-dominator when that comes later
   in the iteration), so a dot issued after it (``lag_last_dot``'s ``p @ v``) is not
   waited for on its account. Kernels whose dots were waited for right away anyway get
   the same PTX (2026-12-07: 236 kernels of the test tables, identical).
4. Data partitioning is applied to each consumer clone: split zeros/full get the slice
   shape, split stores the slice's offsets, split loads the consumer's part.
5. Ping-pong consumers (``ping_pong=1``, :mod:`.ping_pong`): consumer group i runs every
   G-th iteration of the persistent tile loop; the groups take turns at the one ring.
   Dot turns (``dot_turns=1``, :mod:`.dot_turns`): the groups take turns issuing the
   first dot of each iteration of the loop around the loads.
6. One consumer body (option ``shared_consumer_body``, default 1): when every consumer
   group runs the same statements (no ping-pong, no dot turns, every channel read by all
   groups), one clone serves them all; its slice comes from ``$ws_group = ws_warp_group()
   - 1`` at run time: a split load's view is part ``first + $ws_group`` (lower_tiles
   needs the parts evenly spaced in the slot) and a split store adds ``$ws_group *
   slice``. ``plan.branches`` then maps every consumer task to that clone's entry.
7. A dispatch chain on the warp-group index jumps to each task's clone; the function's
   arguments stay in the shared entry block. Then the new IR is typed again.
"""
import operator

from numba.cuda.core import ir
from numba.cuda.core.analysis import compute_cfg_from_blocks

from ..language import stage_ops as so
from .base import WSPass, ws_pass
from .ir_build import StmtBuilder, clone_stmt, retype, shared_memo
from .ir_tools import STORE_OPS, stmt_uses, tile_op
from .channels import PRODUCER, find_channels
from . import ping_pong as pp
from .dot_turns import DotTurns, find_turn_dot


class _Cloner:
    """Builds the clone of the function body for one task."""

    def __init__(self, pass_, plan, func_ir, typemap, task, offset, memo, arg_names, cfg,
                 tile_loop=None, turn_dot=None, shared=False):
        self.p, self.plan, self.fir, self.typemap = pass_, plan, func_ir, typemap
        #: the one clone every consumer group runs: slices chosen by ``$ws_group``
        self.shared = shared and task != PRODUCER
        self.tile_loop = tile_loop   # ping-pong: the persistent loop dealt out to groups
        self.task, self.offset, self.memo, self.args, self.cfg = task, offset, memo, arg_names, cfg
        self.deferred = set()
        self.turns = None            # ping-pong consumer: its turns around the work loop
        if tile_loop is not None and task != PRODUCER:
            self.turns = pp.Turns(self, tile_loop)
        self.dot_turns = None        # dot turns: the consumer's turns at the turn dot
        if turn_dot is not None and task != PRODUCER:
            self.dot_turns = DotTurns(task, plan.num_consumers, turn_dot)
        self.carried = {}
        self.carry = {}            # block label -> pending slot entries carried into it
        self.lazy_carry = {}       # block label -> lazily released slots carried into it
        self.done = set()          # labels whose clone is built
        self._later = {}           # label -> labels after it in one iteration
        self.dot_results = _dot_results(func_ir, typemap)
        self._dots_pending = False
        self._inflight = []
        self._dot_exit = {}        # label -> (dots pending, in-flight dots) at its end
        self.load_channel = {}
        for ch in plan.channels:
            for m, stmt in enumerate(ch.loads):
                self.load_channel[id(stmt)] = (ch, m)

    def rename(self, name):
        return name if name in self.args else f"{name}__t{self.task}"

    def var(self, v):
        return ir.Var(v.scope, self.rename(v.name), v.loc)

    def keeps(self, stmt):
        tasks = self.plan.tasks.get(id(stmt), frozenset())
        return bool(tasks) if self.plan.fused else self.task in tasks

    def ring_var(self, scope, ch, loc, role=""):
        """The ring counter of ``ch`` in this clone (a fused clone has a producer one too)."""
        return ir.Var(scope, f"$ws_ring{role}{ch.id}__t{self.task}", loc)

    def group_var(self, scope, loc):
        """The shared consumer clone's 0-based consumer group (``ws_warp_group() - 1``)."""
        return ir.Var(scope, f"$ws_group__t{self.task}", loc)

    def prev_var(self, scope, ch, loc):
        """The slot whose release waits for the next dot (-1: none)."""
        return ir.Var(scope, f"$ws_prev{ch.id}__t{self.task}", loc)

    def build(self):
        blocks = {}
        entry = min(self.fir.blocks)
        for label, block in self.fir.blocks.items():
            new = ir.Block(block.scope, block.loc)
            if label == entry:
                for ch in self._my_channels():
                    b = StmtBuilder(block.scope, block.loc, f"t{self.task}")
                    b.assign(ir.Const(0, block.loc), target=self.ring_var(block.scope, ch, block.loc))
                    if self.plan.fused:
                        b.assign(ir.Const(0, block.loc),
                                 target=self.ring_var(block.scope, ch, block.loc, "p"))
                    if self.task != PRODUCER:
                        b.assign(ir.Const(-1, block.loc),
                                 target=self.prev_var(block.scope, ch, block.loc))
                    new.body.extend(b.body)
                if self.turns:
                    new.body.extend(self.turns.init(block))
                if self.dot_turns:
                    new.body.extend(self.dot_turns.init(block))
                if self.shared:
                    b = StmtBuilder(block.scope, block.loc, f"t{self.task}")
                    b.binop(operator.sub, b.call(so.ws_warp_group, []), b.const(1),
                            target=self.group_var(block.scope, block.loc))
                    new.body.extend(b.body)
            if self.turns and label in self.turns.loop.exits:
                new.body.extend(self.turns.pass_turn(block))
            # [channel, slot var, ring var, names of its views]: waited, not yet released;
            # a slot read after this block (an ``if`` or an inner loop in between) is
            # carried to the block's immediate post-dominator
            pending = self.carry.pop(label, [])
            self._release_unused(label, block.loc, new, pending)
            body = block.body[:-1]
            self._dots_pending, self._inflight = self._dot_state_at(label, entry)
            self._lazy = self.lazy_carry.pop(label, [])
            for stmt in body:
                if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Arg):
                    continue
                if id(stmt) in self.load_channel:
                    self._channel_op(stmt, new, pending)
                elif self.keeps(stmt):
                    self._wait_before_result_use(stmt, new)
                    turn = self.dot_turns and stmt is self.dot_turns.stmt
                    if turn:
                        new.body.extend(self.dot_turns.wait_turn(new.scope, stmt.loc))
                    new.body.append(self._partitioned(stmt))
                    if turn:
                        new.body.extend(self.dot_turns.pass_turn(new.scope, stmt.loc))
                self._maybe_release(stmt, new, pending)
            self._flush_lazy(new, block.loc, label)
            self.done.add(label)
            self._dot_exit[label] = (self._dots_pending, [set(n) for n in self._inflight])
            for entry in pending:       # a slot outside loops is filled once: no release
                ch = entry[0]
                if ch.in_loop and self._used_later(label, entry[3]):
                    after = _ipdom(self.cfg, label)
                    if after in self.done:
                        raise self.p.error(
                            f"a tile of channel {ch.id} ({ch.members[0]['var']}) is read "
                            "after the block that loads it, past a point the partitioner "
                            "cannot release its slot at", ch.loads[0].loc)
                    self.carry.setdefault(after, []).append(entry)
                elif ch.in_loop:
                    raise self.p.error(
                        f"a tile of channel {ch.id} ({ch.members[0]['var']}) is read "
                        "outside the loop block that loads it; the partitioner needs "
                        "loads and their uses in the same loop body", ch.loads[0].loc)
            if self.turns and label in self.turns.loop.entries:
                new.body.extend(self.turns.wait_turn(block))
            new.body.append(self._terminator(label, block.terminator))
            blocks[label + self.offset] = new
        self.exit_releases(blocks)
        return blocks

    def _my_channels(self):
        chans = self.plan.channels
        if self.task == PRODUCER or self.plan.fused:
            return chans
        return [c for c in chans if self.task in c.consumers]

    def _slot_phase(self, b, ch, role=""):
        ring = self.ring_var(b.scope, ch, b.loc, role)
        n = ch.num_slots
        if n & (n - 1) == 0:   # the ring counter is >= 0: bit operations, no signed division
            slot = b.binop(operator.and_, ring, b.const(n - 1))
            q = b.binop(operator.rshift, ring, b.const(n.bit_length() - 1))
            phase = b.binop(operator.and_, q, b.const(1))
            return ring, slot, phase
        slot = b.binop(operator.mod, ring, b.const(n))
        q = b.binop(operator.floordiv, ring, b.const(n))
        phase = b.binop(operator.mod, q, b.const(2))
        return ring, slot, phase

    def _bump(self, b, ring):
        b.binop(operator.add, ring, b.const(1), target=ring)

    def _channel_op(self, stmt, new, pending):
        ch, m = self.load_channel[id(stmt)]
        member = ch.members[m]
        b = StmtBuilder(stmt.target.scope, stmt.loc, f"t{self.task}")
        first, last = m == 0, m == len(ch.loads) - 1
        fused = self.plan.fused
        if self.task == PRODUCER or fused:
            if first:
                ring, slot, phase = self._slot_phase(b, ch, "p" if fused else "")
                b.call(so.ws_producer_acquire, [b.const(ch.id), slot, phase])
                self._state = (ring, slot)
            ring, slot = self._state
            array = self.var(stmt.value.args[0])
            offs = stmt.value.args[1]
            base = [self.var(x) for x in self._tuple_items(offs)]
            for k, part in enumerate(member["parts"]):
                items = [base[d] if part["offset"][d] == 0 else
                         b.binop(operator.add, base[d], b.const(part["offset"][d]))
                         for d in range(len(base))]
                b.call(so.ws_copy, [b.const(ch.id), slot, b.const(part["id"]), array,
                                    b.tuple(items), b.tuple([b.const(s) for s in part["shape"]])])
            if last:
                b.call(so.ws_producer_commit, [b.const(ch.id), slot])
                self._bump(b, ring)
        if self.task in ch.consumers and (last or not fused):
            # fused: wait once every copy of the slot was issued, then view every member
            members = ch.members if fused else [member]
            loads = ch.loads if fused else [stmt]
            if first or fused:
                ring, slot, phase = self._slot_phase(b, ch)
                b.call(so.ws_consumer_wait, [b.const(ch.id), slot, phase])
                pending.append([ch, slot, ring, set()])
            # the channel's wait is still pending: channels.py keeps a channel's loads
            # together, before any read of them (so no release came in between)
            entry = next(e for e in pending if e[0] is ch)
            slot = entry[1]
            for mem, load in zip(members, loads):
                split = mem["split_dim"] is not None
                part = mem["parts"][self.task - 1 if split else 0]
                part_id = b.const(part["id"])
                if split and self.shared:       # parts[0] + this group's index
                    part_id = b.binop(operator.add, self.group_var(b.scope, b.loc), part_id)
                b.call(so.ws_view, [b.const(ch.id), slot, part_id,
                                    b.tuple([b.const(s) for s in part["shape"]]),
                                    b.glob(mem["dtype"], mem["dtype"].name)],
                       target=self.var(load.target))
                entry[3] |= {self.rename(a) for a in mem["aliases"]}
        new.body.extend(b.body)

    def _tuple_items(self, var):
        d = self.fir.get_definition(var)
        if isinstance(d, ir.Expr) and d.op == "build_tuple":
            return d.items
        raise self.p.error("ws.load offsets must be a literal tuple like (i * BM, k * BK)", var.loc)

    def _maybe_release(self, stmt, new, pending):
        """Release each pending slot after the last statement that reads its views."""
        if self.task == PRODUCER or not pending:
            return
        for entry in list(pending):
            ch, slot, ring, names = entry
            block_rest = self._rest_of_block(stmt)
            still_used = any(self.rename(u) in names for s in block_rest for u in stmt_uses(s)
                             if self.keeps(s))
            label = self.plan.stmts[id(stmt)][1] if id(stmt) in self.plan.stmts else None
            still_used = still_used or (label is not None and self._used_later(label, names))
            used_here = any(self.rename(u) in names for u in stmt_uses(stmt))
            if used_here and not still_used:
                b = StmtBuilder(new.scope, stmt.loc, f"t{self.task}")
                if self._can_defer(ch, stmt):
                    # keep this dot in flight: release the previous slot once it is done
                    prev = self.prev_var(new.scope, ch, stmt.loc)
                    b.call(so.ws_dot_wait, [b.const(1)])
                    b.call(so.ws_consumer_release_prev, [b.const(ch.id), prev])
                    b.assign(slot, target=prev)
                    self.deferred.add(ch.id)
                    self._bump(b, ring)
                elif tile_op(stmt, self.typemap) == "dot" and self._inflight \
                        and stmt.target.name in self._inflight[-1]:
                    # released once the dot retires: at the next wait that retires it
                    # (a read of an older dot's result, or this one's), else at the
                    # block's end; a dot issued after it (the lagged p @ v) is not
                    # waited for on its account
                    self._lazy.append((ch, slot, ring, stmt.target.name))
                else:
                    self._release(b, ch, slot, ring)
                new.body.extend(b.body)
                pending.remove(entry)

    def _release(self, b, ch, slot, ring):
        """Wait for every dot, release ``slot`` of ``ch``, advance the ring."""
        b.call(so.ws_dot_wait, [b.const(0)])
        self._dots_pending, self._inflight = False, []
        self._retire(b)
        b.call(so.ws_consumer_release, [b.const(ch.id), slot])
        self._bump(b, ring)

    def _retire(self, b):
        """Release the lazily released slots whose dot retired: it is no longer in
        ``self._inflight`` and no dot of an earlier block may be pending."""
        if self._dots_pending:
            return
        flying = set().union(set(), *self._inflight)
        for entry in list(self._lazy):
            ch, slot, ring, dot = entry
            if dot not in flying:
                b.call(so.ws_consumer_release, [b.const(ch.id), slot])
                self._bump(b, ring)
                self._lazy.remove(entry)

    def _flush_lazy(self, new, loc, label):
        """At a block's end, the lazily released slots whose dot is still in flight:
        those of the newest dot are carried to the block's immediate post-dominator when
        that comes later in the same iteration (the join after attention's mask ``if``,
        where the lagged ``p @ v`` is waited for anyway); the others are released here
        after ``wait_group n`` keeping the n dots issued after the newest of them in
        flight (so is every one where nothing comes later)."""
        if not self._lazy:
            return
        after = _ipdom(self.cfg, label)
        self._used_later(label, set())            # fills self._later[label]
        if after is not None and after not in self.done and after in self._later[label] \
                and self._inflight:
            newest = self._inflight[-1]
            carried = [e for e in self._lazy if e[3] in newest]
            self.lazy_carry.setdefault(after, []).extend(carried)
            self._lazy = [e for e in self._lazy if e not in carried]
            if not self._lazy:
                return
        b = StmtBuilder(new.scope, loc, f"t{self.task}")
        dots = {entry[3] for entry in self._lazy}
        newest = max((i for i, names in enumerate(self._inflight) if names & dots),
                     default=None)
        younger = 0 if newest is None else len(self._inflight) - 1 - newest
        b.call(so.ws_dot_wait, [b.const(younger)])
        self._inflight = self._inflight[len(self._inflight) - younger:] if younger else []
        self._dots_pending = False
        self._retire(b)
        new.body.extend(b.body)

    def _release_unused(self, label, loc, new, pending):
        """Release, at the top of block ``label``, carried slots that neither it nor a
        later block of the iteration reads (they were last read on a path into it)."""
        if self.task == PRODUCER:
            return
        for entry in list(pending):
            ch, slot, ring, names = entry
            if self._reads(label, names) or self._used_later(label, names):
                continue
            b = StmtBuilder(new.scope, loc, f"t{self.task}")
            self._release(b, ch, slot, ring)
            new.body.extend(b.body)
            pending.remove(entry)

    def _reads(self, label, names):
        return any(self.rename(u) in names for s in self.fir.blocks[label].body
                   if self.keeps(s) for u in stmt_uses(s))

    def _used_later(self, label, names):
        """Whether a block after ``label`` in the same iteration (reachable without
        taking a back edge) reads one of ``names``."""
        later = self._later.get(label)
        if later is None:
            back = set(self.cfg._back_edges)
            later, todo = set(), [label]
            while todo:
                node = todo.pop()
                for succ, _ in self.cfg.successors(node):
                    if (node, succ) not in back and succ not in later and succ != label:
                        later.add(succ)
                        todo.append(succ)
            self._later[label] = later
        return any(self._reads(b, names) for b in later)

    def _dot_state_at(self, label, entry):
        """(dots of earlier blocks maybe pending, known in-flight dots) on entry to
        ``label``. The entry block starts with none; a block whose predecessors are all
        built (no back edge into it) inherits the in-flight dots their exits share (the
        newest ones, oldest first), so a read of an older dot's result after an ``if``
        (a masked key block) waits with ``wait_group n`` keeping those ``n`` in flight;
        any other block assumes every dot pending and knows none."""
        if label == entry:
            return False, []
        preds = [p for p, _ in self.cfg.predecessors(label)]
        if not preds or any(p not in self._dot_exit for p in preds):
            return True, []
        exits = [self._dot_exit[p] for p in preds]
        first = exits[0][1]
        shortest = min(len(inflight) for _, inflight in exits)
        shared = 0          # the newest dots every exit has in flight, counted from the end
        while shared < shortest and all(inflight[-1 - shared] == first[-1 - shared]
                                        for _, inflight in exits):
            shared += 1
        pending = any(p or len(inflight) > shared for p, inflight in exits)
        return pending, [set(n) for n in first[len(first) - shared:]]

    def _wait_before_result_use(self, stmt, new):
        """A dot runs asynchronously: before anything but another dot's accumulator (or a
        plain copy) reads a dot result, wait until that dot retired. Dots retire in
        issue order, so ``ws_dot_wait(n)`` keeps only the ``n`` newest in flight: n is the
        number of dots issued in this block after the one read (all of this block's
        dots when the value comes from an earlier block or iteration, e.g. a software-
        pipelined attention loop reading the previous ``q @ k^T`` while the next one
        runs). ``self._dots_pending``: dots of earlier blocks may be in flight;
        ``self._inflight``: this block's dots since the last wait, oldest first, each
        with the names holding its result."""
        if self.task == PRODUCER:
            return
        op = tile_op(stmt, self.typemap)
        uses = stmt_uses(stmt) & self.dot_results
        if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Var):
            for names in self._inflight:        # a copy holds the same dot's result
                if stmt.value.name in names:
                    names.add(stmt.target.name)
            return
        if op == "dot" and not ({v.name for v in stmt.value.args[:2]} & self.dot_results):
            self._inflight.append({stmt.target.name})   # only the accumulator: chained
            return
        if uses:
            younger = None
            for i, names in enumerate(self._inflight):
                if names & uses:
                    younger = len(self._inflight) - 1 - i
            if younger is None:                 # older results: keep this block's dots
                younger = len(self._inflight) if self._dots_pending else None
            if younger is not None:
                b = StmtBuilder(new.scope, stmt.loc, f"t{self.task}")
                b.call(so.ws_dot_wait, [b.const(younger)])
                for name in sorted(uses):   # pinned: no read may move above the wait
                    var = ir.Var(new.scope, self.rename(name), stmt.loc)
                    b.call(so.ws_dot_fence, [var, b.const(0)], target=var)
                self._inflight = self._inflight[len(self._inflight) - younger:] \
                    if younger else []
                self._dots_pending = False
                self._retire(b)
                new.body.extend(b.body)
        if op == "dot":
            self._inflight.append({stmt.target.name})

    def _can_defer(self, ch, stmt):
        """With ``dot_in_flight=1`` the last dot reading a slot of a loop channel stays in
        flight past the slot's release point: that slot is released after the next
        ``ws_dot_wait(1)`` (the next iteration's release point), so the next iteration's
        first dot queues behind it on the tensor cores. Safe for any use of its result:
        a block entered by a back edge starts with dots assumed pending (one entered
        only from built blocks inherits their in-flight dots, this one among them), so
        a read of the result in a later block (the next iteration's ``acc * alpha`` of
        attention) waits first, and in its own block a read after the dot waits too.
        Needs >= 2 slots (the consumer holds one slot across an iteration: one slot would
        deadlock)."""
        if not (self.plan.options.dot_in_flight and ch.in_loop and ch.num_slots >= 2
                and tile_op(stmt, self.typemap) == "dot"):
            return False
        loop = _innermost_loop(self.cfg, ch.block_label)
        body = [s for lab in loop.body for s in self.fir.blocks[lab].body]
        chain, changed = {stmt.target.name}, True
        while changed:
            changed = False
            for s in body:
                if isinstance(s, ir.Assign) and isinstance(s.value, ir.Var) \
                        and s.value.name in chain and s.target.name not in chain:
                    chain.add(s.target.name)
                    changed = True
        # the loop-carried accumulators, read after the loop once every dot completed
        # (a dead copy, e.g. an inlined helper's unused parameter, is never defined in
        # the clone: fencing it would read an untyped variable)
        read = {u for blk in self.fir.blocks.values() for s in blk.body for u in stmt_uses(s)}
        self.carried[ch.id] = {s.target.name for s in body if isinstance(s, ir.Assign)
                               and isinstance(s.value, ir.Var) and s.value.name in chain
                               and s.target.name in chain and s.target.name in read}
        return True

    def exit_releases(self, blocks):
        """At each exit of a deferred channel's loop: wait for every dot, release."""
        for ch in self.plan.channels:
            if ch.id not in self.deferred:
                continue
            for exit_label in _innermost_loop(self.cfg, ch.block_label).exits:
                block = blocks[exit_label + self.offset]
                b = StmtBuilder(block.scope, block.loc, f"t{self.task}")
                prev = self.prev_var(block.scope, ch, block.loc)
                b.call(so.ws_dot_wait, [b.const(0)])
                for name in sorted(self.carried.get(ch.id, ())):
                    acc = ir.Var(block.scope, self.rename(name), block.loc)
                    b.call(so.ws_dot_fence, [acc, b.const(1)], target=acc)
                b.call(so.ws_consumer_release_prev, [b.const(ch.id), prev])
                b.assign(ir.Const(-1, block.loc), target=prev)
                block.body[:0] = b.body

    def _rest_of_block(self, stmt):
        label = self.plan.stmts[id(stmt)][1] if id(stmt) in self.plan.stmts else None
        if label is None:
            return []
        body = self.fir.blocks[label].body
        return body[body.index(stmt) + 1:]

    def _partitioned(self, stmt):
        new = clone_stmt(stmt, self.memo)
        names = {v.name: self.rename(v.name) for v in new.list_vars()}
        _rename_in_place(new, names)
        if self.task != PRODUCER and self.tile_loop is not None \
                and stmt is self.tile_loop.range_stmt:
            b = StmtBuilder(new.target.scope, stmt.loc, f"t{self.task}")
            pp.stride_range(new, b, self.task - 1, self.plan.num_consumers)
            return _Seq(b.body + [new])
        if self.task == PRODUCER or not self.plan.split:
            return new
        op = tile_op(stmt, self.typemap)
        target = stmt.target.name if isinstance(stmt, ir.Assign) else None
        g = self.task - 1
        if op in ("zeros", "full") and self.plan.split.get(target) is not None:
            return self._with_slice_shape(stmt, new)
        if op in STORE_OPS:
            tile = stmt.value.args[2].name
            dim = self.plan.split.get(tile)
            if dim is not None and (g > 0 or self.shared):
                return self._with_store_offset(stmt, new, dim, g * self.plan.slice_size)
        return new

    def _with_slice_shape(self, stmt, new):
        dim = self.plan.split[stmt.target.name]
        shape = list(self.typemap[stmt.target.name].shape)
        shape[dim] = self.plan.slice_size
        b = StmtBuilder(new.target.scope, stmt.loc, f"t{self.task}")
        new.value.args[0] = b.tuple([b.const(s) for s in shape])
        return _Seq(b.body + [new])

    def _with_store_offset(self, stmt, new, dim, delta):
        """The store at ``delta`` more along ``dim``; in the shared consumer clone
        ``$ws_group * slice`` instead."""
        b = StmtBuilder(new.target.scope, stmt.loc, f"t{self.task}")
        items = [self.var(x) for x in self._tuple_items(stmt.value.args[1])]
        delta = b.binop(operator.mul, self.group_var(b.scope, b.loc),
                        b.const(self.plan.slice_size)) if self.shared else b.const(delta)
        items[dim] = b.binop(operator.add, items[dim], delta)
        new.value.args[1] = b.tuple(items)
        return _Seq(b.body + [new])

    def _terminator(self, label, term):
        if isinstance(term, ir.Return):
            return ir.Return(self.var(term.value), term.loc)
        if isinstance(term, ir.Jump):
            return ir.Jump(term.target + self.offset, term.loc)
        if isinstance(term, ir.Branch):
            if self.keeps(term):
                return ir.Branch(self.var(term.cond), term.truebr + self.offset,
                                 term.falsebr + self.offset, term.loc)
            return ir.Jump(_ipdom(self.cfg, label) + self.offset, term.loc)
        raise self.p.error(f"unsupported terminator {term}", term.loc)


class _Seq(list):
    """Several statements standing in for one (flattened when the block is built)."""


def _rename_in_place(stmt, names):
    for v in stmt.list_vars():
        if v.name in names:
            v.name = names[v.name]


def _dot_results(func_ir, typemap):
    """Names holding a dot's result: dot targets and their plain copies."""
    names = {s.target.name for b in func_ir.blocks.values() for s in b.body
             if tile_op(s, typemap) == "dot"}
    changed = True
    while changed:
        changed = False
        for b in func_ir.blocks.values():
            for s in b.body:
                if isinstance(s, ir.Assign) and isinstance(s.value, ir.Var) \
                        and s.value.name in names and s.target.name not in names:
                    names.add(s.target.name)
                    changed = True
    return names


def _innermost_loop(cfg, label):
    loops = [lp for lp in cfg.loops().values() if label in lp.body]
    return min(loops, key=lambda lp: len(lp.body))


def _ipdom(cfg, label):
    pdoms = cfg.post_dominators()
    cands = pdoms[label] - {label}
    for c in cands:
        if all(o == c or o in pdoms[c] for o in cands):
            return c
    raise AssertionError(f"block {label} has no post-dominator")


def _flatten(blocks):
    for block in blocks.values():
        flat = []
        for s in block.body:
            flat.extend(s if isinstance(s, _Seq) else [s])
        block.body = flat


@ws_pass
class PartitionCode(WSPass):
    _name = "ws_code_partition"

    def run(self, state):
        plan, fir = state.ws, state.func_ir
        plan.channels = find_channels(plan, fir, state.typemap, self.error)
        cfg = compute_cfg_from_blocks(fir.blocks)
        memo = shared_memo(fir)
        entry = min(fir.blocks)
        arg_stmts = [s for s in fir.blocks[entry].body
                     if isinstance(s, ir.Assign) and isinstance(s.value, ir.Arg)]
        arg_names = {s.target.name for s in arg_stmts}
        stride = (max(fir.blocks) // 1000 + 1) * 1000
        tasks = (1,) if plan.fused else (PRODUCER,) + plan.consumer_tasks
        tile_loop = pp.find_tile_loop(fir, cfg, plan.channels, self.error) \
            if plan.ping_pong else None
        turn_dot = find_turn_dot(fir, cfg, state.typemap, plan.channels, self.error) \
            if plan.dot_turns else None
        shared = _one_consumer_body(plan)
        cloned = tasks[:2] if shared else tasks
        blocks = {}
        for t in cloned:
            offset = (t + 1) * stride
            cloner = _Cloner(self, plan, fir, state.typemap, t, offset, memo, arg_names, cfg,
                             tile_loop, turn_dot, shared)
            blocks.update(cloner.build())
            plan.branches[t] = entry + offset
        for t in tasks[len(cloned):]:           # the other groups run the shared clone
            plan.branches[t] = plan.branches[cloned[-1]]
        _flatten(blocks)
        scope, loc = fir.blocks[entry].scope, fir.blocks[entry].loc
        blocks.update(self._dispatch(scope, loc, arg_stmts, cloned, plan.branches))
        new_ir = fir.derive(blocks=blocks)
        retype(state, new_ir)

    def _dispatch(self, scope, loc, arg_stmts, tasks, branches):
        out = {}
        wg = ir.Var(scope, "$ws_warp_group", loc)
        for i, t in enumerate(tasks[:-1]):
            b = StmtBuilder(scope, loc, "dispatch")
            if i == 0:
                b.body.extend(arg_stmts)
                b.call(so.ws_warp_group, [], target=wg)
            cond = b.binop(operator.eq, wg, b.const(t))
            nxt = i + 1 if i + 1 < len(tasks) - 1 else branches[tasks[-1]]
            block = ir.Block(scope, loc)
            block.body = b.body + [ir.Branch(cond, branches[t], nxt, loc)]
            out[i] = block
        if len(tasks) == 1:
            block = ir.Block(scope, loc)
            b = StmtBuilder(scope, loc, "dispatch")
            b.body.extend(arg_stmts)
            block.body = b.body + [ir.Jump(branches[tasks[0]], loc)]
            out[0] = block
        return out


def _one_consumer_body(plan):
    """Whether one consumer clone can serve every consumer group (see item 6 of the
    module docstring): >= 2 cooperative groups that all run the same statements and
    read every channel, on sm_90+ (below, the mma.sync operands' ldmatrix addresses
    fold a clone's constant slot offsets; the run-time ones spilled ~150 bytes for the
    sm_80 GEMM)."""
    if not plan.options.shared_consumer_body or plan.fused or plan.num_consumers < 2 \
            or plan.turns or tuple(plan.cc[:2]) < (9, 0):
        return False
    every = frozenset(plan.consumer_tasks)
    if any(frozenset(ch.consumers) != every for ch in plan.channels):
        return False
    return all(not (frozenset(ts) & every) or every <= frozenset(ts)
               for ts in plan.tasks.values())
