"""Third-party check: librdkafka (confluent-kafka) accepts our ApiVersions and Metadata."""

from __future__ import annotations

import asyncio

import pytest

from kshare_sidecar.api import Dispatcher, NodeIdentity, build_registry
from kshare_sidecar.wire import Listener

from .conftest import EVENTS, ORDERS

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(60)


async def test_admin_client_lists_and_describes_topics(catalog) -> None:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    node = NodeIdentity(5, "127.0.0.1", 0, cluster_id="kshare-test")
    dispatcher = Dispatcher(build_registry(catalog), node)
    async with Listener(dispatcher, "127.0.0.1", 0) as listener:
        dispatcher.node = NodeIdentity(5, "127.0.0.1", listener.port, cluster_id="kshare-test")

        def use_client() -> tuple[object, object]:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{listener.port}"})
            listed = admin.list_topics(timeout=5)
            # describe_topics resolves names to topic IDs through Metadata v12+.
            described = admin.describe_topics(TopicCollection(["orders"]))["orders"].result(timeout=5)
            return listed, described

        listed, described = await asyncio.to_thread(use_client)

    assert {name: len(t.partitions) for name, t in listed.topics.items()} == {"orders": 3, "events": 1}
    assert list(listed.brokers) == [5]
    assert listed.brokers[5].port == listener.port
    assert listed.cluster_id == "kshare-test"
    assert all(p.leader == 5 for p in listed.topics["orders"].partitions.values())
    assert str(described.topic_id) == _kafka_uuid_string(ORDERS.topic_id)
    assert EVENTS.name in listed.topics


def _kafka_uuid_string(topic_id) -> str:
    """Kafka prints topic IDs as URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
