"""What a reload from the durable state keeps of memory: a share-partition dropped because its
durable state differed from memory (a state write whose outcome was unknown) reloads with each
record it has not done counted at least as often as memory counted it — never counted down — and
the records its members held still held by them, until their old deadlines."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.persist import MemoryLog, MemoryPersister, SharePartitionKey
from kshare_sidecar.persist.model import DeliveryState, PartitionState, StateBatch
from kshare_sidecar.share.cache import SharePartitionCache
from kshare_sidecar.share.state_writes import PendingAcks
from kshare_sidecar.share.engine.config import ShareConfig
from kshare_sidecar.share.engine.partition import SharePartition
from kshare_sidecar.share.engine.persisted import with_count_floor

TOPIC_ID = uuid.UUID(int=7)
KEY = SharePartitionKey("g", str(TOPIC_ID), 0)
CONFIG = {"share.record.lock.duration.ms": 30_000, "share.delivery.count.limit": 5,
          "share.partition.max.record.locks": 2000}
DONE = (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED)


class Backend:
    """What the cache asks of the backend here: the topic of TOPIC_ID (one partition)."""

    async def resolve_topic_id(self, topic_id):
        return TopicInfo("t", TOPIC_ID, 1) if topic_id == TOPIC_ID else None


async def cache_at(clock) -> tuple[MemoryPersister, SharePartitionCache]:
    """A share-partition cache over a memory persister with KEY initialized at offset 0."""
    persister = MemoryPersister(log=MemoryLog(1))
    await persister.start()
    await persister.initialize(KEY, 0, 0)
    return persister, SharePartitionCache(persister=persister, backend=Backend(), clock=clock,
                                          group_config=lambda g: CONFIG)


@st.composite
def states(draw, epoch: int = 0) -> PartitionState:
    """A valid persisted state: SPSO, then ascending non-overlapping batches (no AVAILABLE with 0)."""
    start = draw(st.integers(0, 5))
    pos, batches = start, []
    for _ in range(draw(st.integers(0, 5))):
        first = pos + draw(st.integers(0, 3))
        last = first + draw(st.integers(0, 4))
        state = draw(st.sampled_from([DeliveryState.AVAILABLE, *DONE]))
        count = draw(st.integers(1 if state == DeliveryState.AVAILABLE else 0, 6))
        batches.append(StateBatch(first, last, state, count))
        pos = last + 1
    return PartitionState(epoch, 1, start, tuple(batches))


def per_offset(s: PartitionState, end: int) -> dict[int, tuple[DeliveryState, int]]:
    """The naive model: every offset of [SPSO, end) with its state and count."""
    out = {o: (DeliveryState.AVAILABLE, 0) for o in range(s.start_offset, end)}
    for b in s.state_batches:
        for o in range(b.first_offset, b.last_offset + 1):
            out[o] = (b.delivery_state, b.delivery_count)
    return out


@given(states(), states())
def test_the_floor_raises_counts_of_records_not_done_and_nothing_else(durable, floor):
    merged, raised = with_count_floor(durable, floor)
    assert merged.start_offset == durable.start_offset
    ends = [b.last_offset + 1 for s in (durable, merged, floor) for b in s.state_batches] + [durable.start_offset]
    end = max(ends)
    want = per_offset(durable, end)
    floors = {o: c for o, (_s, c) in per_offset(floor, end).items()}
    bumped = 0
    for o, (state, count) in want.items():
        if state not in DONE and floors.get(o, 0) > count:
            want[o], bumped = (state, floors[o]), bumped + 1
    assert per_offset(merged, end) == want and raised == bumped
    pairs = list(zip(merged.state_batches, merged.state_batches[1:]))
    assert all(a.last_offset < b.first_offset for a, b in pairs)
    assert all(b.delivery_count > 0 for b in merged.state_batches if b.delivery_state == DeliveryState.AVAILABLE)


def test_another_state_epoch_voids_the_floor():
    durable = PartitionState(1, 1, 0, ())
    floor = PartitionState(0, 1, 0, (StateBatch(0, 9, DeliveryState.AVAILABLE, 3),))
    assert with_count_floor(durable, floor) == (durable, 0)


ACCEPT = 1


@st.composite
def held_pieces(draw, start: int) -> list[tuple[int, int, int, str, int]]:
    """Pieces memory held before the reload: ascending, non-overlapping, from ``start`` - 3 on."""
    pos, out = max(0, start - 3), []
    for _ in range(draw(st.integers(0, 4))):
        first = pos + draw(st.integers(0, 4))
        last = first + draw(st.integers(0, 4))
        out.append((first, last, draw(st.integers(1, 6)), draw(st.sampled_from("ab")), draw(st.integers(1, 3)) * 1000))
        pos = last + 1
    return out


@given(states(), st.data())
def test_adopt_holds_again_exactly_what_the_durable_state_leaves_available(durable, data):
    held = data.draw(held_pieces(durable.start_offset))
    sp = SharePartition.restore(durable, lambda: 0, ShareConfig(record_lock_duration_ms=30_000,
                                                                delivery_count_limit=9, max_record_locks=2000))
    spso = sp.spso
    end = max([sp.end_offset] + [last + 1 for _f, last, *_ in held])
    before = {o: (DeliveryState(st_), c) for f, l, st_, c, _m, _d in sp.ranges() for o in range(f, l + 1)}
    want = {o: (before.get(o, (DeliveryState.AVAILABLE, 0)) + (None, None)) for o in range(spso, end)}
    for first, last, count, member, deadline in held:
        for o in range(max(first, spso), last + 1):
            state, c, _m, _d = want[o]
            if state == DeliveryState.AVAILABLE:
                want[o] = (DeliveryState.ACQUIRED, max(c, count), member, deadline)
    taken = sp.adopt(held)
    got = {o: (DeliveryState(st_), c, m, d) for f, l, st_, c, m, d in sp.ranges() for o in range(f, l + 1)}
    assert got == {o: v for o, v in want.items() if o >= sp.spso}
    assert taken == sum(1 for v in want.values() if v[0] == DeliveryState.ACQUIRED)
    for deadline in (1000, 2000, 3000):  # the locks run out at the old deadlines, no sooner
        sp.expire(deadline - 1)
        assert sum(1 for _f, _l, st_, _c, _m, d in sp.ranges() if st_ == DeliveryState.ACQUIRED and d < deadline) == 0
        still = sum(l - f + 1 for f, l, st_, _c, _m, d in sp.ranges() if st_ == DeliveryState.ACQUIRED)
        assert still == sum(1 for v in want.values() if v[0] == DeliveryState.ACQUIRED and v[3] >= deadline)
    sp.expire(3000)
    assert sp.quiet()


async def test_a_reload_leaves_the_records_with_the_member_that_held_them():
    """Records acquired and handed out, then the share-partition reloads (a state write whose
    outcome was unknown): they stay with their member — nobody else gets them, the member's
    acknowledgement succeeds — and a lock that runs out later counts from what memory counted."""
    now = [0]
    persister, mgr = await cache_at(lambda: now[0])
    slot = await mgr.get("g", TOPIC_ID, 0, "t")
    assert [r.delivery_count for r in slot.partition.acquire("m", [(0, 19, -1, False, False)], 20)] == [1]
    mgr.retire([KEY])
    assert mgr.loading("g", TOPIC_ID, 0)  # an acknowledgement before the next fetch loads it again
    fresh = await mgr.slot_for("g", TOPIC_ID, 0, load=False)
    assert fresh is not slot and fresh.partition.acquire("other", [(0, 19, -1, False, False)], 20) == []
    codes = await mgr.persist_plans([(fresh, PendingAcks("m", [(0, 9, [ACCEPT])]))])
    assert codes == {KEY: 0}
    now[0] = 30_001
    assert fresh.partition.expire(now[0]) == 10  # 10..19: the member never acknowledged them
    assert [(r.first_offset, r.delivery_count) for r in
            fresh.partition.acquire("other", [(0, 19, -1, False, False)], 20)] == [(10, 2)]
    await mgr.close()
    await persister.close()


async def test_a_reload_keeps_the_delivery_counts_memory_had():
    """Records delivered twice in memory (a lock expiry between), none of it written; after a
    reload from the state topic and the second lock running out, they come next with count 3,
    not 1 as the state topic alone would say."""
    now = [0]
    persister, mgr = await cache_at(lambda: now[0])
    slot = await mgr.get("g", TOPIC_ID, 0, "t")
    assert [r.delivery_count for r in slot.partition.acquire("m", [(0, 9, -1, False, False)], 10)] == [1]
    now[0] = 60_000
    assert slot.partition.expire(now[0]) == 10
    assert [r.delivery_count for r in slot.partition.acquire("m", [(0, 9, -1, False, False)], 10)] == [2]
    mgr.retire([KEY])
    fresh = await mgr.get("g", TOPIC_ID, 0, "t")
    assert fresh.partition.acquire("m", [(0, 9, -1, False, False)], 10) == []  # still held: see above
    now[0] = 120_000
    assert fresh.partition.expire(now[0]) == 10
    assert [r.delivery_count for r in fresh.partition.acquire("m", [(0, 9, -1, False, False)], 10)] == [3]
    mgr.retire([KEY], keep_counts=False)  # a superseded sidecar keeps nothing
    again = await mgr.get("g", TOPIC_ID, 0, "t")
    assert [r.delivery_count for r in again.partition.acquire("m", [(0, 9, -1, False, False)], 10)] == [1]
    await mgr.close()
    await persister.close()


async def test_a_group_reset_after_the_retirement_keeps_nothing_of_memory():
    """An admin reset (alterShareGroupOffsets, a group deleted) between the retirement and the reload:
    the group's share-partitions start over; no record is held or counted from before."""
    now = [0]
    persister, mgr = await cache_at(lambda: now[0])
    slot = await mgr.get("g", TOPIC_ID, 0, "t")
    assert slot.partition.acquire("m", [(0, 9, -1, False, False)], 10)
    mgr.retire([KEY])
    mgr.unload_group("g")
    fresh = await mgr.get("g", TOPIC_ID, 0, "t")
    assert [r.delivery_count for r in fresh.partition.acquire("other", [(0, 9, -1, False, False)], 10)] == [1]
    await mgr.close()
    await persister.close()
