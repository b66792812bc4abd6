"""The harness gives real brokers: produce and consume on both lines, share groups on 4.x."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.support import create_topic, set_group_config, share_consume, unique

pytestmark = pytest.mark.kafka


async def _roundtrip(bootstrap: str, topic: str, count: int) -> list[bytes]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, f"r{i}".encode())
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        got: list[bytes] = []
        async with asyncio.timeout(30):
            while len(got) < count:
                batches = await consumer.getmany(timeout_ms=1000)
                got += [r.value for records in batches.values() for r in records]
        return got
    finally:
        await consumer.stop()


@pytest.mark.parametrize("fixture", ["kafka_39", "kafka_4"])
async def test_aiokafka_produce_consume(fixture, request):
    cluster = request.getfixturevalue(fixture)
    topic = unique("smoke")
    create_topic(cluster.bootstrap, topic)
    got = await _roundtrip(cluster.bootstrap, topic, 50)
    assert got == [f"r{i}".encode() for i in range(50)]


def test_kafka_39_has_no_share_groups(kafka_39):
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from kshare_sidecar.testing.probe import call

    response = call(*kafka_39.host_port, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    keys = {k.api_key for k in response.api_keys}
    assert 3 in keys and 78 not in keys  # Metadata yes, ShareFetch no: the backend kshare exists for
    assert kafka_39.version.startswith("3.9") and not kafka_39.share_groups


def test_native_share_group_consumes(kafka_4):
    from tests.support import produce

    topic, group = unique("native"), unique("sg")
    create_topic(kafka_4.bootstrap, topic, partitions=2)
    set_group_config(kafka_4.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    values = produce(kafka_4.bootstrap, topic, 200, partitions=2)
    got = share_consume(kafka_4.bootstrap, group, topic, 200)
    assert sorted(v for v, _ in got) == sorted(values)
    assert {count for _, count in got} == {1}
