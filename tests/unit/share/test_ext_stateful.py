"""Random operation sequences on ExtendedSharePartition (backoff, dead-letter holds, key ordering)
checked against a naive per-offset record of what happened to every record.

The naive side remembers, per offset: its key, when it was last released by a consumer (and with
which delivery count), whether it was rejected or failed at the delivery count limit, and whether
the dead-letter writer has taken it. After every step:

* a delivery never happens before release time + backoff(delivery count) (backoff);
* a record rejected or failed at the limit (dead-letter topic on) is never ARCHIVED before the
  writer acknowledged it, and the writer only ever sees such records (dead letter);
* per key, at most one record is held by a consumer, and a delivered record's earlier records of
  the same key are all terminal (key ordering);
* delivery counts stay within the limit, the window within max_record_locks (held records count);
* snapshot -> restore -> snapshot is the identity, and a plan's persisted state is what snapshot()
  says after the plan is committed.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kshare_sidecar.persist.model import DeliveryState
from kshare_sidecar.share.engine.backoff import backoff_ms
from kshare_sidecar.share.engine.config import Extensions, ShareConfig
from kshare_sidecar.share.engine.extended import ExtendedSharePartition
from kshare_sidecar.share.engine.holds import DEAD_LETTER, HOLDERS

MEMBERS = ("m1", "m2", "m3")
LOCK_MS = 50
WALL = 1_700_000_000_000
AQ = DeliveryState.ACQUIRED
TERMINAL = (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED)


class ExtendedVsNaive(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0

    def clock(self) -> int:
        return self.now

    def wall(self) -> int:
        return WALL + self.now

    @initialize(dlq=st.booleans(), backoff=st.sampled_from([0, 10, 25]), ordering=st.booleans(),
                limit=st.sampled_from([2, 3, 4]), cap=st.integers(4, 25), n_keys=st.integers(1, 4),
                sizes=st.lists(st.integers(1, 4), min_size=3, max_size=15), data=st.data())
    def setup(self, dlq, backoff, ordering, limit, cap, n_keys, sizes, data) -> None:
        self.ext = Extensions(dead_letter=dlq, backoff_ms=backoff, backoff_multiplier=2.0, backoff_max_ms=40,
                              key_ordering=ordering)
        self.cfg = ShareConfig(record_lock_duration_ms=LOCK_MS, delivery_count_limit=limit, max_record_locks=cap,
                               throttle_redelivery=False)
        self.sp = ExtendedSharePartition(self.cfg, self.clock, ext=self.ext, wall=self.wall, start_offset=0)
        self.log, off = [], 0
        for size in sizes:
            self.log.append((off, off + size - 1, -1, False, False))
            off += size
        self.keys = {o: data.draw(st.sampled_from([b"k%d" % i for i in range(n_keys)] + [None]))
                     for o in range(off)}
        self.not_before: dict[int, int] = {}  # offset -> earliest next delivery (backoff)
        self.dead: set[int] = set()  # rejected / failed at the limit, with a dead-letter topic
        self.written: set[int] = set()  # taken by the dead-letter writer

    # ---------------------------------------------------------------- helpers
    def states(self) -> dict[int, tuple]:
        out = {}
        for first, last, state, count, member, deadline in self.sp.ranges():
            for o in range(first, last + 1):
                out[o] = (state, count, member, deadline)
        return out

    def failed(self, offsets: list[int], before: dict) -> None:
        """Records that just failed a delivery (release, expiry, member gone)."""
        for o in offsets:
            _state, count, _member, _ = before[o]
            if count >= self.cfg.delivery_count_limit:
                if self.ext.dead_letter:
                    self.dead.add(o)
            elif self.ext.backoff_ms:
                self.not_before[o] = self.now + backoff_ms(count, self.ext.backoff_ms, 2.0, 40)

    # ---------------------------------------------------------------- rules
    @rule(member=st.sampled_from(MEMBERS), n=st.integers(1, 8))
    def acquire(self, member, n) -> None:
        start = self.sp.next_fetch_offset()
        if start is None:
            return
        batches = [b for b in self.log if b[1] >= start][:4]
        got = self.sp.acquire(member, batches, n, fetch_offset=start)
        if self.ext.key_ordering:
            got = self.sp.order_by_key(member, got, self.keys.get)
        states = self.states()
        for a in got:
            for o in range(a.first_offset, a.last_offset + 1):
                assert self.now >= self.not_before.get(o, 0), f"offset {o} delivered during its backoff"
                assert o not in self.dead, f"offset {o} delivered again after it was dead-lettered"
                assert states[o][2] == member and states[o][1] == a.delivery_count
                k = self.keys[o]
                if self.ext.key_ordering and k is not None:
                    earlier = [x for x in range(o) if self.keys[x] == k and x >= self.sp.spso]
                    assert all(states[x][0] in TERMINAL for x in earlier), f"offset {o} overtook its key"

    @rule(member=st.sampled_from(MEMBERS), t=st.sampled_from([1, 1, 2, 3]), data=st.data())
    def ack(self, member, t, data) -> None:
        states = self.states()
        held = [o for o, s in states.items() if s[0] == AQ and s[2] == member]
        if not held:
            return
        chosen = sorted(set(data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=4))))
        plan = self.sp.prepare_acknowledge(member, [(o, o, [t]) for o in chosen])
        assert plan.ok, plan.error
        persisted = plan.state
        assert self.sp.commit(plan).name == "none"
        assert self.sp.snapshot() == persisted, "a plan's persisted state is what the partition has after it"
        if t == 2:
            self.failed(chosen, states)
        elif t == 3 and self.ext.dead_letter:
            self.dead |= set(chosen)

    @rule(ms=st.integers(1, 60))
    def tick(self, ms) -> None:
        before = self.states()
        self.now += ms
        due = [o for o, s in before.items() if s[0] == AQ and s[2] not in HOLDERS and s[3] <= self.now]
        self.sp.expire(self.now)
        self.failed(due, before)

    @rule(member=st.sampled_from(MEMBERS))
    def member_leaves(self, member) -> None:
        before = self.states()
        gone = [o for o, s in before.items() if s[0] == AQ and s[2] == member]
        self.sp.release_member(member)
        self.failed(gone, before)

    @rule()
    def dead_letter_writer(self) -> None:
        pending = self.sp.dead_letter_pending()
        offsets = {o for first, last, _c, _cause in pending for o in range(first, last + 1)}
        assert offsets <= self.dead, f"the writer was given records never rejected nor at the limit: {offsets - self.dead}"
        if not pending:
            return
        self.written |= offsets
        plan = self.sp.prepare_acknowledge(DEAD_LETTER, [(f, last, [3]) for f, last, _c, _cause in pending])
        assert plan.ok
        persisted = plan.state
        assert self.sp.commit(plan).name == "none"
        assert self.sp.snapshot() == persisted

    # ---------------------------------------------------------------- invariants
    @invariant()
    def rules_hold(self) -> None:
        if not hasattr(self, "sp"):
            return
        states = self.states()
        held_by_consumers: dict[bytes, int] = {}
        for o, (state, count, member, _d) in states.items():
            assert count <= self.cfg.delivery_count_limit
            if state == DeliveryState.ARCHIVED and o in self.dead:
                assert o in self.written, f"offset {o} archived before its dead-letter write"
            if state == AQ and member not in HOLDERS and self.ext.key_ordering and self.keys.get(o) is not None:
                k = self.keys[o]
                assert k not in held_by_consumers, f"key {k!r} in flight twice: {held_by_consumers[k]} and {o}"
                held_by_consumers[k] = o
        # held records count against the cap; the log batch crossing it is acquired whole (Kafka)
        crossing = max(last - base for base, last, *_ in self.log)
        assert self.sp.in_flight <= max(self.cfg.max_record_locks, 4) + crossing, \
            "held records count against the cap"

    @invariant()
    def restore_is_identity(self) -> None:
        if not hasattr(self, "sp"):
            return
        snap = self.sp.snapshot()
        live = self.sp.__class__.restore_with(snap, self.clock, self.cfg, self.ext, self.wall).snapshot()

        def norm(state):  # a backoff already over (not yet expired by the timer) restores as plain AVAILABLE
            return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count,
                     b.available_at if b.available_at is not None and b.available_at > self.wall() else None,
                     b.dead_letter) for b in state.state_batches]

        assert norm(live) == norm(snap) or self._merged_equal(norm(live), norm(snap))
        assert live.start_offset == snap.start_offset

    @staticmethod
    def _merged_equal(a, b) -> bool:
        def per_offset(bs):
            return {o: x[2:] for x in bs for o in range(x[0], x[1] + 1)
                    if not (x[2] == DeliveryState.AVAILABLE and x[3] == 0 and x[4] is None and x[5] is None)}
        return per_offset(a) == per_offset(b)


ExtendedVsNaive.TestCase.settings = settings(
    max_examples=int(os.environ.get("EXT_MAX_EXAMPLES", "200")), stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
TestExtendedVsNaive = ExtendedVsNaive.TestCase
