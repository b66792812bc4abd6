"""Tansu 0.6.0 as a backend: the harness, and the broker behaviours kshare's state
writers rest on, each probed on tansu itself. Seconds in all, so they run in the default suite
whenever the binary is there (the ``tansu`` fixture skips, naming the build command, when it is
not); the share scenarios on tansu are opt-in: tests/e2e/test_tansu.py, ``make test-tansu``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid

import pytest
from aiokafka.client import AIOKafkaClient
from confluent_kafka import Consumer, Producer, TopicPartition

from kshare_sidecar.persist.epochwriter import EpochFencedError, EpochWriter
from kshare_sidecar.testing.kafka import free_port
from kshare_sidecar.testing.tansu import TansuBroker, missing_reason, tansu_binary
from tests.integration.test_epoch_writer import _topic
from tests.support import api_versions, create_topic

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_harness_starts_restarts_with_its_data_and_stops():
    if tansu_binary() is None:
        pytest.skip(missing_reason())
    broker = TansuBroker(storage="sqlite").start()
    try:
        assert broker.version == "0.6.0" and broker.running
        topic = f"harness-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic)  # tansu never creates a topic on its own
        _produce(broker.bootstrap, topic, [b"a", b"b", b"c"])
        assert _end_offset(broker.bootstrap, topic) == 3
        broker.restart(sig=signal.SIGKILL)  # libSQL storage: the records outlive the process
        assert _end_offset(broker.bootstrap, topic) == 3
        workdir = broker.workdir
    finally:
        broker.stop()
    assert not broker.running and workdir is not None and not workdir.exists()


def test_no_end_txn_so_transactional_state_writes_are_refused_at_start_up(tansu, tmp_path):
    versions = api_versions(tansu.bootstrap)
    assert 26 not in versions, "tansu serves EndTxn now: try state.write.mode=transactional on it"
    assert {0, 1, 2, 3, 22, 24} <= set(versions)  # Produce, Fetch, ListOffsets, Metadata, InitProducerId, AddPartitionsToTxn
    port = free_port()
    done = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "sidecar", "run", "--bootstrap-server",
                           tansu.bootstrap, "--listen", f"127.0.0.1:{port}"],
                          env={**os.environ, "KSHARE_STATE_WRITE_MODE": "transactional"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, done.stderr
    assert ("start-up failed: state.write.mode = 'transactional' needs EndTxn, which the backend does not "
            "serve: use state.write.mode = 'fenced' (the default)") in errors[0]


async def test_an_older_producer_epoch_is_refused_as_soon_as_a_newer_init(tansu):
    """What ``state.write.mode=fenced`` needs, on tansu: InitProducerId with a transactional id
    returns the same producer id at the next epoch, and a batch at the older epoch is refused —
    on tansu at once (it checks the producer id's newest epoch), where Kafka refuses it only after
    the newer epoch wrote on that partition (tests/integration/test_epoch_writer.py)."""
    topic = await _topic(tansu.bootstrap)
    client = AIOKafkaClient(bootstrap_servers=tansu.bootstrap)
    await client.bootstrap()
    client.add_topic(topic)
    await client.force_metadata_update()
    txn = f"kshare-test-{uuid.uuid4().hex[:8]}"
    try:
        old = EpochWriter(client, topic, 0, txn, transaction_timeout_ms=60_000, request_timeout_ms=10_000)
        await old.start()
        batch = old._build([(b"k", b"old-1"), (b"k", b"old-2")])
        assert await old._deliver(batch, 2) == 1
        old.sequence = 0  # as if the answer had been lost: the same bytes again land once
        assert await old._deliver(batch, 2) == -1  # tansu: DUPLICATE_SEQUENCE_NUMBER (Kafka: the first offset)
        new = EpochWriter(client, topic, 0, txn, transaction_timeout_ms=60_000, request_timeout_ms=10_000)
        await new.start()
        assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)
        with pytest.raises(EpochFencedError):
            await old.send([(b"k", b"zombie")])
        assert await new.send([(b"k", b"new-1")]) == 2
    finally:
        await client.close()
    assert _end_offset(tansu.bootstrap, topic) == 3


async def test_backend_reads_tansu_records_although_its_fetch_v12_answers_carry_a_v16_tagged_field(tansu, caplog):
    """backend/kio_bridge.py: the first Fetch v12 answer is unreadable for kio, the read is retried at
    v11 (no tagged fields), and every later read goes there directly."""
    from kshare_sidecar.backend import Backend, InMemoryTopicIdStore

    topic = f"fetch-{uuid.uuid4().hex[:8]}"
    create_topic(tansu.bootstrap, topic)
    _produce(tansu.bootstrap, topic, [b"a", b"b", b"c"])
    backend = Backend(tansu.bootstrap, topic_id_store=InMemoryTopicIdStore())
    await backend.start()
    try:
        info = (await backend.describe_topics([topic]))[topic]
        assert info.topic_id.int != 0  # tansu's own topic id, used as is
        result = await backend.fetch(topic, 0, 0, max_bytes=1 << 20)
        assert result.error_code == 0 and result.high_watermark == 3
        assert [b.last_offset for b in result.batches][-1] == 2
        assert "api 1 v12 with a tagged field kio cannot read" in caplog.text
        again = await backend.fetch(topic, 0, 1, max_bytes=1 << 20)  # straight at v11: no second warning
        assert again.error_code == 0 and caplog.text.count("tagged field kio cannot read") == 1
    finally:
        await backend.close()


# -- tansu 0.6.0's own faults that decide how kshare must be run on it (docs/compatibility.md) ------
# Each on a broker of its own: two of them stop the broker's storage for good. When a newer tansu
# fixes one, its test fails here and says what may be relaxed.

def _storage_alive(broker: TansuBroker) -> bool:
    from kshare_sidecar.testing.probe import broker_ready

    return broker_ready("127.0.0.1", broker.port, timeout=5)


def test_libsql_deleting_one_topic_deletes_every_topic():
    """`topic_delete_by.sql` deletes every topic of the cluster: kshare's state topic goes with
    any topic a client deletes, so the e2e scenarios that delete topics get a tansu of their own."""
    from confluent_kafka.admin import AdminClient

    if tansu_binary() is None:
        pytest.skip(missing_reason())
    with TansuBroker(storage="sqlite") as broker:
        for name in ("keep-a", "keep-b", "doomed"):
            create_topic(broker.bootstrap, name)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics(["doomed"])["doomed"].result(30)
        assert sorted(admin.list_topics(timeout=10).topics) == []


async def test_libsql_storage_stops_on_an_init_producer_id_it_does_not_implement():
    """Two forms reach `(_, _, _) => todo!()` in the libSQL engine's init_producer, which panics in
    the one task that serves its storage: every later request fails. kshare sends each in one
    configuration: aiokafka's idempotent producer (InitProducerId v0, no producer-id fields:
    `state.write.mode=idempotent`) and KIP-360's conditional bump (this writer's producer id and
    epoch: the hourly refresh of `fenced` mode, hence `state.write.refresh.ms=0` on tansu)."""
    from aiokafka import AIOKafkaProducer

    if tansu_binary() is None:
        pytest.skip(missing_reason())
    with TansuBroker(storage="sqlite") as broker:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True,
                                    request_timeout_ms=3000)
        try:
            with pytest.raises(Exception):
                await asyncio.wait_for(producer.start(), 10)
        finally:
            await producer.stop()
        assert not _storage_alive(broker)

    with TansuBroker(storage="sqlite") as broker:
        topic = await _topic(broker.bootstrap)
        client = AIOKafkaClient(bootstrap_servers=broker.bootstrap)
        await client.bootstrap()
        client.add_topic(topic)
        await client.force_metadata_update()
        try:
            writer = EpochWriter(client, topic, 0, "refresh-probe", transaction_timeout_ms=60_000,
                                 request_timeout_ms=3_000)
            await writer.start()
            assert await writer.send([(b"k", b"v")]) == 0
            with pytest.raises(Exception):
                await writer.refresh()
        finally:
            await client.close()
        assert not _storage_alive(broker)


def test_dynostore_list_offsets_latest_is_the_last_batch_start_plus_one():
    """The memory:// (and s3://) engine answers ListOffsets "latest" with the newest batch's *base*
    offset + 1, not the log end: kshare's state replay (end offsets) and offset resets read it,
    and the restart and fencing scenarios lose state on that engine."""
    from confluent_kafka import Consumer

    if tansu_binary() is None:
        pytest.skip(missing_reason())
    with TansuBroker(storage="memory") as broker:
        create_topic(broker.bootstrap, "batched")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 100})
        for i in range(10):
            producer.produce("batched", b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
        try:
            assert consumer.get_watermark_offsets(TopicPartition("batched", 0), timeout=10) == (0, 1)  # not (0, 10)
        finally:
            consumer.close()


def test_kshare_dev_tansu_prints_json_serves_and_cleans_up_on_sigint():
    import json

    if tansu_binary() is None:
        pytest.skip(missing_reason())
    proc = subprocess.Popen([sys.executable, "-m", "kshare_sidecar.cli", "dev", "tansu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert info["version"] == "0.6.0" and info["bootstrap"].startswith("127.0.0.1:")
        topic = f"cli-{uuid.uuid4().hex[:8]}"
        create_topic(info["bootstrap"], topic)
        _produce(info["bootstrap"], topic, [b"x"])
        assert _end_offset(info["bootstrap"], topic) == 1
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    from kshare_sidecar.testing.probe import broker_ready

    host, port = info["bootstrap"].split(":")
    assert not broker_ready(host, int(port), timeout=2), "tansu still answers after Ctrl-C"
