"""Delivery counts across a reload from the durable state: a share-partition dropped because its
durable state differed from memory (a state write whose outcome was unknown) reloads with each
record it has not done counted at least as often as memory counted it — never counted down."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.persist import MemoryLog, MemoryPersister, SharePartitionKey
from kshare_sidecar.persist.model import DeliveryState, PartitionState, StateBatch
from kshare_sidecar.share.cache import SharePartitionCache
from kshare_sidecar.share.engine.persisted import with_count_floor

TOPIC_ID = uuid.UUID(int=7)
KEY = SharePartitionKey("g", str(TOPIC_ID), 0)
CONFIG = {"share.record.lock.duration.ms": 30_000, "share.delivery.count.limit": 5,
          "share.partition.max.record.locks": 2000}
DONE = (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED)


async def cache_at(clock) -> tuple[MemoryPersister, SharePartitionCache]:
    """A share-partition cache over a memory persister with KEY initialized at offset 0."""
    persister = MemoryPersister(log=MemoryLog(1))
    await persister.start()
    await persister.initialize(KEY, 0, 0)
    return persister, SharePartitionCache(persister=persister, backend=None, clock=clock,
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


async def test_a_reload_keeps_the_delivery_counts_memory_had():
    """Records delivered twice in memory (a lock expiry between), none of it written; a reload
    from the state topic delivers them next with count 2 (the second attempt replayed, as after
    a crash), not 1 as the state topic alone would say."""
    now = [0]
    persister, mgr = await cache_at(lambda: now[0])
    slot = await mgr.get("g", TOPIC_ID, 0, "t")
    assert [r.delivery_count for r in slot.partition.acquire("m", [(0, 9, -1, False, False)], 10)] == [1]
    now[0] = 60_000
    assert slot.partition.expire(now[0]) == 10
    assert [r.delivery_count for r in slot.partition.acquire("m", [(0, 9, -1, False, False)], 10)] == [2]
    mgr.retire([KEY])
    fresh = await mgr.get("g", TOPIC_ID, 0, "t")
    assert [r.delivery_count for r in fresh.partition.acquire("m", [(0, 9, -1, False, False)], 10)] == [2]
    mgr.retire([KEY], keep_counts=False)  # a superseded sidecar keeps nothing
    again = await mgr.get("g", TOPIC_ID, 0, "t")
    assert [r.delivery_count for r in again.partition.acquire("m", [(0, 9, -1, False, False)], 10)] == [1]
    await mgr.close()
    await persister.close()
