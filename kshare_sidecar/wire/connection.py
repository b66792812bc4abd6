"""One client TCP connection: read frames, dispatch them, write responses in request order.

Ordering model (see docs/wire.md): Kafka mutes a channel while one of its requests is being
processed, so requests on a connection are *processed* one at a time and *answered* in order.
Handlers rely on that (a ShareFetch at session epoch N must be applied before the pipelined
ShareAcknowledge at epoch N+1). But librdkafka keeps one TCP connection per broker and queues
heartbeats and Metadata behind a long-polling ShareFetch; holding them for MaxWaitMs is legal yet
wasteful. So the default is Kafka's (strictly one request at a time), and a handler may call
``release()`` once it has done everything that must happen before the next request is looked at
(session epoch checked, piggybacked acks applied) and is only *waiting*. The next request is then
processed concurrently, while responses are still written strictly in request order. At most
``max_inflight`` responses may be outstanding; beyond that the connection stops reading
(backpressure instead of unbounded buffering).

The handler is anything matching :class:`FrameHandler`; this module knows nothing of APIs.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..metrics import STATS as _METRICS
from ..ratelog import RateLimitedLog
from .deadline import ReadDeadline
from .errors import CloseAfterResponse, CloseConnection, TimedOut
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FramePieces
from .job import Job, Response, current_task_cancelling, retrieve
from .limits import RequestMemoryPool

log = logging.getLogger("kshare.wire")
#: "closing: <reason>" lines are client-caused; a flood of them is rate-limited per reason kind.
closing = RateLimitedLog(log)

#: Kafka's ``connections.max.idle.ms`` default (10 minutes).
DEFAULT_IDLE_TIMEOUT_S = 600.0
#: ``request.read.timeout.ms`` default: a started frame must be complete within this.
DEFAULT_READ_TIMEOUT_S = 60.0
#: How long closing waits for buffered responses to reach a peer before aborting the socket.
_CLOSE_GRACE_S = 2.0

_conn_ids = itertools.count(1)

#: Called once when a connection ends; may be a coroutine function. Receives the connection.
CloseCallback = Callable[["Connection"], Awaitable[None] | None]


class FrameHandler(Protocol):
    """Turns one request frame into one framed response (or ``None`` for no response).

    ``release`` lets the next request on this connection start processing early (see module
    docstring); calling it is optional and idempotent. Raising :class:`CloseConnection` closes
    the connection after every earlier response has been written.
    """

    async def __call__(self, conn: Connection, frame: bytes, release: Callable[[], None]) -> Response | None: ...


class Connection:
    """Owns one ``asyncio`` stream pair for its whole life; ``run()`` returns when it is closed."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handler: FrameHandler,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_inflight: int = 64,
        read_size: int = 65536,
        conn_id: int | None = None,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        listener: str = "PLAINTEXT",
        security_protocol: str = "PLAINTEXT",
        initial_max_frame_bytes: int | None = None,
        memory_pool: RequestMemoryPool | None = None,
    ) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight must be at least 1")
        self.conn_id: int = next(_conn_ids) if conn_id is None else conn_id
        self._reader = reader
        self._writer = writer
        self._handler = handler
        # Until lift_frame_limit(), frames are held to initial_max_frame_bytes: Kafka's
        # sasl.server.max.receive.size bounds what an unauthenticated client can make it buffer.
        self._decoder = FrameDecoder(min(max_frame_bytes, initial_max_frame_bytes or max_frame_bytes))
        self._max_frame_bytes = max_frame_bytes
        # Responses outstanding at most (max_inflight): only the read loop takes a slot, so a
        # counter and one future when it has to wait do what a semaphore would, for less per request.
        self._free_slots = max_inflight
        self._slot_freed: asyncio.Future[None] | None = None
        self._read_size = read_size
        self._idle_timeout = idle_timeout_s
        self._read_timeout = read_timeout_s
        self._frame_started: float | None = None  # when the partial frame being read began
        self._last_activity = 0.0
        self._writing = False  # a response is being handed to the socket (the write loop waits in drain)
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._jobs: set[asyncio.Task[Any]] = set()
        self._callbacks: list[CloseCallback] = []
        self._loops: list[asyncio.Task[None]] = []
        self._loop = asyncio.get_running_loop()  # made inside the server's callback, on its loop
        self._read_task: asyncio.Task[None] | None = None
        self._deadline = ReadDeadline(self._loop, lambda: self._read_task)
        self._pending = 0  # responses handed to the write loop and not yet written
        self._done = asyncio.Event()
        self._closing = False
        self._draining = False
        self._pool = memory_pool
        self._reserved = 0  # bytes of the pool this connection holds for its partial frame
        self._peer_gone = False  # the peer's EOF (or a broken connection) reached the reader
        self._held: asyncio.Future[None] | None = None  # the wait of a request holding ordering
        _watch_end(reader, self._on_peer_gone)
        self._unreleased: set[asyncio.Task[Any]] = set()  # jobs still holding request ordering
        self.close_reason: str | None = None
        self.peer_host, self.peer_port = _address(writer.get_extra_info("peername"))
        self.local_host, self.local_port = _address(writer.get_extra_info("sockname"))
        #: Which listener accepted it (name and security protocol, Kafka's listener terms).
        self.listener = listener
        self.security_protocol = security_protocol
        #: The client's verified certificate (``ssl.SSLSocket.getpeercert()`` form) on a TLS
        #: listener that asked for one, else None; the api layer builds the principal from it.
        self.peer_cert: dict[str, Any] | None = writer.get_extra_info("peercert") or None
        #: Kafka principal of this connection ("User:..."): set by the api layer (mTLS subject or
        #: SASL user); never a secret, logged at debug level only.
        self.principal = "User:ANONYMOUS"

    # --- public surface -------------------------------------------------------------------

    @property
    def peer(self) -> str:
        """``host:port`` of the client, for log lines."""
        return f"{self.peer_host}:{self.peer_port}"

    @property
    def closed(self) -> bool:
        return self._done.is_set()

    def lift_frame_limit(self) -> None:
        """From the next frame on, accept frames up to ``max_frame_bytes`` (after authentication)."""
        self._decoder.max_frame_bytes = self._max_frame_bytes

    def add_close_callback(self, callback: CloseCallback) -> None:
        """Run ``callback(conn)`` once when the connection ends (immediately if it already has).

        This is how per-connection state (share sessions) is released on TCP disconnect.
        """
        if self._done.is_set():
            asyncio.get_running_loop().create_task(_run_callback(self, callback))
        else:
            self._callbacks.append(callback)

    def close(self, reason: str = "closed by server") -> None:
        """Ask the connection to close now; parked handlers are cancelled, a request still being
        processed finishes unobserved (it may be changing state)."""
        if self.close_reason is None:
            self.close_reason = reason
        for task in self._loops:
            task.cancel()

    async def wait_closed(self) -> None:
        await self._done.wait()

    async def settle(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the requests in flight now to be answered and their
        answers handed to the socket: a stopping sidecar closes connections after this, so an
        answer that acquired records is written, not dropped by the close."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pending = list(self._jobs)
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        while (self._writing or self._pending) and not self.closed and loop.time() < deadline:
            await asyncio.sleep(0.005)

    async def run(self) -> None:
        """Serve until the peer disconnects, a protocol error occurs, or :meth:`close`."""
        log.debug("conn %d from %s: open", self.conn_id, self.peer)
        self._read_task = asyncio.create_task(self._read_loop(), name=f"kshare-conn-{self.conn_id}-read")
        self._loops = [
            self._read_task,
            asyncio.create_task(self._write_loop(), name=f"kshare-conn-{self.conn_id}-write"),
        ]
        try:
            await asyncio.wait(self._loops, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await self._shutdown()

    # --- loops --------------------------------------------------------------------------------

    async def _read(self) -> bytes:
        """One socket read, bounded in time (Kafka's ``connections.max.idle.ms`` between
        requests; ``request.read.timeout.ms`` once a frame has started, so a peer trickling a
        frame byte by byte — slow-loris — cannot pin its buffer forever)."""
        while True:
            if self._frame_started is not None:
                deadline, what = self._frame_started + self._read_timeout, "request.read.timeout.ms"
            else:
                deadline, what = self._last_activity + self._idle_timeout, "connections.max.idle.ms"
            try:
                return await self._deadline.read(self._reader, self._read_size, deadline)
            except TimeoutError:
                if what == "connections.max.idle.ms" and (self._jobs or self._writing or self._pending):
                    self._last_activity = self._loop.time()  # in flight (a long poll) or being written: not idle
                    continue
                raise TimedOut(f"no complete request within {what}") from None

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        self._last_activity = loop.time()
        try:
            while True:
                data = await self._read()
                if not data:
                    self._set_reason("peer closed the connection")
                    return
                self._last_activity = loop.time()
                frames = self._decoder.feed(data)
                if not self._decoder.pending:
                    self._frame_started = None
                elif frames or self._frame_started is None:
                    self._frame_started = self._last_activity
                if self._pool is not None and self._decoder.partial_frame_bytes != self._reserved:
                    await self._reserve(self._decoder.partial_frame_bytes)
                for frame in frames:
                    while not self._free_slots:
                        self._slot_freed = self._loop.create_future()
                        await self._slot_freed
                    self._free_slots -= 1
                    job = Job()
                    job.task = task = loop.create_task(self._process(frame, job))
                    self._jobs.add(task)
                    self._unreleased.add(task)
                    task.add_done_callback(self._job_done)
                    await self._await_release(job)  # Kafka-style: next request only after this one
                    if not (task.done() and self._write_now(task)):
                        self._pending += 1
                        self._queue.put_nowait(job)
                    if self._draining:
                        # A handler asked to close: process nothing more, but let the write
                        # loop flush the responses that precede it (it ends the connection).
                        # Keep reading (and discarding) so that a peer's EOF still ends it.
                        while await self._read():
                            pass
                        self._set_reason("peer closed the connection")
                        return
        except _PeerGone:
            self._set_reason("peer closed the connection while a request was in flight")
        except CloseConnection as exc:
            self._set_reason(str(exc))
            closing.log(type(exc).__name__, logging.WARNING, "conn %d from %s: closing: %s",
                        self.conn_id, self.peer, exc)
        except (ConnectionError, OSError) as exc:
            self._set_reason(f"read failed: {exc}")

    def _release_slot(self) -> None:
        self._free_slots += 1
        freed = self._slot_freed
        if freed is not None and not freed.done():
            freed.set_result(None)

    def _job_done(self, task: asyncio.Task[Any]) -> None:
        self._jobs.discard(task)
        self._unreleased.discard(task)
        retrieve(task)  # a close may leave it unawaited

    def _write_now(self, task: asyncio.Task[Response | None]) -> bool:
        """Write a finished request's answer from the read loop, when nothing is ahead of it and
        the socket takes it: most requests (a heartbeat, a cached metadata answer) finish in their
        first step, and handing them to the write loop cost a queue and a task wake-up each.
        False leaves it to the write loop (an error to act on, answers ahead, a full buffer)."""
        if self._pending or task.cancelled() or task.exception() is not None:
            return False
        transport = self._writer.transport
        if transport.is_closing() or transport.get_write_buffer_size():
            return False
        out = task.result()
        if out:
            self._send(out)
            self._last_activity = self._loop.time()
        self._release_slot()
        return True

    async def _reserve(self, size: int) -> None:
        """Hold ``size`` bytes of the memory pool for the frame being received (queued.max.request.bytes):
        waiting here is not reading, and the wait does not count against request.read.timeout.ms."""
        assert self._pool is not None
        if size < self._reserved:
            self._pool.release(self._reserved - size)
            self._reserved = size
            return
        await self._pool.acquire(size - self._reserved)
        self._reserved = size
        if self._frame_started is not None:
            self._frame_started = asyncio.get_running_loop().time()

    async def _await_release(self, job: Job) -> None:
        """Wait until ``job`` releases ordering, but notice a peer that leaves meanwhile.

        Kafka mutes a channel while its request is processed; a slow request (a state write, an
        admin call forwarded to a busy backend) would then pin a connection whose client is gone.
        The socket is not read meanwhile — pipelined requests wait in the stream's buffer, and
        beyond its limit (asyncio pauses reading at twice the stream limit) in the kernel's, so a
        client pipelining without end costs the sidecar no memory — but the stream tells the
        connection when the peer's EOF or a broken connection reaches it (``_watch_end``), which
        ends the connection at once. The request itself is not cancelled — it may be changing
        state — it finishes unobserved.
        """
        if job.released:
            return
        # Most requests (a heartbeat, a metadata answer from cache) finish in their task's first
        # step: let it run before making the future to wait on.
        await asyncio.sleep(0)
        if job.released:
            return
        if self._peer_gone:
            raise _PeerGone
        job.waiter = self._held = waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._held = None
            if not waiter.done():
                waiter.cancel()

    def _on_peer_gone(self) -> None:
        self._peer_gone = True
        held = self._held
        if held is not None and not held.done():
            held.set_exception(_PeerGone())

    async def _process(self, frame: bytes, job: Job) -> Response | None:
        try:
            return await self._handler(self, frame, job.release)
        except CloseConnection:
            self._draining = True
            # Requests ahead of this one can only be parked long polls (they released ordering).
            # Kafka closes at once; waiting for them could hold the connection for MaxWaitMs.
            for task in list(self._jobs):
                if task is not job.task and not task.done():
                    task.cancel()
            raise
        finally:
            job.release()

    async def _write_loop(self) -> None:
        while True:
            job = await self._queue.get()
            assert job.task is not None
            try:
                # shielded: cancelling the write loop must not cancel the request it waits for
                # (a request still being processed finishes unobserved, see _shutdown); one that
                # is done already is read as it is (the same outcome, without the shield's future)
                out = job.task.result() if job.task.done() else await asyncio.shield(job.task)
            except CloseAfterResponse as exc:
                self._set_reason(str(exc))
                log.debug("conn %d from %s: closing after the response: %s", self.conn_id, self.peer, exc)
                if exc.response:
                    try:
                        self._writer.write(exc.response)
                        await asyncio.wait_for(self._writer.drain(), _CLOSE_GRACE_S)
                    except (TimeoutError, ConnectionError, OSError):
                        pass
                return
            except CloseConnection as exc:
                self._set_reason(str(exc))
                closing.log(type(exc).__name__, logging.WARNING, "conn %d from %s: closing: %s",
                            self.conn_id, self.peer, exc)
                return
            except asyncio.CancelledError:
                if current_task_cancelling():
                    raise
                self._set_reason("closing: a parked request was cancelled")  # see _process
                return
            except Exception:
                self._set_reason("handler failed")
                log.exception("conn %d from %s: handler failed, closing", self.conn_id, self.peer)
                return
            try:
                if out:
                    self._writing = True
                    self._send(out)
                    # A peer that never reads would pin its responses forever: bound the wait
                    # like an idle connection (Kafka's connections.max.idle.ms). A response the
                    # socket took whole leaves nothing to drain: no wait (and no timer) then.
                    transport = self._writer.transport
                    if transport.get_write_buffer_size() or transport.is_closing():
                        await asyncio.wait_for(self._writer.drain(), self._idle_timeout)
                    self._writing = False
                    self._last_activity = self._loop.time()
            except TimeoutError:  # before OSError, its base class
                self._set_reason("peer did not read its responses within connections.max.idle.ms")
                closing.log("TimedOut", logging.WARNING, "conn %d from %s: closing: %s", self.conn_id,
                            self.peer, self.close_reason)
                return
            except (ConnectionError, OSError) as exc:
                self._set_reason(f"write failed: {exc}")
                return
            self._pending -= 1
            self._release_slot()

    def _send(self, out: Response) -> None:
        """Hand one answer to the transport (it sends what the socket takes, buffers the rest)."""
        if isinstance(out, FramePieces):
            self._write_pieces(out)
        else:
            self._writer.transport.write(out)

    def _write_pieces(self, pieces: FramePieces) -> None:
        """Hand a frame's pieces to the transport without joining them. A transport with a
        gathering ``writelines`` (uvloop; asyncio from Python 3.12) gets them all at once; asyncio's
        3.11 one would join them (a copy of every record byte), so each goes by ``write``, which
        sends at once while the socket takes it and buffers (copies) only what it does not."""
        transport = self._writer.transport
        if type(transport).writelines is not asyncio.WriteTransport.writelines:
            transport.writelines(pieces)
            return
        for piece in pieces:
            transport.write(piece)
        _METRICS.record_bytes_copied += transport.get_write_buffer_size()

    # --- teardown -----------------------------------------------------------------------------

    def _set_reason(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason

    async def _shutdown(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._deadline.cancel()
        for task in self._loops:
            task.cancel()
        # Parked requests (they released ordering: long polls) are cancelled; a request still
        # being processed may be changing state, so it finishes on its own, unobserved.
        jobs = [task for task in self._jobs if task not in self._unreleased]
        for task in jobs:
            task.cancel()
        await asyncio.gather(*self._loops, *jobs, return_exceptions=True)
        if self._pool is not None:
            self._pool.release(self._reserved)
            self._reserved = 0
        self._writer.close()
        try:
            # close() flushes what is buffered first; a peer that does not read would make that
            # wait forever, so after a short grace the socket is aborted.
            await asyncio.wait_for(self._writer.wait_closed(), _CLOSE_GRACE_S)
        except TimeoutError:  # before OSError, its base class
            self._writer.transport.abort()
        except (ConnectionError, OSError):
            pass
        log.debug("conn %d from %s: closed (%s)", self.conn_id, self.peer, self.close_reason)
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            await _run_callback(self, callback)
        self._done.set()


class _PeerGone(Exception):
    """EOF from the peer while a request was still being processed."""


def _watch_end(reader: asyncio.StreamReader, notify: Callable[[], None]) -> None:
    """Call ``notify`` when the peer's EOF or a connection error reaches ``reader``.

    The stream's protocol hands both to the reader (``feed_eof``, ``set_exception``), which wakes
    a pending read only; a connection holding request ordering has none pending (it leaves
    pipelined bytes in the stream), so it is told here instead — without a read task and a wait
    on two futures for each request that does not finish in its first step."""
    feed_eof, set_exception = reader.feed_eof, reader.set_exception

    def eof() -> None:
        feed_eof()
        notify()

    def failed(exc: Exception) -> None:
        set_exception(exc)
        notify()

    reader.feed_eof = eof  # type: ignore[method-assign]
    reader.set_exception = failed  # type: ignore[method-assign]


async def _run_callback(conn: Connection, callback: CloseCallback) -> None:
    try:
        result = callback(conn)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("conn %d from %s: close callback %r failed", conn.conn_id, conn.peer, callback)


def _address(info: Any) -> tuple[str, int]:
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return ("?", 0)
