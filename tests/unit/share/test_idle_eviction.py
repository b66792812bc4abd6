"""Idle share-partitions dropped from memory (share.partition.idle.eviction.ms) and loaded again:
the service over the real engine, the memory persister and an in-memory log, with a test clock."""

from __future__ import annotations

import uuid


import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.backend.types import BatchInfo, FetchResult, TopicInfo
from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.share.cache import SharePartitionCache
from kshare_sidecar.share.manager import FetchParams, SharePartitionManager
from kshare_sidecar.share.engine.sessions import ShareSessionCache
from kshare_sidecar.share.engine.types import AckBatch

TOPIC = TopicInfo("jobs", uuid.UUID(int=7), 1)
CONFIG = {"share.record.lock.duration.ms": 30000, "share.delivery.count.limit": 5,
          "share.partition.max.record.locks": 2000, "share.auto.offset.reset": "earliest",
          "share.isolation.level": "read_uncommitted"}


class MemoryLog:
    """One partition of 10-record batches (the bytes of a batch: b'<first>-<last>;')."""

    def __init__(self, batches: int) -> None:
        self.batches = [(i * 10, i * 10 + 9) for i in range(batches)]

    async def resolve_topic_id(self, topic_id):
        return TOPIC if topic_id == TOPIC.topic_id else None

    async def list_offsets(self, topic, partition, spec):
        return 0 if spec == "earliest" else self.batches[-1][1] + 1

    async def fetch(self, topic, partition, offset, *, max_bytes, max_wait_ms=0, isolation_level=0):
        buf, infos = b"", []
        for first, last in [(f, last) for f, last in self.batches if last >= offset]:
            data = f"{first}-{last};".encode()
            infos.append(BatchInfo(first, last, -1, False, False, len(buf), len(buf) + len(data)))
            buf += data
        end = self.batches[-1][1] + 1
        return FetchResult(buf, tuple(infos), end, end, 0)

IDLE_MS = 60_000
KEY = SharePartitionKey("g", str(TOPIC.topic_id), 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def env():
    persister = MemoryPersister()
    await persister.start()
    backend = MemoryLog(batches=3)
    clock = Clock()
    config = dict(CONFIG)
    parts = SharePartitionCache(persister=persister, backend=backend, clock=clock, group_config=lambda g: config,
                                  epoch=5, idle_eviction_ms=IDLE_MS)
    service = SharePartitionManager(sessions=ShareSessionCache(10), partitions=parts, backend=backend,
                           group_config=lambda g: config)
    yield service, parts, clock, backend, config, persister
    await parts.close()
    await persister.close()


async def fetch(svc, member, epoch, *, acks=None, max_records=500, max_wait_ms=0):
    return await svc.share_fetch(conn_id=1, group_id="g", member_id=member, epoch=epoch,
                                 params=FetchParams(max_wait_ms=max_wait_ms, max_records=max_records, batch_size=500),
                                 topics=[(TOPIC.topic_id, 0, acks or [])], forgotten=[])


def acquired(out) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count) for p in out.partitions for a in p.acquired]


async def test_a_share_partition_holding_records_is_never_evicted(env):
    svc, parts, clock, *_ = env
    assert acquired(await fetch(svc, "m1", 0, max_records=10)) == [(0, 9, 1)]
    clock.now += 10 * IDLE_MS  # the lock (30 s) would have expired, but nothing ran the timer
    assert parts.evict_idle() == 0
    assert KEY in parts.slots


async def test_an_idle_share_partition_is_evicted_after_the_idle_time_and_reloads_as_it_was(env):
    svc, parts, clock, *_ = env
    assert acquired(await fetch(svc, "m1", 0, max_records=10)) == [(0, 9, 1)]
    out = await fetch(svc, "m1", 1, acks=[AckBatch(0, 9, (1,))], max_records=0)  # accepted, durably
    assert [p.ack_error for p in out.partitions] == [ErrorCode.none]
    clock.now += IDLE_MS - 1
    assert parts.evict_idle() == 0, "not idle long enough"
    clock.now += 1
    old = parts.slots[KEY]
    assert parts.evict_idle() == 1
    assert KEY not in parts.slots and old.dead
    # the next fetch loads it from the snapshot: SPSO 10, the next records, counts as before
    assert acquired(await fetch(svc, "m1", 2, max_records=10)) == [(10, 19, 1)]
    assert parts.slots[KEY].partition.spso == 10 and KEY not in parts.evicted


async def test_a_fetch_or_ack_in_time_keeps_it_loaded(env):
    svc, parts, clock, *_ = env
    await fetch(svc, "m1", 0, max_records=10)
    await fetch(svc, "m1", 1, acks=[AckBatch(0, 9, (1,))], max_records=0)
    clock.now += IDLE_MS // 2
    assert acquired(await fetch(svc, "m1", 2, max_records=10)) == [(10, 19, 1)]  # touches it
    await fetch(svc, "m1", 3, acks=[AckBatch(10, 19, (1,))], max_records=0)
    clock.now += IDLE_MS // 2 + 1
    assert parts.evict_idle() == 0
    clock.now += IDLE_MS // 2
    assert parts.evict_idle() == 1


async def test_an_unset_start_offset_is_not_resolved_again_after_eviction(env):
    """share.auto.offset.reset=latest: the SPSO resolved at the first load (nothing written yet) is
    remembered, so records produced while the share-partition was evicted are still delivered."""
    svc, parts, clock, backend, config, persister = env
    config["share.auto.offset.reset"] = "latest"
    await persister.initialize(KEY, 0)  # start offset unset, as a heartbeat's initialization leaves it
    assert acquired(await fetch(svc, "m1", 0)) == []  # loaded at the log end, 30
    assert parts.slots[KEY].partition.spso == 30
    clock.now += IDLE_MS
    assert parts.evict_idle() == 1
    assert parts.evicted[KEY] == 30
    backend.batches.append((30, 39))  # produced while evicted
    assert acquired(await fetch(svc, "m1", 1)) == [(30, 39, 1)]


async def test_an_ack_for_an_evicted_share_partition_is_answered_as_for_a_loaded_one(env):
    """Kafka would have kept it loaded: a stray acknowledgement gets INVALID_RECORD_STATE, not
    UNKNOWN_TOPIC_OR_PARTITION (which is for share-partitions nothing was fetched from)."""
    svc, parts, clock, *_ = env
    await fetch(svc, "m1", 0, max_records=10)
    await fetch(svc, "m1", 1, acks=[AckBatch(0, 9, (1,))], max_records=0)
    clock.now += IDLE_MS
    assert parts.evict_idle() == 1
    out = await svc.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=2,
                                      topics=[(TOPIC.topic_id, 0, [AckBatch(0, 9, (1,))])])
    assert [p.error for p in out.partitions] == [ErrorCode.invalid_record_state]


async def test_unloading_a_group_forgets_its_evicted_share_partitions(env):
    svc, parts, clock, *_ = env
    await fetch(svc, "m1", 0, max_records=10)
    await fetch(svc, "m1", 1, acks=[AckBatch(0, 9, (1,))], max_records=0)
    clock.now += IDLE_MS
    assert parts.evict_idle() == 1 and KEY in parts.evicted
    parts.unload_group("g")
    assert KEY not in parts.evicted


async def test_eviction_off_keeps_everything(env):
    svc, parts, clock, *_ = env
    parts.idle_eviction_ms = 0
    await fetch(svc, "m1", 0, max_records=10)
    await fetch(svc, "m1", 1, acks=[AckBatch(0, 9, (1,))], max_records=0)
    clock.now += 100 * IDLE_MS
    assert parts.evict_idle() == 0


def test_an_idle_slot_makes_no_locks_or_waiter_set():
    from kshare_sidecar.share.slot import Slot
    from kshare_sidecar.share.engine.config import ShareConfig
    from kshare_sidecar.share.engine.partition import SharePartition

    slot = Slot(KEY, "jobs", SharePartition(ShareConfig(), lambda: 0))
    slot.wake()
    assert not slot.busy()
    assert slot._write_lock is None and slot._fetch_lock is None and slot._waiters is None
    assert not hasattr(slot, "__dict__")
