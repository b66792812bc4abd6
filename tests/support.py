"""Client-side helpers shared by integration and e2e tests (third-party clients only)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                            config=config or {})])
    futures[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, count: int, *, partitions: int = 1, prefix: str = "v") -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"{prefix}-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=str(i).encode(), partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records not delivered"
    return values


def set_group_config(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Set share.* group configs through the admin API (IncrementalAlterConfigs on a GROUP)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def share_consume(bootstrap: str, group: str, topic: str, expected: int, *, timeout_s: float = 60,
                  extra: dict | None = None) -> list[tuple[bytes, int]]:
    """Consume ``expected`` records with confluent-kafka's ShareConsumer; return (value, delivery count)."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **(extra or {})})
    got: list[tuple[bytes, int]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.poll(1.0):
                if msg.error():
                    raise KafkaException(msg.error())
                got.append((msg.value(), msg.delivery_count()))
    finally:
        consumer.close()
    return got


def table(output: str, header_first: str) -> list[dict[str, str]]:
    """Rows of a whitespace-aligned table (Kafka's tools) whose header line starts with ``header_first``."""
    lines = [line for line in output.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith(header_first):
            names = line.split()
            return [dict(zip(names, row.split())) for row in lines[i + 1:] if len(row.split()) >= len(names)]
    return []


def assert_quiet_log(text: str, *, levels: str = "ERROR|CRITICAL", most: int = 20) -> None:
    """A sidecar log slice after a fault: no traceback, no UNKNOWN_SERVER_ERROR, at most ``most``
    lines at ``levels``."""
    import re

    assert "Traceback" not in text, text[text.find("Traceback") - 300:][:4000]
    assert "UNKNOWN_SERVER_ERROR" not in text
    noisy = [line for line in text.splitlines() if re.search(rf" ({levels}) ", line)]
    assert len(noisy) <= most, "\n".join(noisy[:40])


async def read_state_topic(bootstrap: str, topic: str, partitions: int,
                           timeout_s: float = 120) -> list[tuple[int, int, bytes, bytes | None]]:
    """Every committed record of a state topic, (partition, offset, key, value), sorted: what the
    verdicts of fault tests read, without the persister."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                isolation_level="read_committed", auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out = []
        pending = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for tp, msgs in (await consumer.getmany(*pending, timeout_ms=500)).items():
                out += [(tp.partition, m.offset, m.key, m.value) for m in msgs]
            pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
        return sorted(out)
    finally:
        await consumer.stop()


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """What ``bootstrap`` offers in ApiVersions: {api key: (min, max)}."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from kshare_sidecar.protocol.address import parse_host_port
    from kshare_sidecar.protocol.blocking import BlockingConnection

    with BlockingConnection(*parse_host_port(bootstrap), timeout=15, client_id="kshare-test") as conn:
        answer = conn.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
