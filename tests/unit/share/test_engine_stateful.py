"""Random operation sequences against the naive per-offset model (tests/unit/share/model.py).

After every step: engine state == model state (per offset: state, delivery count, holder, lock
deadline; SPSO, window end, next fetch offset, next lock deadline, terminal count, snapshot), no
offset held twice, delivery counts within the limit, SPSO never moving back (except admin reset),
and snapshot -> restore -> snapshot being the identity.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kshare_sidecar.share.engine import ShareConfig, SharePartition

from .model import AQ, ModelPartition

settings.register_profile(
    "share-default",
    max_examples=int(os.environ.get("SHARE_MAX_EXAMPLES", "300")),
    stateful_step_count=60,
    deadline=None,
    # SHARE_NO_SHRINK=1 reports the first failure at once (handy when mutation-testing the engine)
    phases=(
        [Phase.explicit, Phase.reuse, Phase.generate] if os.environ.get("SHARE_NO_SHRINK") else list(Phase)
    ),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile(
    "share-deep",
    max_examples=4000,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
PROFILE = settings.get_profile(os.environ.get("SHARE_HYPOTHESIS_PROFILE", "share-default"))

MEMBERS = ("m1", "m2")
LOCK_MS = 100


@st.composite
def logs(draw):
    """A log as record-batch headers: varying sizes, compaction holes, control and transactional batches."""
    batches = []
    aborted = []
    off = draw(st.integers(0, 3))
    for _ in range(draw(st.integers(5, 40))):
        off += draw(st.sampled_from([0, 0, 0, 0, 1, 3]))  # holes left by compaction
        size = draw(st.integers(1, 6))
        kind = draw(st.sampled_from(["data", "data", "data", "data", "txn", "control"]))
        pid = draw(st.integers(1, 3))
        if kind == "control":
            batches.append((off, off, pid, True, True))
            size = 1
        elif kind == "txn":
            batches.append((off, off + size - 1, pid, True, False))
            if draw(st.booleans()):
                aborted.append((pid, off))
        else:
            batches.append((off, off + size - 1, -1, False, False))
        off += size
    return batches, aborted


class EngineVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0

    def clock(self) -> int:
        return self.now

    @initialize(
        log=logs(),
        limit=st.sampled_from([2, 3, 4, 5]),
        cap=st.integers(4, 30),
        throttle=st.booleans(),
        start=st.integers(0, 5),
        read_committed=st.booleans(),
    )
    def setup(self, log, limit, cap, throttle, start, read_committed) -> None:
        self.log, aborted = log
        self.aborted = aborted if read_committed else None
        self.cfg = ShareConfig(
            record_lock_duration_ms=LOCK_MS,
            delivery_count_limit=limit,
            max_record_locks=cap,
            throttle_redelivery=throttle,
        )
        self.sp = SharePartition(self.cfg, self.clock, start_offset=start)
        self.model = ModelPartition(self.cfg, start)
        self.last_spso = start

    # ---------------------------------------------------------------- helpers
    def read_log(self, offset: int, n: int) -> list[tuple]:
        return [b for b in self.log if b[1] >= offset][:n]

    def held(self, member: str) -> list[int]:
        return sorted(o for o, r in self.model.recs.items() if r[0] == AQ and r[2] == member)

    def pick_member(self, data) -> str:
        holders = sorted({r[2] for r in self.model.recs.values() if r[0] == AQ})
        if holders and data.draw(st.integers(0, 9)) < 9:
            return data.draw(st.sampled_from(holders))
        return data.draw(st.sampled_from(MEMBERS))

    def ack_batches(self, data, member: str) -> list[tuple]:
        """Mostly well-formed acks over the member's records, sometimes anything."""
        held = self.held(member)
        window = list(range(max(0, self.model.spso - 2), self.model.end + 2))
        pool = held if held and data.draw(st.integers(0, 9)) < 8 else window
        if not pool:
            pool = [0]
        offs = sorted(set(data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=6))))
        batches = []
        i = 0
        while i < len(offs):
            j = i
            while j + 1 < len(offs) and offs[j + 1] == offs[j] + 1 and data.draw(st.booleans()):
                j += 1
            first, last = offs[i], offs[j]
            type_pool = st.sampled_from([1, 1, 2, 2, 2, 3, 0, 4])
            if first != last and data.draw(st.booleans()):
                types = data.draw(st.lists(type_pool, min_size=last - first + 1, max_size=last - first + 1))
            else:
                types = [data.draw(type_pool)]
            # malformed now and then (17: hypothesis favours 0 and the ends of ranges)
            if data.draw(st.integers(0, 60)) == 17:
                types = data.draw(st.sampled_from([[], [7], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]]))
            batches.append((first, last, types))
            i = j + 1
        if len(batches) > 1 and data.draw(st.integers(0, 60)) == 23:
            batches.reverse()
        return batches

    # ---------------------------------------------------------------- rules
    @rule(
        member=st.sampled_from(MEMBERS),
        nbatches=st.integers(1, 6),
        max_records=st.integers(1, 12),
        batch_size=st.integers(1, 8),
        mode=st.sampled_from([0, 0, 1]),
    )
    def acquire(self, member, nbatches, max_records, batch_size, mode) -> None:
        self._acquire(member, nbatches, max_records, batch_size, mode, True)

    @rule(
        member=st.sampled_from(MEMBERS),
        nbatches=st.integers(1, 3),
        max_records=st.integers(1, 6),
        pass_fetch_offset=st.booleans(),
    )
    def acquire_small(self, member, nbatches, max_records, pass_fetch_offset) -> None:
        self._acquire(member, nbatches, max_records, 2, 0, pass_fetch_offset)

    def _acquire(self, member, nbatches, max_records, batch_size, mode, pass_fetch_offset) -> None:
        nfo = self.sp.next_fetch_offset()
        assert nfo == self.model.next_fetch_offset()
        if nfo is None:
            return
        batches = self.read_log(nfo, nbatches)
        before = {o for o, r in self.model.recs.items() if r[0] == AQ}
        fo = nfo if pass_fetch_offset else None
        got = self.sp.acquire(
            member,
            batches,
            max_records,
            batch_size,
            mode=mode,
            aborted_transactions=self.aborted,
            fetch_offset=fo,
        )
        want = self.model.acquire(member, batches, max_records, batch_size, mode, self.aborted, self.now, fo)
        assert [tuple(p) for p in got] == want
        for first, last, count in got:
            event(f"acquired delivery count {count}")
            assert not before & set(range(first, last + 1)), "offset acquired while held"
            assert 1 <= count <= self.cfg.delivery_count_limit

    def has_holders(self) -> bool:
        return any(r[0] == AQ for r in self.model.recs.values())

    @rule(data=st.data(), member=st.sampled_from(MEMBERS))
    def acknowledge_anything(self, data, member) -> None:
        """Acks from any member over any offsets near the window: mostly errors."""
        self._acknowledge(data, member)

    @precondition(has_holders)
    @rule(data=st.data())
    def acknowledge(self, data) -> None:
        self._acknowledge(data, self.pick_member(data))

    def _acknowledge(self, data, member) -> None:
        batches = self.ack_batches(data, member)
        snap_before = self.sp.snapshot()
        ranges_before = list(self.sp.ranges())
        plan = self.sp.prepare_acknowledge(member, batches)
        code, ops = self.model.validate(member, batches)
        assert int(plan.error) == code
        event(f"ack code {code}")
        # prepare never mutates
        assert self.sp.snapshot() == snap_before and list(self.sp.ranges()) == ranges_before
        if code:
            return
        if data.draw(st.integers(0, 5)) == 4:
            return  # the durable write failed: the plan is dropped, nothing changes
        self.model.apply(ops, self.now)
        assert plan.state == self.model.snapshot()
        assert int(self.sp.commit(plan)) == 0

    @precondition(has_holders)
    @rule(data=st.data(), advance=st.integers(1, 150))
    def acknowledge_after_delay(self, data, advance) -> None:
        """Two-phase ack with time passing (and locks expiring) between prepare and commit."""
        member = self.pick_member(data)
        batches = self.ack_batches(data, member)
        plan = self.sp.prepare_acknowledge(member, batches)
        code, _ = self.model.validate(member, batches)
        assert int(plan.error) == code
        if code:
            return
        self.now += advance
        assert self.sp.expire() == self.model.expire(self.now)
        code2, ops = self.model.validate(member, batches)
        if code2 == 0:
            self.model.apply(ops, self.now)
        assert int(self.sp.commit(plan)) == code2

    @rule(advance=st.integers(0, 120))
    def tick(self, advance) -> None:
        self.now += advance
        assert self.sp.expire() == self.model.expire(self.now)

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member) -> None:
        assert self.sp.release_member(member) == self.model.release_member(member)

    @rule(delta=st.integers(0, 12))
    def move_log_start(self, delta) -> None:
        target = self.model.log_start + delta
        self.sp.move_log_start(target)
        self.model.move_log_start(target)

    @rule(data=st.data())
    def snapshot_restore(self, data) -> None:
        if data.draw(st.integers(0, 3)) != 2:
            return  # keep restores (which drop every lock) rarer than other steps
        snap = self.sp.snapshot()
        assert snap == self.model.snapshot()
        restored = SharePartition.restore(snap, self.clock, self.cfg)
        assert restored.snapshot() == snap
        self.sp = restored
        self.model.restore(snap)

    @rule(start=st.integers(0, 60), epoch=st.integers(1, 5), data=st.data())
    def reset(self, start, epoch, data) -> None:
        if data.draw(st.integers(0, 5)) != 3:
            return  # rare: an admin reset wipes the window
        self.sp.reset(start, epoch)
        self.model.reset(start, epoch)
        self.last_spso = self.model.spso

    # ---------------------------------------------------------------- invariants
    @invariant()
    def same_state(self) -> None:
        sp, model = self.sp, self.model
        assert (sp.spso, sp.end_offset) == (model.spso, model.end)
        assert sp.spso >= self.last_spso, "SPSO moved back"
        self.last_spso = sp.spso
        engine = {}
        expect_first = sp.spso
        for first, last, state, count, member, deadline in sp.ranges():
            assert first == expect_first and last >= first, "ranges not contiguous"
            expect_first = last + 1
            for o in range(first, last + 1):
                engine[o] = (int(state), count, member, deadline)
        assert expect_first == sp.end_offset
        assert engine == model.per_offset()
        assert all(r[1] <= self.cfg.delivery_count_limit for r in engine.values())
        assert sp.delivery_complete_count == model.terminal_count()
        assert sp.next_lock_deadline() == model.next_lock_deadline()
        assert sp.next_fetch_offset() == model.next_fetch_offset()
        assert sp.snapshot() == model.snapshot()


EngineVsModel.TestCase.settings = PROFILE
TestEngineVsModel = EngineVsModel.TestCase
