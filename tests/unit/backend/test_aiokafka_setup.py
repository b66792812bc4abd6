"""aiokafka's connects bounded by the connection setup schedule (backend/aiokafka_setup.py), on a
real socket: a broker that accepts but never answers ApiVersions holds a connect until the setup
timeout, not the request timeout; clients not bound keep aiokafka's own bound."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError

from kshare_sidecar.backend.aiokafka_setup import aiokafka_client_of, bound
from kshare_sidecar.backend.connection_states import ClusterConnectionStates


async def _silent_broker() -> tuple[asyncio.Server, int]:
    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # read what it sends, answer nothing
        writer.close()
    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _bootstrap(client: AIOKafkaClient) -> float:
    start = time.monotonic()
    with pytest.raises(KafkaConnectionError):
        await client.bootstrap()
    await client.close()
    return time.monotonic() - start


async def test_a_silent_broker_fails_the_connect_at_the_setup_timeout():
    server, port = await _silent_broker()
    states = ClusterConnectionStates(300, 300)
    async with server:
        took = await _bootstrap(bound(AIOKafkaClient(bootstrap_servers=f"127.0.0.1:{port}",
                                                     request_timeout_ms=30_000), states))
        assert 0.25 <= took < 5, took  # 0.3 s, not 30 s
        assert states.failures("127.0.0.1", port) == 1
        # a client not bound: aiokafka's own bound (its request timeout), nothing counted
        took = await _bootstrap(AIOKafkaClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=700))
        assert took >= 0.65, took
        assert states.failures("127.0.0.1", port) == 1


async def test_bound_finds_the_client_of_producers_consumers_and_admins_once():
    states = ClusterConnectionStates()
    admin = AIOKafkaAdminClient(bootstrap_servers="127.0.0.1:1")
    client = aiokafka_client_of(admin)
    assert bound(admin, states) is admin and bound(admin, states) is admin
    assert {"bootstrap", "_get_conn"} <= set(vars(client))
    assert bound(client, None) is client
    with pytest.raises(TypeError):
        bound(object(), states)
    await admin.close()
