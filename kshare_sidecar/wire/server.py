"""The TCP listener: accepts connections and runs one :class:`Connection` per client.

A misbehaving client only ever ends its own connection; the listener keeps serving the others.
``serve()`` mirrors hypercorn's embedding API: it runs until ``shutdown_trigger`` returns.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable

from collections import Counter

from .connection import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S, Connection, FrameHandler
from .framing import DEFAULT_MAX_FRAME_BYTES
from ..auth.tls import HANDSHAKE_REFUSALS
from ..ratelog import RateLimitedLog
from .limits import RequestMemoryPool, fd_reserve, fds_nearly_exhausted, raise_open_files_limit, resolve_overrides

log = logging.getLogger("kshare.wire")
refusals = RateLimitedLog(log)


class Listener:
    """A listening socket plus the set of live connections.

    ``port=0`` binds an ephemeral port; read the real one from :attr:`port` after :meth:`start`.
    """

    def __init__(
        self,
        handler: FrameHandler,
        host: str = "0.0.0.0",
        port: int = 9092,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_inflight: int = 64,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        max_connections: int = 2**31 - 1,
        max_connections_per_ip: int = 2**31 - 1,
        max_connections_per_ip_overrides: dict[str, int] | None = None,
        name: str = "PLAINTEXT",
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        initial_max_frame_bytes: int | None = None,
        memory_pool: RequestMemoryPool | None = None,
    ) -> None:
        self._handler = handler
        self._memory_pool = memory_pool  # queued.max.request.bytes, shared by every listener
        #: SASL listeners: the frame limit before authentication (Kafka's sasl.server.max.receive.size)
        self._initial_max_frame_bytes = initial_max_frame_bytes
        self.name = name
        self.security_protocol = security_protocol
        #: TLS is started per connection (not by ``start_server(ssl=...)``) so that a failed
        #: handshake — a plaintext client on a TLS port — is seen here and logged as one line.
        self._ssl = ssl_context
        self._idle_timeout = idle_timeout_s
        self._read_timeout = read_timeout_s
        self._max_connections = max_connections
        self._max_per_ip = max_connections_per_ip
        self._overrides_by_host = dict(max_connections_per_ip_overrides or {})
        self._per_ip_overrides: dict[str, int] = {}  # by IP address, resolved at start()
        self._per_ip: Counter[str] = Counter()
        self.refused = 0  # connections closed at accept because of the two caps
        self._host = host
        self._port = port
        self._max_frame_bytes = max_frame_bytes
        self._max_inflight = max_inflight
        self._server: asyncio.Server | None = None
        self._connections: dict[int, Connection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        """The bound port (the requested one until :meth:`start`; kept after :meth:`stop`)."""
        return self._port

    @property
    def connections(self) -> dict[int, Connection]:
        """Live connections by ``conn_id`` (a view: do not mutate)."""
        return self._connections

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("listener already started")
        raise_open_files_limit()
        self._per_ip_overrides = resolve_overrides(self._overrides_by_host)
        self._server = await asyncio.start_server(self._accept, self._host, self._port)
        if self._server.sockets:
            self._port = int(self._server.sockets[0].getsockname()[1])
        log.info("listening on %s:%d (%s, %s)", self._host, self.port, self.name, self.security_protocol)

    async def settle(self, timeout: float) -> None:
        """Let every connection answer what it has in flight (see ``Connection.settle``)."""
        conns = list(self._connections.values())
        if conns:
            await asyncio.gather(*(conn.settle(timeout) for conn in conns))

    def close_connections(self, reason: str) -> int:
        """Close every connection now (the listener goes on accepting); how many."""
        conns = list(self._connections.values())
        for conn in conns:
            conn.close(reason)
        return len(conns)

    async def stop(self, *, grace: float = 5.0) -> None:
        """Stop accepting, close every connection (cancelling in-flight handlers), wait for them."""
        if self._server is None:
            return
        self._stopping = True
        self._server.close()
        for conn in list(self._connections.values()):
            conn.close("listener stopping")
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=grace)
            if pending:
                # A connection whose close did not finish within the grace (a close callback
                # waiting on the backend, say) is cancelled outright: a stopped listener must
                # not leave tasks behind for a loop that is about to close.
                log.warning("%d connection(s) did not close within %.1f s: cancelling them", len(pending), grace)
                for task in pending:
                    task.cancel()
                await asyncio.wait(pending, timeout=grace)
        await self._server.wait_closed()
        self._server = None
        log.info("stopped listening on %s:%d", self._host, self._port)

    async def __aenter__(self) -> Listener:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) else "?"
        peer_text = f"{ip}:{peer[1]}" if isinstance(peer, tuple) and len(peer) > 1 else ip
        which = self._over_limit(ip, writer)
        if which is not None:
            # Kafka's max.connections / max.connections.per.ip: the new connection is closed.
            self.refused += 1
            refusals.log(which.split(" ")[0], logging.WARNING, "refusing connection from %s: %s", peer_text, which)
            await _close(writer)
            return
        self._per_ip[ip] += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)  # from here on, stop() waits for (or cancels) this connection
        conn: Connection | None = None
        try:
            if self._ssl is not None and not await self._start_tls(writer, peer_text):
                return
            if self._stopping:  # the listener stopped during the TLS handshake
                writer.transport.abort()
                return
            conn = Connection(
                reader,
                writer,
                self._handler,
                max_frame_bytes=self._max_frame_bytes,
                max_inflight=self._max_inflight,
                idle_timeout_s=self._idle_timeout,
                read_timeout_s=self._read_timeout,
                listener=self.name,
                security_protocol=self.security_protocol,
                initial_max_frame_bytes=self._initial_max_frame_bytes,
                memory_pool=self._memory_pool,
            )
            self._connections[conn.conn_id] = conn
            await conn.run()
        except asyncio.CancelledError:
            # stop() cancels a connection that outlived its grace: the task ends normally, or
            # asyncio's stream callback reports the cancellation as an "Exception in callback"
            if not self._stopping:
                raise
            if conn is None:
                writer.transport.abort()
        except Exception:  # never let one connection take the listener down
            log.exception("conn %d from %s: crashed", conn.conn_id if conn else 0, conn.peer if conn else peer_text)
        finally:
            if conn is not None:
                self._connections.pop(conn.conn_id, None)
            self._release_ip(ip)
            if task is not None:
                self._tasks.discard(task)

    def _over_limit(self, ip: str, writer: asyncio.StreamWriter) -> str | None:
        """Which limit a new connection from ``ip`` would break (the text of its log line), or None."""
        if len(self._connections) >= self._max_connections:
            return f"max.connections={self._max_connections} reached"
        limit = self._per_ip_overrides.get(ip, self._max_per_ip)
        if self._per_ip[ip] >= limit:
            key = "max.connections.per.ip.overrides" if ip in self._per_ip_overrides else "max.connections.per.ip"
            return f"{key}={limit} reached for {ip}"
        sock = writer.get_extra_info("socket")
        exhausted, soft = fds_nearly_exhausted(sock.fileno() if sock is not None else -1)
        if exhausted:
            return (f"open files nearly exhausted (limit {soft}; {fd_reserve(soft)} descriptors are kept for "
                    f"the sidecar's own backend connections: raise `ulimit -n`)")
        return None

    def _release_ip(self, ip: str) -> None:
        self._per_ip[ip] -= 1
        if self._per_ip[ip] <= 0:
            del self._per_ip[ip]

    async def _start_tls(self, writer: asyncio.StreamWriter, peer: str) -> bool:
        """The TLS handshake; a failure (plaintext client, untrusted or missing client
        certificate, timeout) is one rate-limited line, no traceback, and the socket is closed."""
        assert self._ssl is not None
        held: list[ssl.SSLError] = []
        HANDSHAKE_REFUSALS.set(held)  # this connection's task: auth/tls.py's AlertFirst reports into it
        try:
            await writer.start_tls(self._ssl, ssl_handshake_timeout=min(self._read_timeout, 30.0))
            return True
        except (ssl.SSLError, ConnectionError, OSError, TimeoutError) as exc:
            # a refused client certificate is held back until its alert went out, so the exception
            # is then the client's close: the refusal's own reason is the one to log
            reason = (held[0].reason if held else None) or getattr(exc, "reason", None) or type(exc).__name__
            refusals.log(f"tls-{reason}", logging.WARNING, "connection from %s to listener %s: TLS handshake "
                         "failed (%s); closing (a plaintext client, or a client certificate that is missing or "
                         "not trusted?)", peer, self.name, reason)
            writer.transport.abort()
            return False


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except (ConnectionError, OSError):
        pass


async def serve(
    host: str,
    port: int,
    handler: FrameHandler,
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    max_inflight: int = 64,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    on_started: Callable[[Listener], object] | None = None,
) -> None:
    """Serve ``handler`` on ``host:port`` until ``shutdown_trigger()`` returns (or forever).

    ``on_started(listener)`` runs once the socket is bound (useful with ``port=0``).
    """
    listener = Listener(handler, host, port, max_frame_bytes=max_frame_bytes, max_inflight=max_inflight)
    await listener.start()
    try:
        if on_started is not None:
            on_started(listener)
        if shutdown_trigger is None:
            await asyncio.Event().wait()
        else:
            await shutdown_trigger()
    finally:
        await listener.stop()
