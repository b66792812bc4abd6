"""DescribeShareGroupOffsets for a share group after DeleteGroups, and for a group that never
existed: native Kafka 4.3 and kshare on 3.9 give the same answers."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kio.schema.describe_share_group_offsets.v1.request import (DescribeShareGroupOffsetsRequest,
                                                                  DescribeShareGroupOffsetsRequestGroup,
                                                                  DescribeShareGroupOffsetsRequestTopic)

from kshare_sidecar.protocol.address import parse_host_port
from kshare_sidecar.protocol.blocking import BlockingConnection

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def scenario(bootstrap: str) -> list:
    suffix = uuid.uuid4().hex[:6]
    topic, group = f"dsgo-{suffix}", f"dsgo-g-{suffix}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    while topic not in admin.list_topics(timeout=10).topics:
        time.sleep(0.2)
    reset = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([reset])[reset].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for _ in range(10):
        producer.produce(topic, b"x")
    producer.flush(30)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 60
    while got < 10 and time.monotonic() < deadline:
        got += len([m for m in consumer.poll(0.5) or [] if m.error() is None])
    consumer.commit_sync(30)
    consumer.close()
    for future in admin.delete_consumer_groups([group], request_timeout=30).values():
        future.result(30)

    conn = BlockingConnection(*parse_host_port(bootstrap), timeout=15, client_id="parity")
    seen = []
    try:
        for group_id, topics in ((group, None), (group, ((topic, (0, 1)),)), (f"never-{suffix}", None)):
            request = DescribeShareGroupOffsetsRequest(groups=(DescribeShareGroupOffsetsRequestGroup(
                group_id=group_id, topics=None if topics is None else tuple(
                    DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=p) for t, p in topics)),))
            (answer,) = conn.call(request).groups
            seen.append((int(answer.error_code), [(t.topic_name == topic, [
                (p.partition_index, p.start_offset, p.lag, int(p.error_code)) for p in t.partitions])
                for t in answer.topics]))
    finally:
        conn.close()
    return seen


def test_offsets_of_a_deleted_group_match_native(sidecar, native_kafka):
    native = scenario(native_kafka.bootstrap)
    assert native[0] == (0, [])  # no error, no topics
    assert scenario(sidecar.bootstrap) == native
