"""A raw, pipelined connection to one backend broker: request bytes in, response bytes out.

Why not aiokafka's connection: forwarding must not decode what it carries. aiokafka parses every
response into its own structs; here a request payload (header + body, as the client framed it)
is written with only its correlation id replaced, and the response payload comes back with the
client's correlation id restored — records are never looked at.

API (kept small so the read path can reuse it)::

    conn = BrokerConn(host, port, principal=None)
    fut = await conn.send(payload)            # written now, in call order; future -> payload
    fut = await conn.send(payload, expect_response=False)   # Produce acks=0: resolves to None
    response = await conn.request(payload, timeout_s=30)
    await conn.close()

- Many requests may be in flight; the broker answers in order and each answer is matched to the
  head of the pending queue (a mismatched correlation id is a protocol error: the connection is
  dropped and every pending request fails with :class:`BrokerConnError`).
- ``send`` connects on first use and again after a failure (reconnect is lazy: the next send).
- ``principal`` is the seam for per-principal upstream credentials (security is a later issue):
  a connection is opened *for* one principal and the pool keys connections by it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

from ..wire.framing import FrameDecoder

log = logging.getLogger("kshare.brokerconn")

_MAX_CORRELATION = 2**31 - 1


class BrokerConnError(ConnectionError):
    """The broker could not be reached or the connection broke with this request in flight."""


class BrokerConn:
    """One TCP connection to one broker (see module docstring)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        principal: Any = None,
        connect_timeout_s: float = 10.0,
        max_frame_bytes: int = 1 << 30,
    ) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.principal = principal
        self._connect_timeout = connect_timeout_s
        self._max_frame = max_frame_bytes
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: collections.deque[tuple[int, bytes, asyncio.Future[bytes | None], bool]] = \
            collections.deque()
        self._next_id = 0
        self._connect_lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"<BrokerConn node {self.node_id} {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def send(self, payload: bytes, *, expect_response: bool = True,
                   framed: bool = False) -> asyncio.Future[bytes | None]:
        """Write one request payload now; the returned future resolves to the response payload.

        ``payload`` is a request without its size prefix; its bytes 4..8 (the correlation id) are
        replaced on the wire and restored in the response. ``framed``: the answer keeps its size
        prefix, ready to write to a client (built in one copy). Raises :class:`BrokerConnError`
        if the broker cannot be reached.
        """
        if not self.connected:
            await self._connect()
        writer = self._writer
        assert writer is not None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bytes | None] = loop.create_future()
        cid = self._next_id
        self._next_id = 0 if cid >= _MAX_CORRELATION else cid + 1
        head = payload[4:8]
        size = len(payload)
        # size prefix + api key/version + our correlation id, then the rest untouched
        writer.write(size.to_bytes(4, "big") + payload[0:4] + cid.to_bytes(4, "big", signed=True))
        writer.write(memoryview(payload)[8:])
        if expect_response:
            self._pending.append((cid, head, fut, framed))
        else:
            fut.set_result(None)
        if writer.transport.get_write_buffer_size() > 1 << 20:
            try:
                await writer.drain()
            except (ConnectionError, OSError) as exc:
                self._fail(f"write failed: {exc}")
        return fut

    async def request(self, payload: bytes, *, timeout_s: float | None = None) -> bytes:
        """``send`` and wait for the answer; a timeout drops the connection (the pipeline is stuck)."""
        fut = await self.send(payload)
        try:
            result = await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            self._fail(f"request timed out after {timeout_s} s")
            raise
        assert result is not None
        return result

    async def close(self) -> None:
        self._closed = True
        self._fail("closed")
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
            self._reader_task = None

    def drop(self, reason: str) -> None:
        """Close now and fail everything in flight (the next ``send`` reconnects)."""
        self._fail(reason)

    # ------------------------------------------------------------------ internals

    async def _connect(self) -> None:
        async with self._connect_lock:
            if self.connected:
                return
            if self._closed:
                raise BrokerConnError(f"{self!r} is closed")
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), self._connect_timeout
                )
            except (OSError, asyncio.TimeoutError) as exc:
                raise BrokerConnError(f"cannot connect to broker {self.node_id} at {self.host}:{self.port}: {exc!r}") from None
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read_loop(reader, writer), name=f"kshare-brokerconn-{self.node_id}")
            log.debug("%r: connected", self)

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(self._max_frame)
        try:
            while True:
                data = await reader.read(1 << 18)
                if not data:
                    raise BrokerConnError("broker closed the connection")
                for payload in decoder.feed(data):
                    cid = int.from_bytes(payload[0:4], "big", signed=True)
                    if not self._pending:
                        raise BrokerConnError(f"unexpected response (correlation id {cid})")
                    want, head, fut, framed = self._pending.popleft()
                    if cid != want:
                        raise BrokerConnError(f"response correlation id {cid}, expected {want}")
                    if not fut.done():
                        rest = memoryview(payload)[4:]
                        if framed:
                            fut.set_result(b"".join((len(payload).to_bytes(4, "big"), head, rest)))
                        else:
                            fut.set_result(b"".join((head, rest)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # broken socket, bad frame, protocol error: all end this conn
            if self._writer is writer:
                self._fail(str(exc))

    def _fail(self, reason: str) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            log.debug("%r: dropped: %s", self, reason)
            writer.close()
        pending, self._pending = self._pending, collections.deque()
        for _, _, fut, _ in pending:
            if not fut.done():
                fut.set_exception(BrokerConnError(f"broker {self.node_id} ({self.host}:{self.port}): {reason}"))
        task = self._reader_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._reader_task = None


__all__ = ["BrokerConn", "BrokerConnError"]
