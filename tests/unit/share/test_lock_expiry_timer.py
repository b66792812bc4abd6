"""The share-partition manager's lock-expiry timer (regression: equal deadlines crashed it)."""

from __future__ import annotations

import asyncio
import uuid

from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.share.cache import SharePartitionCache, Slot
from kshare_sidecar.share.engine.config import ShareConfig
from kshare_sidecar.share.engine.partition import SharePartition


class Clock:
    now = 0

    def __call__(self) -> int:
        return self.now


class RecordingPersister:
    owner_epoch = None  # the Persister protocol's single-sidecar part, trivially
    cluster = False

    def __init__(self) -> None:
        self.writes: list[SharePartitionKey] = []
        self.reload_listeners: list = []
        self.superseded_listeners: list = []

    async def write(self, key, state, epoch) -> None:
        self.writes.append(key)


async def test_equal_deadlines_on_many_partitions_all_expire():
    clock, persister = Clock(), RecordingPersister()
    mgr = SharePartitionCache(persister=persister, backend=None, clock=clock, group_config=lambda g: {}, epoch=1)
    config = ShareConfig(record_lock_duration_ms=1000)
    slots = []
    for p in range(4):  # same acquisition instant -> identical lock deadlines
        key = SharePartitionKey("g", str(uuid.UUID(int=1)), p)
        slot = mgr.slots[key] = Slot(key, "t", SharePartition(config, clock))
        assert slot.partition.acquire("m", [(0, 9, -1, False, False)], 10)
        mgr.track(slot)
        slots.append(slot)
    mgr.start()
    try:
        clock.now = 1000
        mgr._rearm.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if all(s.partition.next_lock_deadline() is None for s in slots):
                break
        assert all(s.partition.next_fetch_offset() == 0 for s in slots), "locks did not expire"
        await asyncio.sleep(0.05)
        assert sorted(k.partition for k in persister.writes) == [0, 1, 2, 3]
        assert not mgr._timer.done(), "the expiry task must keep running"
    finally:
        await mgr.close()


async def test_one_heap_entry_per_share_partition_and_every_lock_still_expires():
    """Each acquisition tracks its share-partition; only an earlier deadline adds an entry, and
    the entry that comes due tracks the share-partition again, so later locks still expire."""
    clock, persister = Clock(), RecordingPersister()
    mgr = SharePartitionCache(persister=persister, backend=None, clock=clock, group_config=lambda g: {}, epoch=1)
    config = ShareConfig(record_lock_duration_ms=1000)
    key = SharePartitionKey("g", str(uuid.UUID(int=1)), 0)
    slot = mgr.slots[key] = Slot(key, "t", SharePartition(config, clock))
    for i in range(50):  # fifty ShareFetches, 10 ms apart, each acquiring one batch
        clock.now = i * 10
        assert slot.partition.acquire("m", [(i * 10, i * 10 + 9, -1, False, False)], 10)
        mgr.track(slot)
    assert len(mgr._deadlines) == 1 and mgr._deadlines[0][0] == 1000
    clock.now = 1000
    mgr._expire_due()
    assert slot.partition.next_fetch_offset() == 0  # the first batch is available again
    assert [d for d, _, _ in mgr._deadlines] == [1010]  # tracked again at the next lock's deadline
    clock.now = 1490
    mgr._expire_due()
    assert mgr._deadlines == [] and slot.partition.next_lock_deadline() is None
    # nothing tracked: the next acquisition adds an entry
    assert slot.partition.acquire("m", [(500, 509, -1, False, False)], 10)
    mgr.track(slot)
    first = mgr._deadlines[0][0]
    assert first == 2490
    mgr._tracked[key] = 5000  # tracked at a later deadline (a lock renewed, a longer hold): the earlier one is pushed
    mgr.track(slot)
    assert sorted(d for d, _, _ in mgr._deadlines) == [2490, 2490]
    clock.now = 2490
    mgr._expire_due()
    assert slot.partition.next_lock_deadline() is None and mgr._deadlines == []
    await mgr.close()
