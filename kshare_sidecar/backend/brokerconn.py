"""A raw, pipelined connection to one backend broker: request bytes in, response bytes out.

Why not aiokafka's connection: forwarding must not decode what it carries, nor copy it. aiokafka
parses every response into its own structs and its StreamReader copies each frame several times
(buffer growth, slice, delete). Here a request payload (header + body, as the client framed it)
is written with only its correlation id replaced, and each response is received straight into
one buffer of its exact size (``asyncio.BufferedProtocol``): the bytes the kernel hands over are
the bytes written to the client, with the client's correlation id patched in place.

API (kept small so the read path can reuse it)::

    conn = BrokerConn(host, port, principal=None)
    fut = await conn.send(payload)            # written now, in call order; future -> payload
    fut = await conn.send(payload, framed=True)   # future -> size-prefixed frame, for a client
    fut = await conn.send(payload, expect_response=False)   # Produce acks=0: resolves to None
    response = await conn.request(payload, timeout_s=30)
    await conn.close()

- Many requests may be in flight; the broker answers in order and each answer is matched to the
  head of the pending queue (a mismatched correlation id is a protocol error: the connection is
  dropped and every pending request fails with :class:`BrokerConnError`).
- ``send`` connects on first use and again after a failure (reconnect is lazy: the next send).
- KIP-368: when the broker grants a SASL session lifetime (``connections.max.reauth.ms``), the
  connection re-authenticates in place (SaslHandshake + SaslAuthenticate, after the requests in
  flight are answered) at the first ``send`` past 85 % of it — Kafka's client re-authenticates
  between 85 and 95 % — instead of letting the broker close it at its next request; should that
  fail, the connection is dropped and ``send`` connects afresh.
- ``setup`` (backend/connection_states.py, given to every connection to the backend): the TCP
  connect and TLS handshake get the broker's current setup timeout (Kafka's
  ``socket.connection.setup.timeout.ms``, growing per consecutive failure) instead of waiting out
  TCP's SYN retransmissions; ``connect_timeout_s``, when given, caps it and bounds SASL.
- ``principal`` is the seam for per-principal upstream credentials (security is a later issue):
  a connection is opened *for* one principal and the pool keys connections by it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import sys
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from .errors import SaslError
from .sasl import sasl_authenticate

if TYPE_CHECKING:
    from .connection_states import ClusterConnectionStates
    from .security import BackendSecurity

log = logging.getLogger("kshare.brokerconn")

_MAX_CORRELATION = 2**31 - 1
_HIGH_WATER = 1 << 20
_SASL_AUTHENTICATION_FAILED = int(ErrorCode.sasl_authentication_failed)
_REAUTH_AT = 0.85  # fraction of the broker's session lifetime after which a connection re-authenticates
#: Kafka takes at most one re-authentication a second per connection (KafkaChannel); a session too
#: short for that (a delegation token near its expiry) is renewed by reconnecting instead
_MIN_REAUTH_GAP_S = 1.05
#: connect and SASL bound of a connection given neither ``connect_timeout_s`` nor ``setup``
_CONNECT_TIMEOUT_S = 10.0


#: Answers at least this large are received with the socket's receive low-water mark raised
#: (``SO_RCVLOWAT``), at most to ``_LOWAT_CAP`` and never beyond what the answer still lacks: the
#: kernel then wakes the sidecar once per that many bytes instead of per arriving segment. A Fetch
#: answer of a few MB otherwise arrived in a dozen or more wake-ups, each an epoll round, a
#: ``recv`` and a pass of the event loop; a sidecar with little else to do paid each one alone (the
#: cluster benchmark's sidecars serving one consumer blocked in epoll 8.9 times per ShareFetch, a
#: sidecar serving four 3.3 times: docs/capacity.md). The cap is 4 MiB, about a whole read-ahead
#: answer at 1 KiB records: each wake-up of a sidecar with little else to do costs more than the
#: bytes it reads (benchmarks/wake_cost.py). Linux caps a mark at half of what the receive buffer
#: may grow to and grows the buffer to hold it, so a mark never waits for bytes it could not take.
_LOWAT_MIN = 256 * 1024
_LOWAT_CAP = 4 * 1024 * 1024

#: why the first answer on a connection is refused when it starts like a TLS record (alert 0x15 or
#: handshake 0x16, version 3.x): a plaintext request to a TLS listener
TLS_ANSWER = "the broker answered with TLS"


class BrokerConnError(ConnectionError):
    """The broker could not be reached or the connection broke with this request in flight."""


class BrokerAuthError(BrokerConnError):
    """The broker refused the credentials (SASL_AUTHENTICATION_FAILED)."""


class BrokerConnClosed(BrokerConnError):
    """Its owner closed the connection with this request in flight (a pass-through upstream whose
    client went away): nobody waits for the answer, and the broker is not at fault."""


class FramePool:
    """Receive buffers reused once nothing refers to them any more (the Fetch answers' pool).

    Why: a Fetch answer of a few MB received into a fresh ``bytearray`` costs its zero-filling
    and, for memory the allocator just returned to the kernel, a page fault per 4 KiB — together
    a tenth of the sidecar's CPU in the 1M-record profile, for bytes the socket overwrites at once.
    The pool keeps every buffer it lent; one is free again when the pool holds the only reference
    (the views of a cached read keep it referenced while anything may still send them). Frames
    under ``min_bytes`` take a plain buffer; free buffers beyond ``keep_bytes`` are let go."""

    def __init__(self, *, min_bytes: int = 64 * 1024, keep_bytes: int = 32 * 1024 * 1024) -> None:
        self.min_bytes, self.keep_bytes = min_bytes, keep_bytes
        self._bufs: list[bytearray] = []
        self.reused = self.allocated = 0

    def get(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes (its contents are whatever it held last)."""
        if size < self.min_bytes:
            return bytearray(size)
        free = [b for b in self._bufs if sys.getrefcount(b) <= 3]  # the list, ``b`` and the call's argument
        fit = [b for b in free if size <= len(b) <= 2 * size]
        if fit:
            self.reused += 1
            return min(fit, key=len)
        kept = sum(len(b) for b in free)
        for b in sorted(free, key=len):
            if kept <= self.keep_bytes:
                break
            self._bufs.remove(b)
            kept -= len(b)
        buf = bytearray(-(-size // 65536) * 65536)  # 64 KiB steps: a later answer of about this size fits
        self._bufs.append(buf)
        self.allocated += 1
        return buf


class _FrameProtocol(asyncio.BufferedProtocol):
    """Receives each response frame into its own ``bytearray`` (size prefix included), or into a
    buffer of ``pool`` (then the frame is a ``memoryview`` of its first ``4 + size`` bytes)."""

    def __init__(self, conn: BrokerConn, max_frame: int, pool: FramePool | None = None) -> None:
        self._conn: BrokerConn | _Detached = conn
        self._max = max_frame
        self._pool = pool
        self._head = bytearray(4)
        self._frame: bytearray | None = None
        self._end = 0
        self._pos = 0
        self._first = True
        self._can_write = asyncio.Event()
        self._can_write.set()
        self.transport: asyncio.Transport | None = None
        self._sock: Any = None  # the plain TCP socket whose low-water mark is raised (not on TLS)
        self._lowat = 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # Only on plain TCP: under TLS the bytes the kernel counts are records, not the answer's.
        if transport.get_extra_info("sslcontext") is None:
            self._sock = transport.get_extra_info("socket")

    def _watermark(self, want: int) -> None:
        """Set the socket's receive low-water mark to ``want`` bytes (the answer's bytes still to
        come, capped): never more than is still to come, or the last ones would never wake us."""
        if want == self._lowat or self._sock is None:
            return
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, want)
            self._lowat = want
        except OSError:  # a socket that refuses it (closing): segment-by-segment wake-ups, as before
            self._sock, self._lowat = None, 1

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return memoryview(self._head)[self._pos:]
        return memoryview(self._frame)[self._pos:self._end]

    def buffer_updated(self, nbytes: int) -> None:
        self._pos += nbytes
        if self._frame is None:
            if self._pos < 4:
                return
            if self._first and self._head[0] in (0x15, 0x16) and self._head[1] == 0x03:
                self._conn._fail(f"{TLS_ANSWER} (a TLS listener?)")  # a Kafka size would be > 350 MB
                return
            self._first = False
            size = int.from_bytes(self._head, "big", signed=True)
            if not 4 <= size <= self._max:
                self._conn._fail(f"bad response frame size {size}")
                return
            self._end = 4 + size
            self._frame = self._pool.get(self._end) if self._pool is not None else bytearray(self._end)
            self._frame[0:4] = self._head
            if self._end >= _LOWAT_MIN:
                self._watermark(min(self._end - self._pos, _LOWAT_CAP))
        elif self._lowat > 1:
            self._watermark(max(1, min(self._end - self._pos, _LOWAT_CAP)))
        if self._pos == self._end:
            buf, self._frame, self._pos = self._frame, None, 0
            if self._lowat > 1:
                self._watermark(1)  # the next answer's size prefix: four bytes
            self._conn._on_frame(buf if len(buf) == self._end else memoryview(buf)[:self._end])

    def eof_received(self) -> bool:
        self._conn._fail("broker closed the connection")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._can_write.set()
        self._conn._fail(f"connection lost: {exc}" if exc else "connection closed")

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()


class BrokerConn:
    """One TCP connection to one broker (see module docstring)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        principal: Any = None,
        connect_timeout_s: float | None = None,
        max_frame_bytes: int = 1 << 30,
        security: BackendSecurity | None = None,
        pool: FramePool | None = None,
        setup: ClusterConnectionStates | None = None,
    ) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self._pool = pool
        self.principal = principal
        self.security = security
        self._connect_timeout = connect_timeout_s if connect_timeout_s is not None else _CONNECT_TIMEOUT_S
        self._cap = connect_timeout_s  # caps the setup timeout when the caller gave one
        self._setup = setup
        self._max_frame = max_frame_bytes
        self._proto: _FrameProtocol | None = None
        self._pending: collections.deque[tuple[int, bytes, asyncio.Future[Any], bool]] = collections.deque()
        self._next_id = 0
        self._connect_lock = asyncio.Lock()
        self._closed = False
        self._ready = False
        self._reauth_at: float | None = None  # loop time; None: the session does not expire
        self._expires_at: float | None = None
        self._reauth_started = float("-inf")
        self.reauthentications = 0

    def __repr__(self) -> str:
        return f"<BrokerConn node {self.node_id} {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        """Connected and (on a SASL listener) authenticated: ready for requests."""
        return self._ready and self._open()

    def _open(self) -> bool:
        proto = self._proto
        return proto is not None and proto.transport is not None and not proto.transport.is_closing()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def send(self, payload: bytes, *, expect_response: bool = True,
                   framed: bool = False) -> asyncio.Future[Any]:
        """Write one request payload now; the returned future resolves to the response payload.

        ``payload`` is a request without its size prefix; its bytes 4..8 (the correlation id) are
        replaced on the wire and restored in the response. ``framed``: the answer keeps its size
        prefix (a ``bytearray``, ready to write to a client, never copied). Raises
        :class:`BrokerConnError` if the broker cannot be reached.
        """
        if self._reauth_at is not None and asyncio.get_running_loop().time() >= self._reauth_at and self.connected:
            await self._reauthenticate()
        if not self.connected:
            await self._connect()
        fut = self._write(payload, expect_response, framed)
        await self.backpressure()
        return fut

    def _write(self, payload: bytes, expect_response: bool, framed: bool) -> asyncio.Future[Any]:
        proto = self._proto
        assert proto is not None and proto.transport is not None
        transport = proto.transport
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        cid = self._next_id
        self._next_id = 0 if cid >= _MAX_CORRELATION else cid + 1
        head = bytes(payload[4:8])
        # size prefix + api key/version + our correlation id, then the rest untouched
        transport.write(len(payload).to_bytes(4, "big") + bytes(payload[0:4]) + cid.to_bytes(4, "big", signed=True))
        transport.write(memoryview(payload)[8:])
        if expect_response:
            self._pending.append((cid, head, fut, framed))
        else:
            fut.set_result(None)
        return fut

    async def connect(self) -> None:
        """Connect (and authenticate) now rather than at the first ``send``."""
        if not self.connected:
            await self._connect()

    async def backpressure(self) -> None:
        """Wait while the broker is not reading fast enough (the transport's buffer is full)."""
        proto = self._proto
        if proto is not None and not proto._can_write.is_set():
            await proto._can_write.wait()

    async def request(self, payload: bytes, *, timeout_s: float | None = None, framed: bool = False,
                      _raw: bool = False) -> Any:
        """``send`` and wait for the answer (``framed``: as :meth:`send`); a timeout drops the
        connection (the pipeline is stuck)."""
        fut = self._write(payload, True, framed) if _raw else await self.send(payload, framed=framed)
        try:
            result = await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            self._fail(f"request timed out after {timeout_s} s")
            raise
        assert result is not None
        return result

    async def close(self) -> None:
        self._closed = True
        self._fail("closed")

    def drop(self, reason: str) -> None:
        """Close now and fail everything in flight (the next ``send`` reconnects)."""
        self._fail(reason)

    # ------------------------------------------------------------------ internals

    async def _connect(self) -> None:
        async with self._connect_lock:
            attempt = 0
            while True:
                try:
                    return await self._connect_once()
                except BrokerAuthError:
                    # a credential the broker may not know yet (a delegation token just made: each
                    # broker learns it from the metadata log a moment later) is tried again shortly
                    retry = getattr(getattr(self.security, "credential_source", None), "retry_refused", None)
                    delay = retry(attempt) if retry is not None else None
                    if delay is None:
                        raise
                    attempt += 1
                    await asyncio.sleep(delay)

    async def _connect_once(self) -> None:
        if self.connected:
            return
        if self._closed:
            raise BrokerConnError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        proto = _FrameProtocol(self, self._max_frame, self._pool)
        security = self.security
        tls = security.ssl_context if security is not None and security.tls else None
        setup = self._setup
        attempt = setup.connecting(self.host, self.port) if setup is not None else None
        timeout = self._connect_timeout if attempt is None else \
            attempt.timeout_s if self._cap is None else min(self._cap, attempt.timeout_s)
        try:
            await asyncio.wait_for(loop.create_connection(
                lambda: proto, self.host, self.port, ssl=tls, server_hostname=self.host if tls else None), timeout)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            why = repr(exc)
            if setup is not None and attempt is not None:
                setup.failed(attempt)
                if isinstance(exc, TimeoutError):
                    why = (f"not set up within {timeout:.1f} s (socket.connection.setup.timeout.ms, after "
                           f"{attempt.failures} consecutive failures)")
            raise BrokerConnError(f"cannot connect to broker {self.node_id} at {self.host}:{self.port}: {why}") \
                from None
        if setup is not None and attempt is not None:
            setup.ready(attempt)
        assert proto.transport is not None
        proto.transport.set_write_buffer_limits(high=_HIGH_WATER)
        self._proto, self._ready = proto, False
        self._reauth_at = self._expires_at = None
        if security is not None and security.sasl:
            try:
                self._session(await asyncio.wait_for(sasl_authenticate(self, security), self._connect_timeout))
            except BaseException as exc:
                self._fail(f"SASL authentication failed: {exc}")
                if isinstance(exc, SaslError) and exc.code == _SASL_AUTHENTICATION_FAILED:
                    raise BrokerAuthError(f"broker {self.node_id} at {self.host}:{self.port}: {exc}") from None
                if isinstance(exc, (SaslError, BrokerConnError, TimeoutError)):
                    raise BrokerConnError(f"broker {self.node_id} at {self.host}:{self.port}: {exc}") from None
                raise
        self._ready = True
        log.debug("%r: connected", self)

    def _session(self, lifetime_s: float) -> None:
        now = asyncio.get_running_loop().time()
        self._reauth_at = now + lifetime_s * _REAUTH_AT if lifetime_s > 0 else None
        self._expires_at = now + lifetime_s if lifetime_s > 0 else None

    async def _reauthenticate(self) -> None:
        """KIP-368 on this connection: wait for the answers in flight (the broker must not see a
        request interleaved with the exchange), then SaslHandshake + SaslAuthenticate again."""
        async with self._connect_lock:
            loop = asyncio.get_running_loop()
            if not self.connected or self._reauth_at is None or loop.time() < self._reauth_at:
                return  # another sender did it, or the connection is gone (send reconnects)
            assert self.security is not None and self._expires_at is not None
            pending = [fut for _, _, fut, _ in self._pending]
            if pending:
                await asyncio.wait(pending, timeout=max(0.0, self._expires_at - loop.time()))
            if self._pending or not self.connected:
                self._fail("SASL session expired with requests in flight")
                return
            if loop.time() - self._reauth_started < _MIN_REAUTH_GAP_S:
                self._fail("SASL session too short to re-authenticate (one a second): reconnecting")
                return
            self._reauth_started = loop.time()
            try:
                self._session(await asyncio.wait_for(sasl_authenticate(self, self.security), self._connect_timeout))
            except Exception as exc:  # noqa: BLE001 - any failure: a fresh connection authenticates anew
                log.info("%r: re-authentication failed, reconnecting: %s", self, exc)
                self._fail(f"re-authentication failed: {exc}")
                return
            self.reauthentications += 1
            log.debug("%r: re-authenticated", self)

    def _on_frame(self, frame: bytearray | memoryview) -> None:
        cid = int.from_bytes(frame[4:8], "big", signed=True)
        if not self._pending:
            self._fail(f"unexpected response (correlation id {cid})")
            return
        want, head, fut, framed = self._pending.popleft()
        if cid != want:
            self._fail(f"response correlation id {cid}, expected {want}")
            return
        if fut.done():
            return
        frame[4:8] = head
        fut.set_result(frame if framed else bytes(memoryview(frame)[4:]))

    def _fail(self, reason: str) -> None:
        proto, self._proto, self._ready = self._proto, None, False
        if proto is not None:
            log.debug("%r: dropped: %s", self, reason)
            proto._conn = _Detached()  # late callbacks from the old transport change nothing
            if proto.transport is not None:
                proto.transport.abort() if self._pending else proto.transport.close()
        pending, self._pending = self._pending, collections.deque()
        error = BrokerConnClosed if self._closed else BrokerConnError
        for _, _, fut, _ in pending:
            if not fut.done():
                fut.set_exception(error(f"broker {self.node_id} ({self.host}:{self.port}): {reason}"))
                fut.exception()  # its waiter may be gone (a closed client): no "never retrieved" noise


class _Detached:
    """Stands in for a BrokerConn once its transport was dropped."""

    def _fail(self, reason: str) -> None:
        pass

    def _on_frame(self, frame: bytearray | memoryview) -> None:
        pass


__all__ = ["TLS_ANSWER", "BrokerAuthError", "BrokerConn", "BrokerConnClosed", "BrokerConnError", "FramePool"]
