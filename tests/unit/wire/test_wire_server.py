"""Socket-level tests on 127.0.0.1: ordering, pipelining, closing misbehaving connections."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kio.index import load_response_from_request
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.share_group_heartbeat.v1.response import ShareGroupHeartbeatResponse

from kshare_sidecar.api import Dispatcher, InMemoryTopicCatalog, NodeIdentity, build_registry
from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.wire import CloseConnection, Listener, codec, serve

pytestmark = pytest.mark.timeout(30)

HEARTBEAT = ShareGroupHeartbeatRequest(
    group_id="g", member_id="m", member_epoch=0, rack_id=None, subscribed_topic_names=None
)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Listener, Dispatcher]]:
    catalog = InMemoryTopicCatalog([TopicInfo("orders", uuid.uuid4(), 2)])
    dispatcher = Dispatcher(build_registry(catalog), NodeIdentity(1, "127.0.0.1", 0))
    listener = Listener(dispatcher, "127.0.0.1", 0, max_frame_bytes=1024)
    await listener.start()
    dispatcher.node = NodeIdentity(1, "127.0.0.1", listener.port)
    yield listener, dispatcher
    await listener.stop()


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, listener: Listener) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", listener.port))

    def send(self, *requests: tuple[Any, int]) -> None:
        self.writer.write(b"".join(codec.encode_request(r, cid) for r, cid in requests))

    async def receive(self, request: Any) -> tuple[Any, Any]:
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        payload = await self.reader.readexactly(size)
        return codec.decode_response(payload, load_response_from_request(type(request)))

    async def closed_by_server(self) -> bool:
        return await asyncio.wait_for(self.reader.read(), 5) == b""

    async def aclose(self) -> None:
        self.writer.close()


async def test_pipelined_requests_answered_in_order(server) -> None:
    listener, _ = server
    client = await Client.connect(listener)
    requests = [
        (ApiVersionsRequest(client_software_name="t", client_software_version="1"), 10),
        (MetadataRequest(topics=None, include_topic_authorized_operations=False), 11),
        (FindCoordinatorRequest(key="g", key_type=0), 12),
    ] * 5
    client.send(*requests)
    for request, cid in requests:
        header, _ = await client.receive(request)
        assert header.correlation_id == cid
    await client.aclose()


def _slow_heartbeat(log: list[str], *, release: bool):
    async def handler(ctx, header, request):
        log.append("slow start")
        if release:
            ctx.release_ordering()
        await asyncio.sleep(0.3)
        log.append("slow end")
        return ShareGroupHeartbeatResponse(
            throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None,
            member_id="m", member_epoch=1, heartbeat_interval=datetime.timedelta(seconds=5), assignment=None,
        )

    return handler


def _recording_coordinator(log: list[str], inner):
    async def handler(ctx, header, request):
        log.append("fast")
        return await inner(ctx, header, request)

    return handler


@pytest.mark.parametrize("release", [False, True])
async def test_processing_order_and_release(server, release: bool) -> None:
    listener, dispatcher = server
    log: list[str] = []
    registry = dispatcher.registry
    registry.register(76, 1, 1, _slow_heartbeat(log, release=release))
    entry = registry.get(10)
    registry.register(10, 0, 6, _recording_coordinator(log, entry.handler), replace=True,
                      error_response=entry.error_response)
    client = await Client.connect(listener)
    fast = FindCoordinatorRequest(key="g", key_type=0)
    client.send((HEARTBEAT, 1), (fast, 2))
    assert (await client.receive(HEARTBEAT))[0].correlation_id == 1  # responses stay in order
    assert (await client.receive(fast))[0].correlation_id == 2
    if release:  # the long poll let the next request be processed meanwhile
        assert log == ["slow start", "fast", "slow end"]
    else:  # Kafka's default: one request at a time per connection
        assert log == ["slow start", "slow end", "fast"]
    await client.aclose()


async def test_oversized_frame_closes_connection(server) -> None:
    listener, _ = server
    client = await Client.connect(listener)
    client.writer.write((2048).to_bytes(4, "big") + b"x" * 16)
    assert await client.closed_by_server()


async def test_garbage_closes_only_that_connection(server) -> None:
    listener, _ = server
    good = await Client.connect(listener)
    bad = await Client.connect(listener)
    bad.writer.write((12).to_bytes(4, "big") + b"\x00\x03\x00\x0d\x00\x00\x00\x01\xff\xff\xff\xff")
    assert await bad.closed_by_server()
    request = MetadataRequest(topics=None, include_topic_authorized_operations=False)
    good.send((request, 5))
    header, body = await good.receive(request)
    assert header.correlation_id == 5 and [t.name for t in body.topics] == ["orders"]
    await good.aclose()


async def test_unsupported_version_closes_but_earlier_responses_are_sent(server) -> None:
    listener, _ = server
    client = await Client.connect(listener)
    first = FindCoordinatorRequest(key="g", key_type=0)
    client.send((first, 1))
    client.writer.write(codec.encode_request(HEARTBEAT, 2))  # ShareGroupHeartbeat is not registered
    assert (await client.receive(first))[0].correlation_id == 1
    assert await client.closed_by_server()


async def test_close_callbacks_run_on_disconnect(server) -> None:
    listener, dispatcher = server
    closed = asyncio.Event()
    seen: list[int] = []

    async def heartbeat(ctx, header, request):
        async def on_close(conn):
            seen.append(conn.conn_id)
            closed.set()

        ctx.on_close(on_close)
        seen.append(ctx.conn_id)
        return await _slow_heartbeat([], release=False)(ctx, header, request)

    dispatcher.registry.register(76, 1, 1, heartbeat)
    client = await Client.connect(listener)
    client.send((HEARTBEAT, 1))
    await client.receive(HEARTBEAT)
    assert len(listener.connections) == 1
    await client.aclose()
    await asyncio.wait_for(closed.wait(), 5)
    assert seen[0] == seen[1] and seen[0] > 0


async def test_stop_closes_connections_and_runs_callbacks(server) -> None:
    listener, dispatcher = server
    closed = asyncio.Event()

    async def parked(ctx, header, request):
        ctx.on_close(lambda conn: closed.set())
        await asyncio.sleep(3600)

    dispatcher.registry.register(76, 1, 1, parked)
    client = await Client.connect(listener)
    client.send((HEARTBEAT, 1))
    for _ in range(100):
        if listener.connections:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    await listener.stop()
    assert closed.is_set()
    assert await client.closed_by_server()


async def test_serve_until_shutdown_trigger() -> None:
    stop = asyncio.Event()
    started: list[Listener] = []
    dispatcher = Dispatcher(build_registry(InMemoryTopicCatalog()), NodeIdentity(1, "127.0.0.1", 0))
    task = asyncio.create_task(
        serve("127.0.0.1", 0, dispatcher, shutdown_trigger=stop.wait, on_started=started.append)
    )
    for _ in range(100):
        if started:
            break
        await asyncio.sleep(0.01)
    client = await Client.connect(started[0])
    request = FindCoordinatorRequest(key="g", key_type=0)
    client.send((request, 3))
    assert (await client.receive(request))[0].correlation_id == 3
    stop.set()
    await asyncio.wait_for(task, 5)
    assert await client.closed_by_server()


async def test_requests_after_a_closing_one_are_not_processed(server) -> None:
    listener, dispatcher = server
    processed: list[int] = []

    async def coordinator(ctx, header, request):
        processed.append(ctx.correlation_id)
        raise CloseConnection("test")

    dispatcher.registry.register(10, 0, 6, coordinator, replace=True)
    client = await Client.connect(listener)
    request = FindCoordinatorRequest(key="g", key_type=0)
    client.send((request, 1), (request, 2))
    assert await client.closed_by_server()
    assert processed == [1]
