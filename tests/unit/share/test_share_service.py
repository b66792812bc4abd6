"""ShareFetch / ShareAcknowledge rules without sockets: the service over the real engine, the
memory persister and an in-memory log (bytes in, batch boundaries out)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.backend.types import BatchInfo, FetchResult, TopicInfo
from kshare_sidecar.persist.errors import BackendWriteError
from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.share.cache import SharePartitionCache
from kshare_sidecar.share.manager import FetchParams, SharePartitionManager
from kshare_sidecar.share.engine.sessions import ShareSessionCache
from kshare_sidecar.share.engine.types import AckBatch

TOPIC = TopicInfo("jobs", uuid.UUID(int=7), 1)
TP = (TOPIC.topic_id, 0)
CONFIG = {"share.record.lock.duration.ms": 30000, "share.delivery.count.limit": 5,
          "share.partition.max.record.locks": 2000, "share.auto.offset.reset": "earliest",
          "share.isolation.level": "read_uncommitted"}


class MemoryLog:
    """One partition of 10-record batches; each batch's bytes are b'<first>-<last>;'."""

    def __init__(self, batches: int) -> None:
        self.batches = [(i * 10, i * 10 + 9) for i in range(batches)]

    async def resolve_topic_id(self, topic_id):
        return TOPIC if topic_id == TOPIC.topic_id else None

    async def list_offsets(self, topic, partition, spec):
        return 0 if spec == "earliest" else self.batches[-1][1] + 1

    async def fetch(self, topic, partition, offset, *, max_bytes, max_wait_ms=0, isolation_level=0):
        chosen = [(f, last) for f, last in self.batches if last >= offset]
        if not chosen and max_wait_ms:
            await asyncio.sleep(max_wait_ms / 1000)
        buf, infos = b"", []
        for first, last in chosen:
            data = f"{first}-{last};".encode()
            infos.append(BatchInfo(first, last, -1, False, False, len(buf), len(buf) + len(data)))
            buf += data
        end = self.batches[-1][1] + 1
        return FetchResult(buf, tuple(infos), end, end, 0)


def clock() -> int:
    return int(time.monotonic() * 1000)


@pytest.fixture
async def svc():
    persister = MemoryPersister()
    await persister.start()
    backend = MemoryLog(batches=3)
    parts = SharePartitionCache(persister=persister, backend=backend, clock=clock, group_config=lambda g: CONFIG,
                                  epoch=5)
    parts.start()
    service = SharePartitionManager(sessions=ShareSessionCache(10), partitions=parts, backend=backend,
                           group_config=lambda g: CONFIG)
    yield service
    await parts.close()
    await persister.close()


async def fetch(svc, member, epoch, *, acks=None, max_records=500, max_wait_ms=50, conn=1, topics=None):
    topics = topics if topics is not None else [(TOPIC.topic_id, 0, acks or [])]
    return await svc.share_fetch(conn_id=conn, group_id="g", member_id=member, epoch=epoch,
                                 params=FetchParams(max_wait_ms=max_wait_ms, max_records=max_records, batch_size=500),
                                 topics=topics, forgotten=[])


async def test_open_fetch_returns_acquired_batches_bytes(svc):
    out = await fetch(svc, "m1", 0)
    assert out.error == ErrorCode.none
    [part] = out.partitions
    assert b"".join(part.records) == b"0-9;10-19;20-29;"  # views of the read, never joined
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired] == [(0, 29, 1)]
    assert part.ack_error is None


async def test_session_epoch_rules(svc):
    assert (await fetch(svc, "m1", 0, acks=[AckBatch(0, 0, (1,))])).error == ErrorCode.invalid_request
    assert (await fetch(svc, "m1", 3)).error == ErrorCode.share_session_not_found
    await fetch(svc, "m1", 0)
    assert (await fetch(svc, "m1", 2)).error == ErrorCode.invalid_share_session_epoch
    ack0 = await svc.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=0, topics=[])
    assert ack0.error == ErrorCode.invalid_share_session_epoch
    assert (await fetch(svc, "", 0)).error == ErrorCode.invalid_request


async def test_ack_only_fetch_answers_every_ack_partition_at_once(svc):
    await fetch(svc, "m1", 0)
    started = time.monotonic()
    out = await fetch(svc, "m1", 1, acks=[AckBatch(0, 29, (1,))], max_records=0, max_wait_ms=5000)
    assert time.monotonic() - started < 1.0, "MaxRecords=0 must not wait"
    assert [(p.partition, p.ack_error, b"".join(p.records)) for p in out.partitions] == [(0, ErrorCode.none, b"")]


async def test_empty_fetch_is_held_up_to_max_wait(svc):
    await fetch(svc, "m1", 0)
    started = time.monotonic()
    out = await fetch(svc, "m1", 1, max_wait_ms=300)
    assert time.monotonic() - started >= 0.25
    assert all(not p.acquired for p in out.partitions)


async def test_unknown_topic_id_is_a_partition_error_with_empty_records(svc):
    other = uuid.UUID(int=99)
    out = await fetch(svc, "m1", 0, topics=[(other, 0, [])])
    [part] = out.partitions
    assert part.error == ErrorCode.unknown_topic_id and not part.records


async def test_bad_ack_gets_invalid_record_state_and_changes_nothing(svc):
    await fetch(svc, "m1", 0)
    await fetch(svc, "m2", 0)  # m2 gets nothing: m1 holds everything
    out = await svc.share_acknowledge(conn_id=1, group_id="g", member_id="m2", epoch=1,
                                      topics=[(TOPIC.topic_id, 0, [AckBatch(0, 9, (1,))])])
    assert [p.error for p in out.partitions] == [ErrorCode.invalid_record_state]
    out = await svc.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=1,
                                      topics=[(TOPIC.topic_id, 0, [AckBatch(0, 29, (1,))])])
    assert [p.error for p in out.partitions] == [ErrorCode.none]


async def test_close_and_disconnect_release_records_keeping_counts(svc):
    await fetch(svc, "m1", 0, conn=1)
    closed = await svc.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=-1, topics=[])
    assert closed.error == ErrorCode.none and svc.sessions.get(("g", "m1")) is None
    out = await fetch(svc, "m2", 0, conn=2)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in out.partitions[0].acquired] == [(0, 29, 2)]
    svc.connection_closed(2)
    out = await fetch(svc, "m3", 0, conn=3)
    assert [a.delivery_count for a in out.partitions[0].acquired] == [3]


async def test_a_parked_fetch_of_a_closed_connection_acquires_nothing(svc):
    """A consumer process dies while its ShareFetch waits (long poll) and holds records: the
    disconnect releases them and wakes the parked fetch, which must not acquire them again for
    the dead session (the next member would see delivery count 3, not 2)."""
    await fetch(svc, "dead", 0, conn=1)  # holds 0..29
    parked = asyncio.create_task(fetch(svc, "dead", 1, conn=1, max_wait_ms=2000))
    await asyncio.sleep(0.05)
    svc.connection_closed(1)
    out = await parked
    assert all(not p.acquired for p in out.partitions)
    taken = await fetch(svc, "next", 0, conn=2)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in taken.partitions[0].acquired] == [(0, 29, 2)]


async def test_records_acquired_while_the_connection_closed_are_released(svc):
    """The disconnect lands while the fetch reads the log (an await inside the acquisition):
    what it acquires for the gone session goes back at once, not at lock expiry (the acquisition
    happened, so it counts as a delivery attempt, as a release at session close does)."""
    real_fetch = svc.backend.fetch

    async def slow_fetch(*args, **kwargs):
        svc.connection_closed(1)  # the consumer dies during the backend read
        return await real_fetch(*args, **kwargs)

    svc.backend.fetch = slow_fetch
    await fetch(svc, "dead", 0, conn=1)
    svc.backend.fetch = real_fetch
    taken = await fetch(svc, "next", 0, conn=2)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in taken.partitions[0].acquired] == [(0, 29, 2)]


async def test_failed_state_write_rolls_the_ack_back(svc):
    await fetch(svc, "m1", 0)

    async def failing_write(*args, **kwargs):
        raise BackendWriteError("backend down")

    svc.partitions.persister.write = failing_write
    out = await svc.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=1,
                                      topics=[(TOPIC.topic_id, 0, [AckBatch(0, 29, (1,))])])
    assert [p.error for p in out.partitions] == [ErrorCode.coordinator_not_available]
    slot = svc.partitions.loaded("g", TOPIC.topic_id, 0)
    assert slot.partition.spso == 0 and slot.partition.members() == ["m1"], "nothing may change on a failed write"
