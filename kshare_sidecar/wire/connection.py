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

The connection is the transport's ``asyncio.Protocol``: bytes arrive in ``data_received``, which
splits them into frames and starts the next request's task there and then; a request's task
hands its own answer to the socket when nothing is ahead of it. So a request that finishes in its
first step (a heartbeat, a cached answer) costs one wake-up for its bytes and one for its task —
no read loop, no stream buffer in between, no write loop (docs/wire.md). The listener accepts
and runs the TLS handshake with asyncio's streams; :meth:`Connection.run` then takes the
transport over, with whatever the stream had already read.

The handler is anything matching :class:`FrameHandler`; this module knows nothing of APIs.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..metrics import STATS as _METRICS
from ..ratelog import RateLimitedLog
from .errors import CloseAfterResponse, CloseConnection, TimedOut
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FramePieces
from .gather import write_pieces
from .job import Job, Response
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
#: Bytes read ahead (complete frames waiting, plus a partial one) while a request holds ordering
#: or every response slot is taken; beyond this the socket is not read (the rest waits in the
#: kernel), so a client pipelining without end costs the sidecar no memory.
READ_AHEAD_BYTES = 65536

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


class Connection(asyncio.Protocol):
    """One client connection; ``run()`` takes the stream pair's transport over and returns when
    the connection is closed."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handler: FrameHandler,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_inflight: int = 64,
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
        self._stream: asyncio.StreamReader | None = reader  # until run() takes the transport over
        self._transport: asyncio.WriteTransport = writer.transport
        self._handler = handler
        # Until lift_frame_limit(), frames are held to initial_max_frame_bytes: Kafka's
        # sasl.server.max.receive.size bounds what an unauthenticated client can make it buffer.
        self._decoder = FrameDecoder(min(max_frame_bytes, initial_max_frame_bytes or max_frame_bytes))
        self._max_frame_bytes = max_frame_bytes
        self._free_slots = max_inflight  # responses that may still be outstanding
        self._idle_timeout = idle_timeout_s
        self._read_timeout = read_timeout_s
        self._loop = asyncio.get_running_loop()  # made inside the listener's callback, on its loop
        self._frame_started: float | None = None  # when the partial frame being read began
        self._last_activity = self._loop.time()
        self._waiting: deque[bytes] = deque()  # complete frames not started yet (ordering held)
        self._waiting_bytes = 0
        self._order: deque[Job] = deque()  # started requests whose answers are not yet written
        self._holder: Job | None = None  # the request holding ordering (not released yet)
        self._jobs: dict[asyncio.Task[None], Job] = {}  # requests still running
        self._reading = True  # False while this side paused the transport's reading
        self._write_paused = False  # the transport's buffer is over its high-water mark
        self._write_paused_at = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._pool = memory_pool
        self._reserved = 0  # bytes of the pool this connection holds for its partial frame
        self._pool_wait: asyncio.Task[None] | None = None
        self._draining = False  # a handler asked to close: nothing more is processed
        self._tls = writer.get_extra_info("sslcontext") is not None
        self._eof_holder: Job | None = None  # the request holding ordering when the EOF was last looked at
        self._ending = False  # the connection is over: run() is shutting it down
        self._end: asyncio.Future[None] = self._loop.create_future()
        self._lost: asyncio.Future[None] = self._loop.create_future()  # connection_lost came
        self._done = asyncio.Event()
        self._callbacks: list[CloseCallback] = []
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
        self._finish(reason)

    async def wait_closed(self) -> None:
        await self._done.wait()

    async def settle(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the requests in flight now to be answered and their
        answers handed to the socket: a stopping sidecar closes connections after this, so an
        answer that acquired records is written, not dropped by the close."""
        deadline = self._loop.time() + timeout
        pending = list(self._jobs)
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        while (self._order or self._write_paused) and not self.closed and self._loop.time() < deadline:
            await asyncio.sleep(0.005)

    async def run(self) -> None:
        """Serve until the peer disconnects, a protocol error occurs, or :meth:`close`."""
        log.debug("conn %d from %s: open", self.conn_id, self.peer)
        try:
            self._take_over()
            self._arm(self._last_activity + self._idle_timeout)
            await self._end
        finally:
            await self._shutdown()

    # --- the transport's callbacks -------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._ending or self._draining:
            return  # over, or a handler asked to close: read (so a peer's EOF is seen), not processed
        now = self._last_activity = self._loop.time()
        decoder = self._decoder
        try:
            frames = decoder.feed(data)
        except CloseConnection as exc:
            self._close_for(exc)
            return
        if not decoder.pending:
            self._frame_started = None
        elif frames or self._frame_started is None:
            self._frame_started = now
            self._arm(now + self._read_timeout)
        if self._pool is not None and decoder.partial_frame_bytes != self._reserved:
            self._reserve(decoder.partial_frame_bytes)
        if frames:
            if len(frames) == 1 and not self._waiting:
                self._start(frames[0])  # the usual case: one request, nothing waiting before it
            else:
                self._waiting.extend(frames)
                self._waiting_bytes += sum(map(len, frames))
                self._next()
        if not self._reading or self._waiting_bytes + decoder.buffered >= READ_AHEAD_BYTES:
            self._steer_reading()

    def eof_received(self) -> bool | None:
        """The peer closed its side. Requests it sent before that and that finish in their first
        step (a client that writes its requests and then shuts its side down) are still answered;
        the first one still being processed after its first step ends the connection at once."""
        self._after_eof()
        # Keep a plain socket open for those answers (the connection closes it); TLS closes here.
        return None if self._tls else True

    def _after_eof(self) -> None:
        if self._ending or self._end.done():
            return
        if self._holder is None and not self._waiting:
            self._finish("peer closed the connection")
        elif self._tls or self._holder is self._eof_holder:
            # Kafka mutes a channel while its request is processed; a slow request (a state write,
            # an admin call forwarded to a busy backend) would then pin a connection whose client
            # is gone. The request itself is not cancelled (it may be changing state): it
            # finishes unobserved.
            self._finish("peer closed the connection while a request was in flight")
        else:  # look again once the holder's first step has run (it was scheduled before this)
            self._eof_holder = self._holder
            self._loop.call_soon(self._after_eof)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._lost.done():
            self._lost.set_result(None)
        self._finish(f"read failed: {exc}" if exc is not None else "peer closed the connection")

    def pause_writing(self) -> None:
        self._write_paused = True
        self._write_paused_at = self._loop.time()
        # A peer that never reads would pin its responses forever: bound the wait like an idle
        # connection (Kafka's connections.max.idle.ms).
        self._arm(self._write_paused_at + self._idle_timeout)

    def resume_writing(self) -> None:
        self._write_paused = False
        self._last_activity = self._loop.time()
        self._flush()

    # --- requests -----------------------------------------------------------------------------

    def _may_start(self) -> bool:
        """Whether a request may start now: nothing holds ordering, a response slot is free."""
        return self._holder is None and self._free_slots > 0 and not self._draining and not self._ending

    def _next(self) -> None:
        """Start waiting requests while one may start."""
        waiting = self._waiting
        while waiting and self._may_start():
            frame = waiting.popleft()
            self._waiting_bytes -= len(frame)
            self._start(frame)

    def _unblocked(self) -> None:
        """Ordering released or a response slot freed: waiting requests and reading may go on."""
        if self._waiting:
            self._next()
        if not self._reading:
            self._steer_reading()

    def _start(self, frame: bytes) -> None:
        if not self._may_start():
            self._waiting.append(frame)
            self._waiting_bytes += len(frame)
            return
        self._free_slots -= 1
        job = Job(self._released)
        self._holder = job  # Kafka-style: the next request only after this one releases
        self._order.append(job)
        job.task = task = self._loop.create_task(self._process(frame, job))
        self._jobs[task] = job

    def _released(self, job: Job) -> None:
        if self._holder is job:
            self._holder = None
            self._unblocked()

    async def _process(self, frame: bytes, job: Job) -> None:
        try:
            job.response = await self._handler(self, frame, job.release)
        except CloseConnection as exc:
            job.error = exc
            self._draining = True
            # Requests ahead of this one can only be parked long polls (they released ordering).
            # Kafka closes at once; waiting for them could hold the connection for MaxWaitMs.
            for task in list(self._jobs):
                if task is not job.task:
                    task.cancel()
        except asyncio.CancelledError as exc:
            job.error = exc
            raise
        except Exception as exc:  # the connection closes, with the traceback in its log line
            job.error = exc
        finally:
            self._jobs.pop(job.task, None)  # type: ignore[arg-type]
            job.finished = True
            job.release()
            self._flush()

    def _flush(self) -> None:
        """Hand finished answers to the socket in request order, from the first one on."""
        order = self._order
        while order and not self._write_paused and not self._ending:
            job = order[0]
            if not job.finished:
                return
            order.popleft()
            if job.error is not None:
                self._close_after(job.error)
                return
            out = job.response
            if out:
                self._send(out)
                self._last_activity = self._loop.time()
            self._free_slots += 1
            if self._free_slots == 1:  # it was zero
                self._unblocked()

    def _send(self, out: Response) -> None:
        """Hand one answer to the transport (it sends what the socket takes, buffers the rest)."""
        if isinstance(out, FramePieces):  # without joining them (wire/gather.py)
            _METRICS.record_bytes_copied += write_pieces(self._transport, out)
        else:
            self._transport.write(out)

    # --- reading: backpressure, memory, deadlines ---------------------------------------------

    def _steer_reading(self) -> None:
        """Pause the transport's reading while requests cannot start and enough is read ahead,
        or while the memory pool cannot hold the frame being received; resume it otherwise."""
        blocked = (self._holder is not None or not self._free_slots) and (
            self._waiting_bytes + self._decoder.buffered >= READ_AHEAD_BYTES)
        want = not (self._ending or blocked or self._pool_wait is not None)
        if want == self._reading:
            return
        self._reading = want
        if want:
            if self._decoder.pending:  # the wait does not count against request.read.timeout.ms
                self._frame_started = self._loop.time()
            self._transport.resume_reading()  # type: ignore[attr-defined]
        else:
            self._transport.pause_reading()  # type: ignore[attr-defined]

    def _reserve(self, size: int) -> None:
        """Hold ``size`` bytes of the memory pool for the frame being received
        (queued.max.request.bytes); while the pool cannot, the socket is not read."""
        pool = self._pool
        assert pool is not None
        if size < self._reserved:
            pool.release(self._reserved - size)
            self._reserved = size
        elif pool.try_acquire(size - self._reserved):
            self._reserved = size
        elif self._pool_wait is None:
            self._pool_wait = self._loop.create_task(self._wait_for_pool(size))
            self._steer_reading()

    async def _wait_for_pool(self, size: int) -> None:
        assert self._pool is not None
        await self._pool.acquire(size - self._reserved)
        self._reserved = size
        self._pool_wait = None
        self._steer_reading()

    def _arm(self, when: float) -> None:
        """One timer per connection, armed for the earliest deadline; when it fires before the
        deadline has come (activity moved it on) it is armed again — no timer per read."""
        if self._ending:
            return  # a timer after the close would keep the connection alive until it fired
        if self._timer is not None:
            if self._timer_at <= when:
                return
            self._timer.cancel()
        self._timer, self._timer_at = self._loop.call_at(when, self._on_timer), when

    def _on_timer(self) -> None:
        self._timer = None
        if self._ending:
            return
        now = self._loop.time()
        if self._write_paused:
            if now >= self._write_paused_at + self._idle_timeout:
                self._finish("peer did not read its responses within connections.max.idle.ms")
                closing.log("TimedOut", logging.WARNING, "conn %d from %s: closing: %s", self.conn_id,
                            self.peer, self.close_reason)
                return
            self._arm(self._write_paused_at + self._idle_timeout)
        elif self._frame_started is not None and self._reading:
            if now >= self._frame_started + self._read_timeout:
                self._close_for(TimedOut("no complete request within request.read.timeout.ms"))
                return
            self._arm(self._frame_started + self._read_timeout)
        elif self._order or self._jobs or self._waiting or not self._reading:
            self._arm(now + self._idle_timeout)  # in flight (a long poll): not idle
        elif now >= self._last_activity + self._idle_timeout:
            self._close_for(TimedOut("no complete request within connections.max.idle.ms"))
        else:
            self._arm(self._last_activity + self._idle_timeout)

    # --- ending -------------------------------------------------------------------------------

    def _take_over(self) -> None:
        """Become the transport's protocol, with what the stream had read already."""
        stream, self._stream = self._stream, None
        assert stream is not None
        # The stream's state is read from its attributes: asyncio offers no call that hands over
        # its buffer without awaiting (stable from Python 3.8 to 3.13).
        buffered, eof, failed = bytes(stream._buffer), stream._eof, stream._exception  # type: ignore[attr-defined]
        stream._buffer.clear()  # type: ignore[attr-defined]
        transport = self._transport
        transport.set_protocol(self)
        if stream._paused:  # type: ignore[attr-defined]
            transport.resume_reading()  # type: ignore[attr-defined]
        if failed is not None:
            self._finish(f"read failed: {failed}")
            return
        if buffered:
            self.data_received(buffered)
        if eof:
            self.eof_received()
        elif transport.is_closing():
            self._finish("peer closed the connection")

    def _close_for(self, exc: CloseConnection) -> None:
        self._finish(str(exc))
        closing.log(type(exc).__name__, logging.WARNING, "conn %d from %s: closing: %s",
                    self.conn_id, self.peer, exc)

    def _close_after(self, error: BaseException) -> None:
        """End the connection for the first answer in order that is an error."""
        if isinstance(error, CloseAfterResponse):
            self._finish(str(error))
            log.debug("conn %d from %s: closing after the response: %s", self.conn_id, self.peer, error)
            if error.response:
                self._transport.write(error.response)  # the close below flushes it first
        elif isinstance(error, CloseConnection):
            self._close_for(error)
        elif isinstance(error, asyncio.CancelledError):
            self._finish("closing: a parked request was cancelled")  # see _process
        else:
            self._finish("handler failed")
            log.error("conn %d from %s: handler failed, closing", self.conn_id, self.peer, exc_info=error)

    def _finish(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        if not self._end.done():
            self._end.set_result(None)

    async def _shutdown(self) -> None:
        if self._ending:
            return
        self._ending = True
        if self.close_reason is None:
            self.close_reason = "closed by server"
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # Parked requests (they released ordering: long polls) are cancelled; a request still
        # being processed may be changing state, so it finishes on its own, unobserved.
        parked = [task for task, job in self._jobs.items() if job.released]
        if self._pool_wait is not None:
            parked.append(self._pool_wait)
        for task in parked:
            task.cancel()
        await asyncio.gather(*parked, return_exceptions=True)
        if self._pool is not None:
            self._pool.release(self._reserved)
            self._reserved = 0
        transport = self._transport
        transport.close()
        try:
            # close() flushes what is buffered first; a peer that does not read would make that
            # wait forever, so after a short grace the socket is aborted.
            await asyncio.wait_for(asyncio.shield(self._lost), _CLOSE_GRACE_S)
        except TimeoutError:
            transport.abort()
        log.debug("conn %d from %s: closed (%s)", self.conn_id, self.peer, self.close_reason)
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            await _run_callback(self, callback)
        self._done.set()


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
