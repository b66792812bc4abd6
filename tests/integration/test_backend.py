"""The backend layer against real Apache Kafka brokers (3.9 = a backend without share groups)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest as AioFetchRequest
from aiokafka.record.memory_records import MemoryRecords
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from kshare_sidecar.backend import Backend, InMemoryTopicIdStore, PartitionRead, UnknownTopicError
from kshare_sidecar.testing.probe import call
from tests.support import create_topic, produce, unique

pytestmark = pytest.mark.kafka


def broker_topic_id(cluster, topic: str) -> uuid.UUID:
    """The ID as the broker reports it, read without any kshare code (harness probe + kio)."""
    request = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    (answer,) = call(*cluster.host_port, request).topics
    assert answer.error_code == 0
    return answer.topic_id


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.delete_topics([topic])[topic].result(timeout=30)


def recreate_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Deletion completes asynchronously: retry creation until the old topic is really gone."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def wait_for_topic(backend: Backend, topic: str, ready=lambda info: True, timeout: float = 15):
    """Created topics reach the brokers' metadata a moment after CreateTopics answers."""
    async with asyncio.timeout(timeout):
        while True:
            await backend.refresh()
            info = (await backend.describe_topics([topic])).get(topic)
            if info is not None and ready(info):
                return info
            await asyncio.sleep(0.1)


def values_of(records: bytes | memoryview) -> list[bytes]:
    """Decode a record-set buffer with aiokafka (independent of kshare's parser)."""
    out, mr = [], MemoryRecords(bytes(records))
    while (batch := mr.next_batch()) is not None:
        if not batch.is_control_batch:
            out += [r.value for r in batch]
    return out


@pytest.fixture
async def backend(kafka_39):
    async with Backend(kafka_39.bootstrap, metadata_max_age_s=0.5) as b:
        yield b


# ---------------------------------------------------------------------------- topic IDs


@pytest.mark.parametrize("fixture", ["kafka_39", "kafka_4"])
async def test_topic_ids_are_the_brokers_and_follow_recreation(fixture, request):
    cluster = request.getfixturevalue(fixture)
    topic = unique("ids")
    create_topic(cluster.bootstrap, topic, partitions=3)
    async with Backend(cluster.bootstrap, metadata_max_age_s=0) as backend:
        assert backend.metadata_version is not None and backend.metadata_version >= 10
        info = await wait_for_topic(backend, topic)
        assert info.topic_id == broker_topic_id(cluster, topic)
        assert (info.partitions, info.internal) == (3, False)
        assert (await backend.describe_topics([topic]))[topic] == info  # stable across calls
        assert (await backend.describe_topics())[topic] == info  # and in the all-topics view
        assert backend.topic_by_id(info.topic_id) == info

        delete_topic(cluster.bootstrap, topic)
        recreate_topic(cluster.bootstrap, topic, partitions=1)
        again = await wait_for_topic(backend, topic, lambda t: t.topic_id != info.topic_id)
        assert again.topic_id != info.topic_id and again.topic_id == broker_topic_id(cluster, topic)
        assert again.partitions == 1
        assert backend.topic_by_id(info.topic_id) is None
        assert await backend.resolve_topic_id(again.topic_id) == again


async def test_minted_ids_when_backend_ids_are_not_used(kafka_39):
    topic = unique("minted")
    create_topic(kafka_39.bootstrap, topic)
    store = InMemoryTopicIdStore()
    async with Backend(kafka_39.bootstrap, topic_id_store=store, backend_topic_ids=False,
                       metadata_max_age_s=0) as backend:
        info = await wait_for_topic(backend, topic)
        assert info.topic_id != broker_topic_id(kafka_39, topic) and store.snapshot()[topic] == info.topic_id
        await backend.refresh()
        assert backend.topic_by_name(topic).topic_id == info.topic_id
        # a second sidecar sharing the store presents the same ID
        async with Backend(kafka_39.bootstrap, topic_id_store=store, backend_topic_ids=False) as other:
            assert other.topic_by_name(topic).topic_id == info.topic_id

        delete_topic(kafka_39.bootstrap, topic)
        async with asyncio.timeout(15):  # deletion reaches broker metadata asynchronously
            while backend.topic_by_name(topic) is not None:
                await backend.refresh()  # a full refresh sees it gone: the minted ID is forgotten
                await asyncio.sleep(0.1)
        assert backend.topic_by_id(info.topic_id) is None and topic not in store.snapshot()
        recreate_topic(kafka_39.bootstrap, topic)
        assert (await wait_for_topic(backend, topic)).topic_id != info.topic_id


async def test_internal_topics_are_hidden(kafka_39):
    state = unique("__kshare_state")
    create_topic(kafka_39.bootstrap, state)
    async with Backend(kafka_39.bootstrap, internal_topics=[state]) as b:
        await wait_for_topic(b, state)
        everything = await b.describe_topics()
        assert state not in everything and "__consumer_offsets" not in everything
        assert (await b.describe_topics([state]))[state].internal


# ---------------------------------------------------------------------------- fetch


async def test_fetch_is_byte_identical_to_a_plain_fetch(kafka_39, backend):
    topic = unique("fetch")
    create_topic(kafka_39.bootstrap, topic, partitions=2)
    values = produce(kafka_39.bootstrap, topic, 400, partitions=2)
    result = await backend.fetch(topic, 1, 0, max_bytes=1 << 20)
    assert result.error_code == 0
    assert (result.high_watermark, result.last_stable_offset, result.log_start_offset) == (200, 200, 0)
    assert values_of(result.records) == values[1::2]
    assert result.batches[0].base_offset == 0 and result.batches[-1].last_offset == 199
    assert result.batches[-1].end == len(result.records)

    client = AIOKafkaClient(bootstrap_servers=kafka_39.bootstrap)
    await client.bootstrap()
    try:
        leader = backend._leader(topic, 1)  # aiokafka's own cache tracks no topics here
        plain = await client.send(leader, AioFetchRequest(0, 1, 1 << 20, 0, [(topic, [(1, 0, 1 << 20)])]))
    finally:
        await client.close()
    assert plain.topics[0][1][0][-1] == result.records

    # from the middle: the batch holding offset 150 comes back whole
    mid = await backend.fetch(topic, 1, 150, max_bytes=1 << 20)
    assert mid.batches[0].base_offset <= 150 <= mid.batches[0].last_offset


async def test_small_max_bytes_returns_whole_batches_only(kafka_39, backend):
    topic = unique("small")
    create_topic(kafka_39.bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_39.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(20):
        producer.produce(topic, value=b"x" * 100)
        producer.flush()
    result = await backend.fetch(topic, 0, 0, max_bytes=400)
    assert result.batches and result.batches[-1].end == len(result.records) <= 400
    assert values_of(result.records) == [b"x" * 100] * len(result.batches)


async def test_fetch_many_groups_partitions(kafka_39, backend):
    topic = unique("many")
    create_topic(kafka_39.bootstrap, topic, partitions=3)
    values = produce(kafka_39.bootstrap, topic, 90, partitions=3)
    reads = [PartitionRead(topic, p, 0, 1 << 20) for p in range(3)] + [PartitionRead("no-such-topic-x", 0, 0, 100)]
    results = await backend.fetch_many(reads)
    for p in range(3):
        assert values_of(results[(topic, p)].records) == values[p::3]
    assert results[("no-such-topic-x", 0)].error_code == 3


async def test_offset_out_of_range_is_reported_with_current_offsets(kafka_39, backend):
    topic = unique("oor")
    create_topic(kafka_39.bootstrap, topic)
    produce(kafka_39.bootstrap, topic, 10)
    result = await backend.fetch(topic, 0, 50, max_bytes=1000)
    assert (result.error_code, result.records, result.high_watermark, result.log_start_offset) == (1, b"", 10, 0)
    assert result.last_stable_offset == 10


async def test_unknown_topic_is_a_clear_error(kafka_39, backend):
    with pytest.raises(UnknownTopicError) as info:
        await backend.fetch("no-such-topic-y", 0, 0, max_bytes=100)
    assert info.value.code == 3 and info.value.topic == "no-such-topic-y"
    with pytest.raises(UnknownTopicError):
        await backend.list_offsets("no-such-topic-y", 0, "latest")
    assert await backend.describe_topics(["no-such-topic-y"]) == {}
    topic = unique("onep")
    create_topic(kafka_39.bootstrap, topic)
    with pytest.raises(UnknownTopicError):
        await backend.fetch(topic, 5, 0, max_bytes=100)  # no such partition


async def test_long_poll_wakes_on_new_data_without_blocking_other_reads(kafka_39, backend):
    topic = unique("poll")
    create_topic(kafka_39.bootstrap, topic)
    produce(kafka_39.bootstrap, topic, 1)
    started = time.monotonic()
    poll = asyncio.create_task(backend.fetch(topic, 0, 1, max_bytes=1 << 20, max_wait_ms=10_000))
    await asyncio.sleep(0.3)
    # an immediate read to the same broker is not queued behind the parked long poll
    quick_started = time.monotonic()
    assert (await backend.fetch(topic, 0, 0, max_bytes=1000)).batches
    assert time.monotonic() - quick_started < 2
    assert not poll.done()
    await asyncio.to_thread(produce, kafka_39.bootstrap, topic, 1, prefix="late")
    result = await asyncio.wait_for(poll, 10)
    assert values_of(result.records) == [b"late-0"]
    assert time.monotonic() - started < 8


# ---------------------------------------------------------------------------- transactions


async def test_read_committed_bounds_at_lso_and_lists_aborted(kafka_39, backend):
    topic = unique("txn")
    create_topic(kafka_39.bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_39.bootstrap, "transactional.id": unique("tx"), "linger.ms": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"c%d" % i)
    producer.commit_transaction(30)  # offsets 0-2, marker 3
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"a%d" % i)
    producer.flush(30)  # abort purges unsent records: make sure they reach the log first
    producer.abort_transaction(30)  # offsets 4-6, marker 7
    producer.begin_transaction()
    producer.produce(topic, value=b"open")
    producer.flush(30)  # offset 8: open transaction, LSO stays at 8
    try:
        committed = await backend.fetch(topic, 0, 0, max_bytes=1 << 20, isolation_level=1)
        assert (committed.high_watermark, committed.last_stable_offset) == (9, 8)
        assert committed.batches[-1].last_offset < 8  # bounded by the LSO
        pid = committed.batches[0].producer_id
        assert pid >= 0 and committed.aborted_transactions == ((pid, 4),)
        controls = [b.base_offset for b in committed.batches if b.is_control]
        assert controls == [3, 7]
        assert all(b.is_transactional for b in committed.batches)
        data = [b for b in committed.batches if not b.is_control]
        assert [(b.base_offset, b.last_offset) for b in data][0][0] == 0
        # what read_committed consumers keep: everything not aborted and not control
        assert values_of(committed.records) == [b"c0", b"c1", b"c2", b"a0", b"a1", b"a2"]

        uncommitted = await backend.fetch(topic, 0, 0, max_bytes=1 << 20, isolation_level=0)
        assert uncommitted.batches[-1].last_offset == 8 and uncommitted.aborted_transactions == ()
        assert await backend.last_stable_offset(topic, 0) == 8
        assert await backend.list_offsets(topic, 0, "latest", isolation_level=1) == 8
        assert await backend.high_watermark(topic, 0) == 9
    finally:
        producer.abort_transaction(30)


# ---------------------------------------------------------------------------- offsets


async def test_list_offsets_of_a_partition_added_after_the_cache_learned_the_topic(kafka_39):
    """A cached topic whose partition count grew since (CreatePartitions): its new partition's
    offsets are asked for after a refresh, not refused until the cache ages out."""
    from confluent_kafka.admin import NewPartitions

    topic = unique("grow")
    create_topic(kafka_39.bootstrap, topic)
    async with Backend(kafka_39.bootstrap, metadata_max_age_s=300) as backend:
        await wait_for_topic(backend, topic)
        assert await backend.list_offsets(topic, 0, "latest") == 0
        admin = AdminClient({"bootstrap.servers": kafka_39.bootstrap})
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
        deadline = time.monotonic() + 15
        while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert await backend.list_offsets(topic, 1, "latest") == 0
        with pytest.raises(UnknownTopicError):
            await backend.list_offsets(topic, 7, "latest")



async def test_list_offsets_earliest_latest_and_by_timestamp(kafka_39, backend):
    topic = unique("lo")
    create_topic(kafka_39.bootstrap, topic)
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": kafka_39.bootstrap})
    for i, ts in enumerate([now - 30_000, now - 20_000, now - 10_000, now]):
        producer.produce(topic, value=b"%d" % i, timestamp=ts)
        producer.flush(30)  # one batch per record, so deleting records moves a batch boundary
    assert await backend.list_offsets(topic, 0, "earliest") == 0
    assert await backend.list_offsets(topic, 0, "latest") == 4
    assert await backend.list_offsets(topic, 0, now - 20_000) == 1
    assert await backend.list_offsets(topic, 0, now - 15_000) == 2
    assert await backend.list_offsets(topic, 0, now + 60_000) is None
    with pytest.raises(ValueError):
        await backend.list_offsets(topic, 0, "soonest")

    from confluent_kafka import TopicPartition

    admin = AdminClient({"bootstrap.servers": kafka_39.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 2)]).values():
        future.result(timeout=30)
    assert await backend.log_start_offset(topic, 0) == 2
    result = await backend.fetch(topic, 0, 0, max_bytes=1000)
    assert (result.error_code, result.log_start_offset, result.high_watermark) == (1, 2, 4)
    assert values_of((await backend.fetch(topic, 0, 2, max_bytes=1000)).records) == [b"2", b"3"]
