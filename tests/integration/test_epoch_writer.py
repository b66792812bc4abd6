"""``state.write.mode=fenced`` against a real Kafka 3.9: state batches without transactions, fenced by
the partition leader through a transactional id's producer epoch (persist/epochwriter.py).

What the mode rests on, each checked on the broker: a non-transactional idempotent batch under a
transactional id's producer id is accepted; once a newer init has written at its epoch, the older
writer's batch is refused (a zombie cannot land a write); a refresh by the older writer is refused
too (it cannot fence its successor); a batch sent twice lands once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient

from kshare_sidecar.persist import DeliveryState, PartitionState, SharePartitionKey, StateBatch
from kshare_sidecar.persist.epochwriter import EpochFencedError, EpochWriter
from kshare_sidecar.persist.topic import TopicPersister, TopicSettings

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

TID = "5d1c54b7-6f2e-4c1e-9f35-0a8d1d4b7e21"


async def _topic(bootstrap: str) -> str:
    name = f"epoch-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        await admin.close()
    return name


async def _client(bootstrap: str, topic: str) -> AIOKafkaClient:
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    client.add_topic(topic)
    await client.force_metadata_update()
    return client


async def _values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[bytes] = []
        while await consumer.position(tp) < end:
            for messages in (await consumer.getmany(tp, timeout_ms=1000)).values():
                out.extend(m.value for m in messages)
        return out
    finally:
        await consumer.stop()


def _writer(client: AIOKafkaClient, topic: str, txn: str) -> EpochWriter:
    return EpochWriter(client, topic, 0, txn, transaction_timeout_ms=60_000, request_timeout_ms=30_000)


@pytest.fixture(params=["3.9", "4"])
def backend(request):
    """Kafka 3.9 and Kafka 4.x (transaction version 2: epochs are bumped per transaction there,
    which a writer that never commits one must not care about)."""
    return request.getfixturevalue("kafka_39" if request.param == "3.9" else "kafka_4")


async def test_a_newer_epoch_fences_the_older_writer_on_the_broker(backend):
    kafka_39 = backend
    topic = await _topic(kafka_39.bootstrap)
    txn = f"kshare-test-{uuid.uuid4().hex[:8]}"
    client = await _client(kafka_39.bootstrap, topic)
    try:
        old = _writer(client, topic, txn)
        await old.start()
        assert await old.send([(b"k", b"old-1"), (b"k", b"old-2")]) == 1
        new = _writer(client, topic, txn)
        await new.start()
        assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)
        assert await old.send([(b"k", b"old-3")]) == 2  # before the successor wrote: it precedes it
        assert await new.send([(b"k", b"new-1")]) == 3
        with pytest.raises(EpochFencedError):
            await old.send([(b"k", b"zombie")])
        with pytest.raises(EpochFencedError):  # fenced for good, without asking the broker again
            await old.send([(b"k", b"zombie-2")])
        with pytest.raises(EpochFencedError):  # a conditional bump with the stale epoch is refused
            await _writer_with(client, topic, txn, old).refresh()
        assert await new.send([(b"k", b"new-2")]) == 4  # the successor was not fenced by it
        await new.refresh()
        assert await new.send([(b"k", b"new-3")]) == 5
        assert await _values(kafka_39.bootstrap, topic) == [b"old-1", b"old-2", b"old-3", b"new-1", b"new-2",
                                                            b"new-3"]
    finally:
        await client.close()


def _writer_with(client: AIOKafkaClient, topic: str, txn: str, like: EpochWriter) -> EpochWriter:
    """A writer holding ``like``'s producer id and (now stale) epoch, not marked fenced locally."""
    w = _writer(client, topic, txn)
    w.producer_id, w.producer_epoch = like.producer_id, like.producer_epoch
    return w


async def test_a_batch_sent_again_lands_once(kafka_39):
    topic = await _topic(kafka_39.bootstrap)
    client = await _client(kafka_39.bootstrap, topic)
    try:
        w = _writer(client, topic, f"kshare-test-{uuid.uuid4().hex[:8]}")
        await w.start()
        batch = w._build([(b"k", b"once")])
        assert await w._deliver(batch, 1) == 0
        w.sequence = 0  # as if the answer had been lost: the same bytes, the same sequence
        assert await w._deliver(batch, 1) == 0  # the leader answers with the first append's offset
        assert await w.send([(b"k", b"next")]) == 1
        assert await _values(kafka_39.bootstrap, topic) == [b"once", b"next"]
    finally:
        await client.close()


async def test_persister_in_fenced_mode_round_trips_and_a_successor_fences_it(kafka_39):
    topic = f"__kshare_state_fenced_{uuid.uuid4().hex[:8]}"
    key = SharePartitionKey("g", TID, 0)
    state = PartitionState(state_epoch=1, leader_epoch=0, start_offset=5,
                           state_batches=(StateBatch(7, 9, DeliveryState.ACKNOWLEDGED, 1),))
    first = TopicPersister(TopicSettings(kafka_39.bootstrap, topic=topic, partitions=1, replication_factor=1,
                                         write_mode="fenced"))
    await first.start()
    try:
        await first.initialize(key, 1, 0)
        await first.read_one(key, leader_epoch=first.owner_epoch)
        await first.write(key, dataclasses.replace(state, leader_epoch=first.owner_epoch), first.owner_epoch)
        second = TopicPersister(TopicSettings(kafka_39.bootstrap, topic=topic, partitions=1, replication_factor=1,
                                write_mode="fenced"))
        await second.start()
        try:
            assert second.owner_epoch > first.owner_epoch
            stored = await second.read_one(key, leader_epoch=second.owner_epoch)
            assert stored.start_offset == 5
            moved = PartitionState(state_epoch=1, leader_epoch=first.owner_epoch, start_offset=9, state_batches=())
            with pytest.raises(Exception) as failure:  # the zombie's write never counts
                await asyncio.wait_for(first.write(key, moved, first.owner_epoch), 30)
            assert "fenced" in f"{type(failure.value).__name__} {failure.value}".lower() or \
                "newer" in str(failure.value).lower()
            third = TopicPersister(TopicSettings(kafka_39.bootstrap, topic=topic, partitions=1, replication_factor=1,
                                   write_mode="fenced"))
            await third.start()
            try:
                assert (await third.read_one(key, leader_epoch=third.owner_epoch)).start_offset == 5
            finally:
                await third.close()
        finally:
            await second.close()
    finally:
        await first.close()
