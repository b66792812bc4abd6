"""protocol/requests.py and protocol/blocking.py: the one request encoder, against the server's
decoder (wire/codec) and over a loopback socket."""

from __future__ import annotations

import datetime
import socket
import threading

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from kshare_sidecar.protocol.blocking import BlockingConnection
from kshare_sidecar.protocol.requests import (
    decode_response,
    decode_response_to,
    frame,
    request_frame,
    request_payload,
)
from kshare_sidecar.wire import codec


def test_payload_is_what_the_server_decodes() -> None:
    request = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="t"),),
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    payload = request_payload(request, 41, "cli")
    assert request_frame(request, 41, "cli") == frame(payload) == codec.encode_request(request, 41, "cli")
    decoded = codec.decode_request(payload)
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (3, 12, 41)
    assert decoded.header.client_id == "cli" and decoded.body == request


def _answer(correlation_id: int) -> bytes:
    body = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0))
    return codec.encode_response(body, correlation_id)


def test_response_decoding() -> None:
    request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    payload = _answer(5)[4:]
    header, body = decode_response(payload, ApiVersionsResponse)
    assert header.correlation_id == 5 and body.error_code == ErrorCode.none
    assert decode_response_to(request, payload) == body


def _serve_once(reply) -> tuple[socket.socket, threading.Thread]:
    server = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = server.accept()
        with conn:
            size = int.from_bytes(conn.recv(4), "big")
            data = b""
            while len(data) < size:
                data += conn.recv(size - len(data))
            conn.sendall(reply(codec.peek(data).correlation_id))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.parametrize("reply, error", [
    (_answer, None),
    (lambda cid: _answer(cid + 1), ConnectionError),  # someone else's answer
    (lambda cid: b"", ConnectionError),  # closed without an answer
])
def test_blocking_connection(reply, error) -> None:
    server, thread = _serve_once(reply)
    try:
        with BlockingConnection("127.0.0.1", server.getsockname()[1], timeout=5, client_id="t") as conn:
            request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
            if error is None:
                assert conn.call(request).error_code == ErrorCode.none
            else:
                with pytest.raises(error):
                    conn.call(request)
    finally:
        thread.join(5)
        server.close()
