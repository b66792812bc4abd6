from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as TopicV12
from kio.schema.metadata.v13.request import MetadataRequest as MetadataRequestV13
from kio.schema.metadata.v13.request import MetadataRequestTopic as TopicV13
from kio.static.constants import EntityType

from kshare_sidecar.api import KafkaError, convert, target_class
from kshare_sidecar.wire import CloseConnection

from .conftest import EVENTS, NODE, ORDERS, FakeConnection, request_frame


def metadata_request(version: int, topics: list[dict] | None) -> object:
    return convert(
        {
            "topics": topics,
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
        target_class(3, version, EntityType.request),
    )


def by_name(*names: str) -> list[dict]:
    return [{"name": n, "topic_id": None} for n in names]


@pytest.mark.parametrize("version", range(0, 14))
async def test_every_version_round_trips(call, version: int) -> None:
    _, body = await call(metadata_request(version, by_name("orders", "nope")), correlation_id=version + 100)
    assert [(b.node_id, b.host, b.port) for b in body.brokers] == [(7, "sidecar.test", 19092)]
    orders, nope = body.topics
    assert (orders.name, orders.error_code) == ("orders", ErrorCode.none)
    assert [p.partition_index for p in orders.partitions] == [0, 1, 2]
    for p in orders.partitions:
        assert p.leader_id == NODE.node_id
        assert tuple(p.replica_nodes) == tuple(p.isr_nodes) == (NODE.node_id,)
        if version >= 7:
            assert p.leader_epoch == 0
    assert (nope.name, nope.error_code) == ("nope", ErrorCode.unknown_topic_or_partition)
    assert tuple(nope.partitions) == ()
    if version >= 1:
        assert body.controller_id == NODE.node_id
    if version >= 2:
        assert body.cluster_id == "kshare-test"
    if version >= 10:
        assert orders.topic_id == ORDERS.topic_id
        assert nope.topic_id in (None, uuid.UUID(int=0))


async def test_v13_by_topic_id_with_null_name(call) -> None:
    request = MetadataRequestV13(
        topics=(
            TopicV13(topic_id=EVENTS.topic_id, name=None),
            TopicV13(topic_id=uuid.UUID(int=0xDEAD), name=None),
        ),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    header, body = await call(request, correlation_id=77)
    assert header.correlation_id == 77
    events, unknown = body.topics
    assert (events.name, events.topic_id, events.error_code) == ("events", EVENTS.topic_id, ErrorCode.none)
    assert len(events.partitions) == 1
    assert (unknown.name, unknown.topic_id, unknown.error_code) == (
        None,
        uuid.UUID(int=0xDEAD),
        ErrorCode.unknown_topic_id,
    )
    assert body.error_code == ErrorCode.none


async def test_v12_by_name(call) -> None:
    request = MetadataRequestV12(
        topics=(TopicV12(topic_id=None, name="orders"),),
        allow_auto_topic_creation=True,  # ignored: never auto-create
        include_topic_authorized_operations=False,
    )
    _, body = await call(request)
    (orders,) = body.topics
    assert (orders.name, orders.topic_id, len(orders.partitions)) == ("orders", ORDERS.topic_id, 3)


async def test_v1_null_topics_means_all_and_empty_means_none(call) -> None:
    _, body = await call(MetadataRequestV1(topics=None))
    assert sorted(t.name for t in body.topics) == ["events", "orders"]
    _, body = await call(MetadataRequestV1(topics=()))
    assert body.topics == () and len(body.brokers) == 1


async def test_v0_empty_topics_means_all(call) -> None:
    _, body = await call(metadata_request(0, []))
    assert sorted(t.name for t in body.topics) == ["events", "orders"]


async def test_duplicates_answered_once_in_request_order(call) -> None:
    _, body = await call(metadata_request(13, by_name("orders", "events", "orders")))
    assert [t.name for t in body.topics] == ["orders", "events"]


async def test_unknown_topic_is_not_created(call, catalog) -> None:
    await call(metadata_request(9, by_name("fresh")))
    assert await catalog.describe_topics(["fresh"]) == {}


async def test_null_name_before_v12_is_invalid_request(call) -> None:
    _, body = await call(metadata_request(10, [{"name": None, "topic_id": EVENTS.topic_id}]))
    (topic,) = body.topics
    assert topic.error_code == ErrorCode.invalid_request
    assert topic.topic_id == EVENTS.topic_id


async def test_catalog_failure_is_mirrored_per_topic(call, catalog, monkeypatch) -> None:
    async def broken(names):
        raise KafkaError(ErrorCode.leader_not_available, "backend down")

    monkeypatch.setattr(catalog, "describe_topics", broken)
    _, body = await call(metadata_request(13, by_name("orders")))
    assert [(t.name, t.error_code) for t in body.topics] == [("orders", ErrorCode.leader_not_available)]


async def test_catalog_failure_for_all_topics_closes(dispatcher, catalog, monkeypatch) -> None:
    async def broken(names):
        raise RuntimeError("boom")

    monkeypatch.setattr(catalog, "describe_topics", broken)
    with pytest.raises(CloseConnection):
        await dispatcher.handle(request_frame(MetadataRequestV1(topics=None)), FakeConnection())
