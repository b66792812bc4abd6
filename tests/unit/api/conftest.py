"""Fixtures for pure handler tests: a dispatcher over an in-memory catalog, called with frames."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.index import load_response_from_request

from kshare_sidecar.api import Dispatcher, InMemoryTopicCatalog, NodeIdentity, build_registry
from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.wire import codec

ORDERS = TopicInfo("orders", uuid.UUID("00000000-0000-0000-0000-00000000000a"), 3)
EVENTS = TopicInfo("events", uuid.UUID("00000000-0000-0000-0000-00000000000b"), 1)
NODE = NodeIdentity(node_id=7, host="sidecar.test", port=19092, cluster_id="kshare-test", controller_id=7)


class FakeConnection:
    conn_id = 42
    peer_host = "10.0.0.9"
    peer_port = 50000

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def add_close_callback(self, callback: Any) -> None:
        self.callbacks.append(callback)


@pytest.fixture
def catalog() -> InMemoryTopicCatalog:
    return InMemoryTopicCatalog([ORDERS, EVENTS])


@pytest.fixture
def dispatcher(catalog: InMemoryTopicCatalog) -> Dispatcher:
    return Dispatcher(build_registry(catalog), NODE)


def request_frame(request: Any, correlation_id: int = 1, client_id: str | None = "test-client") -> bytes:
    """The payload of a request frame (what the connection hands the dispatcher)."""
    return codec.encode_request(request, correlation_id, client_id)[4:]


@pytest.fixture
def call(dispatcher: Dispatcher):
    """``await call(request) -> (response header, response body)`` through the dispatcher."""

    async def _call(request: Any, correlation_id: int = 1) -> tuple[Any, Any]:
        out = await dispatcher.handle(request_frame(request, correlation_id), FakeConnection())
        assert out is not None
        assert int.from_bytes(out[:4], "big") == len(out) - 4
        return codec.decode_response(out[4:], load_response_from_request(type(request)))

    return _call
