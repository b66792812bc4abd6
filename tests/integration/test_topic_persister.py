"""The compacted-topic persister against a real Apache Kafka 3.9 from the harness.

Run: python -m pytest tests/integration/test_topic_persister.py -m kafka -s   (-s shows the figures)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
import uuid

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from kshare_sidecar.persist import (
    DeliveryState,
    FencedLeaderEpochError,
    FencedStateEpochError,
    GroupRecord,
    InitializeItem,
    PartitionState,
    SharePartitionKey,
    StateBatch,
    StateTopicMisconfiguredError,
    WriteItem,
    WriterFencedError,
)
from kshare_sidecar.persist.codec import KIND_PARTITION
from kshare_sidecar.persist.ownership import state_partition_for
from kshare_sidecar.persist.topic import TopicPersister, TopicSettings

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

TID = "5f0c7f5e-3a43-4a83-9a55-6a2b9bd0f0c1"


def unique_topic(tag: str) -> str:
    return f"__kshare_state_test_{tag}_{uuid.uuid4().hex[:8]}"


def persister(bootstrap: str, topic: str, **kw) -> TopicPersister:
    kw.setdefault("partitions", 2)
    kw.setdefault("replication_factor", 1)
    # These tests pin the transactional mode: they write states at arbitrary epochs, which its key
    # rule judges per key; fenced mode (the default) has its own tests in test_epoch_writer.py.
    kw.setdefault("write_mode", os.environ.get("KSHARE_TEST_PERSISTER_MODE", "transactional"))
    return TopicPersister(TopicSettings(bootstrap, topic=topic, **kw))


def state_for(i: int, round_: int = 0, epoch: int = 1) -> PartitionState:
    base = 1000 * round_ + i
    return PartitionState(
        state_epoch=epoch, leader_epoch=0, start_offset=base,
        state_batches=(StateBatch(base + 1, base + 3, DeliveryState.ACKNOWLEDGED, 1),
                       StateBatch(base + 5, base + 5, DeliveryState.AVAILABLE, 2),
                       StateBatch(base + 7, base + 9, DeliveryState.ARCHIVED, 5)))


def as_plain(state: PartitionState) -> list:
    return [state.state_epoch, state.leader_epoch, state.start_offset,
            [[b.first_offset, b.last_offset, int(b.delivery_state), b.delivery_count] for b in state.state_batches]]


READER = textwrap.dedent("""
    import asyncio, sys, orjson
    from kshare_sidecar.persist.topic import TopicPersister, TopicSettings

    async def main(bootstrap, topic):
        p = TopicPersister(TopicSettings(bootstrap, topic=topic, partitions=2, replication_factor=1))
        await p.start()
        out = {"states": {}, "groups": {}, "topic_ids": p.topic_ids(), "skipped": p.recovery_stats.skipped_count}
        for k in p.keys():
            s = await p.read_one(k)
            out["states"][f"{k.group_id}|{k.topic_id}|{k.partition}"] = [
                s.state_epoch, s.leader_epoch, s.start_offset,
                [[b.first_offset, b.last_offset, int(b.delivery_state), b.delivery_count] for b in s.state_batches]]
        for g, rec in p.list_groups().items():
            out["groups"][g] = [rec.group_epoch, {t: list(v) for t, v in rec.initialized.items()}, dict(rec.configs)]
        await p.close()
        sys.stdout.write(orjson.dumps(out).decode())

    asyncio.run(main(sys.argv[1], sys.argv[2]))
""")


async def test_state_survives_restart_in_a_new_process(kafka_39):
    topic = unique_topic("roundtrip")
    keys = [SharePartitionKey(f"group-{i % 4}", TID, i) for i in range(200)]
    a = persister(kafka_39.bootstrap, topic)
    await a.start()
    assert a.ready
    assert await a.initialize_many(InitializeItem(k, 1, 0) for k in keys) == dict.fromkeys(keys)
    assert await a.write_many(WriteItem(k, state_for(k.partition), 0) for k in keys) == dict.fromkeys(keys)
    await a.delete(keys[:5])
    group = GroupRecord("group-1", group_epoch=3, initialized={TID: (1, 5, 9)},
                        configs={"share.auto.offset.reset": "earliest"})
    await a.put_group(group)
    orders_id = await a.topic_id("orders")
    expected = {f"{k.group_id}|{k.topic_id}|{k.partition}": as_plain(await a.read_one(k)) for k in keys[5:]}
    await a.close()

    proc = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", READER, kafka_39.bootstrap, topic],
                                   capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = orjson.loads(proc.stdout)
    assert got["states"] == expected
    assert got["groups"] == {"group-1": [3, {TID: [1, 5, 9]}, {"share.auto.offset.reset": "earliest"}]}
    assert got["topic_ids"] == {"orders": orders_id}
    assert got["skipped"] == 0


async def test_10k_share_partitions_recover(kafka_39):
    # Correctness only: the time recovery takes is a figure of benchmarks/scale.py (recovery after
    # kill -9), not a bound a busy CI machine can be held to.
    topic = unique_topic("recover10k")
    keys = [SharePartitionKey(f"group-{i % 10}", TID, i) for i in range(10_000)]
    a = persister(kafka_39.bootstrap, topic, partitions=4)
    await a.start()
    for chunk in range(0, len(keys), 2000):
        part = keys[chunk:chunk + 2000]
        assert await a.initialize_many(InitializeItem(k, 1, 0) for k in part) == dict.fromkeys(part)
        assert await a.write_many(WriteItem(k, state_for(k.partition), 0) for k in part) == dict.fromkeys(part)
    sample = {k: await a.read_one(k) for k in keys[::997]}
    await a.close()

    b = persister(kafka_39.bootstrap, topic, partitions=4)
    started = time.perf_counter()
    await b.start()
    total = time.perf_counter() - started
    stats = b.recovery_stats
    print(f"\n[figure] recovery of {stats.share_partitions} share-partitions ({stats.records} records): "
          f"replay {stats.seconds:.3f} s, start() incl. producers and topic check {total:.3f} s")
    assert stats.share_partitions == 10_000
    for k, s in sample.items():
        assert await b.read_one(k) == s
    await b.close()


async def _count_records(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        count = 0
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for msgs in (await consumer.getmany(timeout_ms=200, max_records=100_000)).values():
                count += len(msgs)
        return count
    finally:
        await consumer.stop()


async def test_compaction_keeps_about_one_record_per_key(kafka_39):
    topic = unique_topic("compact")
    n_keys, rounds = 1000, 100
    small = {"segment.ms": "200", "segment.bytes": "262144", "min.cleanable.dirty.ratio": "0.01",
             "delete.retention.ms": "100"}
    keys = [SharePartitionKey("group", TID, i) for i in range(n_keys)]
    a = persister(kafka_39.bootstrap, topic, topic_configs=small)
    await a.start()
    await a.initialize_many(InitializeItem(k, 1, 0) for k in keys)
    started = time.perf_counter()
    for r in range(rounds):
        res = await a.write_many(WriteItem(k, state_for(k.partition, r), 0) for k in keys)
        assert all(v is None for v in res.values())
    write_seconds = time.perf_counter() - started
    # One more write per state partition after segment.ms, so the segments holding the
    # 100k writes are rolled and become cleanable (the active segment is never compacted).
    await asyncio.sleep(0.5)
    rollers = {}
    for k in keys:
        rollers.setdefault(state_partition_for(KIND_PARTITION, k, a.partitions), k)
    for p, k in rollers.items():
        await a.write(k, state_for(k.partition, rounds), 0)
    final = {k: await a.read_one(k) for k in keys}
    await a.close()
    before = n_keys * (rounds + 1) + len(rollers)
    print(f"\n[figure] {n_keys * rounds} writes over {n_keys} keys in {write_seconds:.2f} s "
          f"({n_keys * rounds / write_seconds:.0f} writes/s)")

    deadline = time.monotonic() + 120
    count = await _count_records(kafka_39.bootstrap, topic, a.partitions)
    while count > 1.05 * n_keys and time.monotonic() < deadline:
        await asyncio.sleep(2)
        count = await _count_records(kafka_39.bootstrap, topic, a.partitions)
    ratio = count / n_keys
    print(f"[figure] after compaction: {count} records for {n_keys} keys (ratio {ratio:.3f}; {before} written)")
    assert ratio <= 1.05

    b = persister(kafka_39.bootstrap, topic)
    await b.start()
    assert {k: await b.read_one(k) for k in keys} == final
    await b.close()


async def test_stale_epochs_are_refused_and_state_unchanged(kafka_39):
    topic = unique_topic("fencing")
    key = SharePartitionKey("g", TID, 0)
    a = persister(kafka_39.bootstrap, topic)
    await a.start()
    await a.initialize(key, state_epoch=2, start_offset=0)
    await a.read_one(key, leader_epoch=4)  # owner at epoch 4
    await a.write(key, state_for(0, epoch=2), writer_epoch=4)
    stored = await a.read_one(key)
    with pytest.raises(FencedStateEpochError) as exc:
        await a.write(key, state_for(5, epoch=1), writer_epoch=4)
    assert exc.value.error_code == 124
    await a.read_one(key, leader_epoch=6)  # a new owner takes over
    stored = await a.read_one(key)
    with pytest.raises(FencedLeaderEpochError):
        await a.write(key, state_for(6, epoch=2), writer_epoch=4)  # the zombie previous owner
    assert await a.read_one(key) == stored
    await a.close()
    b = persister(kafka_39.bootstrap, topic)
    await b.start()
    assert await b.read_one(key) == stored  # nothing of the refused writes reached the topic
    assert b.stored(key).assignment_epoch == 6
    await b.close()


async def test_second_live_writer_fences_the_first(kafka_39):
    topic = unique_topic("zombie")
    key = SharePartitionKey("g", TID, 0)
    a = persister(kafka_39.bootstrap, topic, partitions=1)
    await a.start()
    await a.initialize(key, 1, 0)
    await a.write(key, state_for(1), 0)

    b = persister(kafka_39.bootstrap, topic, partitions=1)  # same transactional.id: fences a
    await b.start()
    assert await b.read_one(key) == await a.read_one(key)
    with pytest.raises(WriterFencedError) as exc:
        await a.write(key, state_for(2), 0)
    assert "kshare-state-" + topic + "-0" in str(exc.value)
    assert a.fenced_partitions == {0}
    with pytest.raises(WriterFencedError):  # it stays fenced, without touching the backend
        await a.write(key, state_for(3), 0)
    await b.write(key, state_for(4), 0)
    await a.close()
    await b.close()

    c = persister(kafka_39.bootstrap, topic, partitions=1)
    await c.start()
    assert await c.read_one(key) == state_for(4)
    await c.close()


async def test_garbage_record_is_skipped_and_counted(kafka_39, caplog):
    topic = unique_topic("garbage")
    keys = [SharePartitionKey("g", TID, i) for i in range(20)]
    a = persister(kafka_39.bootstrap, topic, partitions=1)
    await a.start()
    await a.initialize_many(InitializeItem(k, 1, 0) for k in keys[:10])
    await a.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_39.bootstrap, acks="all")
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, b"\x00\x01 not json", key=b"\xff garbage", partition=0)
        await producer.send_and_wait(topic, b'{"v": 42}', key=orjson.dumps(["p", "g", TID, 99]), partition=0)
    finally:
        await producer.stop()
    b = persister(kafka_39.bootstrap, topic, partitions=1)
    await b.start()
    await b.initialize_many(InitializeItem(k, 1, 0) for k in keys[10:])
    await b.close()

    c = persister(kafka_39.bootstrap, topic, partitions=1)
    with caplog.at_level("WARNING", logger="kshare_sidecar.persist"):
        await c.start()
    assert c.recovery_stats.skipped_count == 2
    assert c.recovery_stats.skipped[0][:2] == (0, meta.offset)
    assert f"offset {meta.offset}" in caplog.text
    assert c.keys() == keys
    await c.close()


async def test_refuses_a_state_topic_that_is_not_compacted(kafka_39):
    topic = unique_topic("notcompacted")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_39.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "delete"})])
    finally:
        await admin.close()
    p = persister(kafka_39.bootstrap, topic)
    with pytest.raises(StateTopicMisconfiguredError) as exc:
        await p.start()
    message = str(exc.value)
    assert topic in message and "cleanup.policy='delete'" in message and "--add-config cleanup.policy=compact" in message
    assert not p.ready
    await p.close()


async def test_creates_the_topic_compacted_with_the_configured_settings(kafka_39):
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    topic = unique_topic("create")
    p = persister(kafka_39.bootstrap, topic, partitions=3)
    await p.start()
    await p.close()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_39.bootstrap)
    await admin.start()
    try:
        (meta,) = await admin.describe_topics([topic])
        (resp,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    assert len(meta["partitions"]) == 3
    configs = {e[0]: e[1] for e in resp.resources[0][4]}
    assert configs["cleanup.policy"] == "compact"
    assert configs["min.cleanable.dirty.ratio"] == "0.1" and configs["segment.ms"] == "600000"
