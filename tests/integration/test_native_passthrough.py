"""A sidecar in front of a Kafka with native share groups (docs/migration.md, "The sidecar in front
of a backend with share groups"): it keeps serving its own groups, and passes a group marked
``share.coordinator=backend`` to the backend — heartbeats, fetches, acknowledgements, offsets,
configs, listing — while native groups it was never told about stay the backend's alone."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from kshare_sidecar.cli.kclient import AdminClient
from kshare_sidecar.testing.tools import SidecarThread
from tests.support import create_topic, produce, share_consume, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def _consume_and_commit(bootstrap: str, group: str, topic: str, expected: int) -> list[bytes]:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.poll(1.0):
                if m.error() is None:
                    got.append(m.value())
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            consumer.commit_sync(30)
    finally:
        consumer.close()
    return got


def test_a_marked_group_is_served_by_the_backend_through_the_sidecar(kafka_4):
    topic, kept, moved = unique("t-native"), unique("kept"), unique("moved")
    create_topic(kafka_4.bootstrap, topic, 1)
    produce(kafka_4.bootstrap, topic, 20)
    sc = SidecarThread({"bootstrap.servers": kafka_4.bootstrap, "persister": "memory",
                        "share.auto.offset.reset": "earliest", "group.share.heartbeat.interval.ms": 1000}).start()
    try:
        with AdminClient(kafka_4.bootstrap) as backend, AdminClient(sc.bootstrap) as sidecar:
            assert len(share_consume(sc.bootstrap, kept, topic, 20)) == 20  # kshare's own group
            assert backend.describe_group(kept).error_code != 0  # the backend never saw it
            assert not backend.alter_offsets(moved, {topic: {0: 10}}).error_code  # a native group
            assert moved not in [g.group_id for g in sidecar.list_groups()]  # not the sidecar's to show

            assert sidecar.alter_group_configs(moved, [("share.coordinator", 0, "backend")]).error_code == 0
            assert [p.start_offset for p in sidecar.describe_offsets(moved).topics[0].partitions] == [10]
            assert moved in [g.group_id for g in sidecar.list_groups()]
            configs = {c.name: c.value for c in sidecar.describe_group_configs(moved).configs}
            assert configs["share.coordinator"] == "backend" and "share.record.lock.duration.ms" in configs

            assert sorted(_consume_and_commit(sc.bootstrap, moved, topic, 10)) == \
                [f"v-{i}".encode() for i in range(10, 20)]  # through the sidecar, served natively
            (native,) = backend.describe_offsets(moved).topics[0].partitions
            assert native.lag == 0  # all ten acknowledged at the native coordinator (its start offset may lag)

            consumer = ShareConsumer({"bootstrap.servers": sc.bootstrap, "group.id": kept})
            try:
                consumer.subscribe([topic])
                consumer.poll(3.0)  # joined: kshare's group has a member now
                refused = sidecar.alter_group_configs(kept, [("share.coordinator", 0, "backend")])
                assert refused.error_code != 0 and "member" in refused.error_message
            finally:
                consumer.close()
    finally:
        sc.stop()
