"""Dispatcher behaviour: what closes the connection, what becomes an error response."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest as FindCoordinatorRequestV2
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.share_group_heartbeat.v1.response import ShareGroupHeartbeatResponse

from kshare_sidecar.api import KafkaError, RequestContext
from kshare_sidecar.wire import CloseConnection, MalformedFrame, UnsupportedRequest, codec

from .conftest import NODE, FakeConnection, request_frame

HEARTBEAT = ShareGroupHeartbeatRequest(
    group_id="g", member_id="m", member_epoch=0, rack_id=None, subscribed_topic_names=("orders",)
)


async def test_unserved_version_closes(dispatcher) -> None:
    frame = bytearray(request_frame(FindCoordinatorRequestV2(key="g", key_type=0)))
    frame[2:4] = (7).to_bytes(2, "big")
    with pytest.raises(UnsupportedRequest):
        await dispatcher.handle(bytes(frame), FakeConnection())


async def test_unregistered_api_closes(dispatcher) -> None:
    with pytest.raises(UnsupportedRequest):
        await dispatcher.handle(request_frame(HEARTBEAT), FakeConnection())


async def test_malformed_body_closes(dispatcher) -> None:
    with pytest.raises(MalformedFrame):
        await dispatcher.handle(request_frame(FindCoordinatorRequestV2(key="group", key_type=0))[:-2])


async def test_context_carries_connection_client_and_node(dispatcher) -> None:
    seen: list[RequestContext] = []

    async def heartbeat(ctx, header, request):
        seen.append(ctx)
        ctx.on_close(lambda conn: None)
        ctx.release_ordering()
        return ShareGroupHeartbeatResponse(
            throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None,
            member_id=request.member_id, member_epoch=1, heartbeat_interval=datetime.timedelta(seconds=5),
            assignment=None,
        )

    dispatcher.registry.register(76, 1, 1, heartbeat)
    conn = FakeConnection()
    released: list[bool] = []
    frame = request_frame(HEARTBEAT, 5, "my-client")
    out = await dispatcher.handle(frame, conn, lambda: released.append(True))
    _, body = codec.decode_response(out[4:], ShareGroupHeartbeatResponse)
    assert body.member_epoch == 1
    (ctx,) = seen
    assert (ctx.conn_id, ctx.client_id) == (42, "my-client")
    assert (ctx.client_host, ctx.client_port) == ("10.0.0.9", 50000)
    assert (ctx.node, ctx.api_key, ctx.api_version, ctx.correlation_id) == (NODE, 76, 1, 5)
    assert released == [True] and len(conn.callbacks) == 1


async def test_kafka_error_becomes_generic_error_response(dispatcher) -> None:
    async def heartbeat(ctx, header, request):
        raise KafkaError(ErrorCode.coordinator_load_in_progress, "loading")

    dispatcher.registry.register(76, 1, 1, heartbeat)
    out = await dispatcher.handle(request_frame(HEARTBEAT))
    _, body = codec.decode_response(out[4:], ShareGroupHeartbeatResponse)
    assert (body.error_code, body.error_message) == (ErrorCode.coordinator_load_in_progress, "loading")
    assert body.member_epoch == -1 and body.assignment is None


async def test_unexpected_exception_is_unknown_server_error(dispatcher) -> None:
    async def heartbeat(ctx, header, request):
        raise RuntimeError("bug")

    dispatcher.registry.register(76, 1, 1, heartbeat)
    out = await dispatcher.handle(request_frame(HEARTBEAT))
    _, body = codec.decode_response(out[4:], ShareGroupHeartbeatResponse)
    assert body.error_code == ErrorCode.unknown_server_error


async def test_error_without_an_error_form_closes(dispatcher) -> None:
    async def metadata(ctx, header, request):
        raise RuntimeError("bug")

    # no error_response, and Metadata v12 has no top-level error code
    dispatcher.registry.register(3, 0, 13, metadata, replace=True)
    with pytest.raises(CloseConnection):
        request = MetadataRequest(topics=None, include_topic_authorized_operations=False)
        await dispatcher.handle(request_frame(request))


async def test_none_means_no_response(dispatcher) -> None:
    async def fire_and_forget(ctx, header, request):
        return None

    dispatcher.registry.register(76, 1, 1, fire_and_forget)
    assert await dispatcher.handle(request_frame(HEARTBEAT)) is None


def _produce(acks: int) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=1),
        topic_data=(
            TopicProduceData(name="orders", partition_data=(PartitionProduceData(index=2, records=b""),)),
        ),
    )


async def test_produce_is_refused_per_partition(call) -> None:
    _, body = await call(_produce(acks=1))
    assert isinstance(body, ProduceResponse)
    (part,) = body.responses[0].partition_responses
    assert (part.index, part.error_code) == (2, ErrorCode.invalid_request)
    assert part.error_message


async def test_produce_acks_zero_closes(dispatcher) -> None:
    with pytest.raises(CloseConnection):
        await dispatcher.handle(request_frame(_produce(acks=0)))


async def test_fetch_is_refused_per_partition(call) -> None:
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=500), min_bytes=1,
        topics=(
            FetchTopic(
                topic="orders",
                partitions=(FetchPartition(fetch_offset=0, partition=1, partition_max_bytes=1),),
            ),
        ),
        forgotten_topics_data=(),
    )
    _, body = await call(request)
    assert isinstance(body, FetchResponse)
    assert body.error_code == ErrorCode.none
    (part,) = body.responses[0].partitions
    assert (part.partition_index, part.error_code, part.records) == (1, ErrorCode.invalid_request, b"")


async def test_plain_int_error_codes_are_normalised(dispatcher) -> None:
    async def heartbeat(ctx, header, request):
        return ShareGroupHeartbeatResponse(
            throttle_time=datetime.timedelta(0), error_code=25, error_message=None,  # type: ignore[arg-type]
            member_id="m", member_epoch=1, heartbeat_interval=datetime.timedelta(seconds=5), assignment=None,
        )

    dispatcher.registry.register(76, 1, 1, heartbeat)
    out = await dispatcher.handle(request_frame(HEARTBEAT))
    _, body = codec.decode_response(out[4:], ShareGroupHeartbeatResponse)
    assert body.error_code == ErrorCode.unknown_member_id
