"""One blocking TCP connection to a Kafka broker: requests one at a time, answers in order.

Why: the CLI's admin client (``cli/kclient.py``) and the test harness's readiness probe
(``testing/probe.py``) are synchronous and send a handful of requests; an asyncio client or
aiokafka would be a heavy dependency for either, and the harness must not depend on the server
or backend code it tests (``wire/``, ``api/``, ``backend/``). This class needs only sockets and
:mod:`.requests`. Errors are the socket's: :class:`OSError` (refused, reset),
:class:`TimeoutError`, :class:`ConnectionError` (closed, or a mismatched correlation id); callers
word them for their users.
"""

from __future__ import annotations

import socket
from types import TracebackType
from typing import Any

from .requests import decode_response, request_frame, response_class_of


class BlockingConnection:
    """A connected socket; :meth:`call` sends a kio request and returns the decoded response."""

    def __init__(self, host: str, port: int, *, timeout: float, client_id: str) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self._correlation = 0

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def call(self, request: Any) -> Any:
        """Send ``request`` and wait for its answer (the response body entity)."""
        self._correlation += 1
        self.sock.sendall(request_frame(request, self._correlation, self.client_id))
        size = int.from_bytes(self._read(4), "big", signed=True)
        payload = self._read(size)
        request_cls: type = type(request)
        header, body = decode_response(payload, response_class_of(request_cls))
        if header.correlation_id != self._correlation:
            raise ConnectionError(f"{self.address} answered correlation id {header.correlation_id}, "
                                  f"expected {self._correlation}")
        return body

    def _read(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError(f"connection closed by {self.address}")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
