"""``state.write.mode=idempotent`` against a real Kafka 3.9: state written without transactions
(for backends that have none), fenced by owner epochs at replay and by the state-topic watch.

The zombie here is a late plain write of the previous owner, produced after the new owner took
over — exactly what the backend cannot refuse without transactions. It must never be adopted by
a replay, the new owner must write its own view again (so compaction cannot keep the zombie's
record as the newest of its key), and the old owner must stop serving once it sees the newer
owner record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from kshare_sidecar.persist import DeliveryState, PartitionState, PersistError, SharePartitionKey, StateBatch
from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_OWNER, KIND_PARTITION
from kshare_sidecar.persist.records import StoredPartition
from kshare_sidecar.persist.topic import TopicPersister, TopicSettings

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

TID = "0b8e2f5e-3a43-4a83-9a55-6a2b9bd0f0c1"


def _persister(bootstrap: str, topic: str) -> TopicPersister:
    return TopicPersister(TopicSettings(bootstrap, topic=topic, partitions=1, replication_factor=1,
                                        write_mode="idempotent"))


def _state(start: int, epoch: int) -> PartitionState:
    return PartitionState(state_epoch=1, leader_epoch=epoch, start_offset=start,
                          state_batches=(StateBatch(start + 2, start + 4, DeliveryState.ACKNOWLEDGED, 1),))


async def _committed(bootstrap: str, topic: str) -> list[tuple[str, object]]:
    """Every record of the state topic, decoded, in offset order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        out = []
        while await consumer.position(tp) < end:
            for messages in (await consumer.getmany(tp, timeout_ms=500)).values():
                for m in messages:
                    kind, _, entity = codec.decode(m.key, m.value)
                    out.append((kind, entity))
        return out
    finally:
        await consumer.stop()


async def _until(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.1)


async def _owner_with_state(bootstrap: str, topic: str, key: SharePartitionKey, start: int) -> TopicPersister:
    """A started persister that owns ``key`` (taken at its owner epoch) with SPSO ``start``."""
    p = _persister(bootstrap, topic)
    await p.start()
    await p.initialize(key, 1, 0)
    await p.read_one(key, leader_epoch=p.owner_epoch)
    await p.write(key, _state(start, p.owner_epoch), p.owner_epoch)
    return p


async def test_writes_without_transactions_round_trip(kafka_39):
    topic = f"__kshare_state_idem_{uuid.uuid4().hex[:8]}"
    key = SharePartitionKey("g", TID, 0)
    a = await _owner_with_state(kafka_39.bootstrap, topic, key, 10)
    await a.close()
    b = _persister(kafka_39.bootstrap, topic)
    await b.start()
    assert (await b.read_one(key)).start_offset == 10
    assert b.owner_epoch == a.owner_epoch + 1
    await b.close()


async def test_a_zombie_write_is_never_adopted_and_the_zombie_stops(kafka_39):
    topic = f"__kshare_state_idem_{uuid.uuid4().hex[:8]}"
    key = SharePartitionKey("g", TID, 0)
    a = await _owner_with_state(kafka_39.bootstrap, topic, key, 100)

    b = _persister(kafka_39.bootstrap, topic)
    await b.start()
    assert b.owner_epoch > a.owner_epoch
    await b.read_one(key, leader_epoch=b.owner_epoch)
    await b.write(key, _state(200, b.owner_epoch), b.owner_epoch)

    # A still believes it owns the key: its write lands after B's owner record, and A's watch
    # refuses to confirm it (or A already stopped): it is never answered as durable.
    with pytest.raises(PersistError):
        await a.write(key, _state(60, a.owner_epoch), a.owner_epoch)

    # A's late plain write lands after B's owner record (A was paused; the backend cannot refuse it).
    zombie = StoredPartition(_state(50, a.owner_epoch), assignment_epoch=a.owner_epoch)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_39.bootstrap, acks="all")
    await producer.start()
    try:
        k, v = codec.encode(KIND_PARTITION, key, zombie)
        await producer.send_and_wait(topic, value=v, key=k, partition=0)
    finally:
        await producer.stop()

    await _until(lambda: a.superseded)  # A's watch saw B's owner record: A stops serving
    # B's watch saw the zombie record and wrote its own view again, at its own epoch
    deadline = time.monotonic() + 15
    while True:
        records = await _committed(kafka_39.bootstrap, topic)
        parts = [e for kind, e in records if kind == KIND_PARTITION]
        if parts and parts[-1].state.leader_epoch == b.owner_epoch and parts[-1].state.start_offset == 200:
            break
        assert time.monotonic() < deadline, parts[-3:]
        await asyncio.sleep(0.2)
    owners = [e for kind, e in records if kind == KIND_OWNER]
    assert owners == sorted(owners) and owners[-1] == b.owner_epoch
    await a.close()
    await b.close()

    c = _persister(kafka_39.bootstrap, topic)
    await c.start()
    assert (await c.read_one(key)).start_offset == 200  # B's state, never the zombie's 50
    assert c.recovery_stats.stale_ignored >= 1
    await c.close()


def test_stale_records_are_decided_by_position_not_by_key():
    """The owner rule: a record is stale if an owner record with a higher epoch was replayed
    before it on the same state partition, whatever the key's own history."""
    from kshare_sidecar.persist.replay import replay_sink
    from kshare_sidecar.persist.records import RecoveryStats

    key = SharePartitionKey("g", TID, 0)

    def rec(start: int, epoch: int):
        return codec.encode(KIND_PARTITION, key, StoredPartition(_state(start, epoch), assignment_epoch=epoch))

    for rule, expected in (("key", 50), ("owner", 100)):
        entities: dict = {}
        stats = RecoveryStats()
        sink = replay_sink(entities, stats, {}, rule)
        sink(0, 0, *codec.encode(KIND_OWNER, 0, 3))
        sink(0, 1, *rec(100, 3))                     # old owner, before the takeover: kept
        sink(0, 2, *codec.encode(KIND_OWNER, 0, 4))  # the new owner takes the partition
        sink(0, 3, *rec(50, 3))                      # old owner's late write
        assert entities[(KIND_PARTITION, key)].state.start_offset == expected
        assert stats.stale_ignored == (1 if rule == "owner" else 0)
        assert dataclasses.is_dataclass(entities[(KIND_PARTITION, key)])


def test_an_initialization_record_is_not_taken_for_a_zombie():
    """Share-partitions are initialized before any owner epoch is stamped on them (NO_EPOCH): the
    owner rule must not ignore those records (a 1M benchmark run in idempotent mode logged every
    initialization as a zombie write)."""
    from kshare_sidecar.persist.replay import replay_sink
    from kshare_sidecar.persist.records import NO_EPOCH, RecoveryStats

    key = SharePartitionKey("g", TID, 0)
    entities: dict = {}
    stats = RecoveryStats()
    sink = replay_sink(entities, stats, {}, "owner")
    sink(0, 0, *codec.encode(KIND_OWNER, 0, 4))
    sink(0, 1, *codec.encode(KIND_PARTITION, key, StoredPartition(_state(7, NO_EPOCH))))
    assert entities[(KIND_PARTITION, key)].state.start_offset == 7 and stats.stale_ignored == 0
