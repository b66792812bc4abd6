"""A tiny blocking Kafka client for readiness probes: one request, one response, over kio.

The harness must not depend on the code under test (aiokafka, the sidecar's own wire layer),
so it carries this minimal framing of its own.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any


def call(host: str, port: int, request: Any, *, timeout: float = 5.0, correlation_id: int = 1) -> Any:
    """Send ``request`` (a kio request entity) and return the decoded response entity."""
    # kio is imported on use: the harness loads as a pytest plugin, before hypothesis's own
    # plugin, and kio's import would otherwise trip hypothesis's side-effect warning.
    from kio.index import load_response_from_request
    from kio.serial import entity_reader, entity_writer

    header_cls = request.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=request.__api_key__,
            request_api_version=request.__version__,
            correlation_id=correlation_id,
            client_id="kshare-harness",
        ),
    )
    entity_writer(type(request))(buf, request)
    payload = buf.getvalue()
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read_exact(sock, 4))[0]
        frame = _read_exact(sock, size)
    response_cls = load_response_from_request(type(request))
    _, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
    response, _ = entity_reader(response_cls)(frame, offset)
    return response


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks += chunk
    return bytes(chunks)


def broker_ready(host: str, port: int, *, timeout: float = 2.0) -> bool:
    """True when the broker answers Metadata with at least one broker and a controller."""
    from kio.schema.metadata.v1.request import MetadataRequest

    try:
        response = call(host, port, MetadataRequest(topics=()), timeout=timeout)
    except (OSError, ConnectionError, ValueError):
        return False
    return bool(response.brokers) and response.controller_id >= 0
