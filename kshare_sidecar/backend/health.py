"""Backend up/down, told to the operator in a handful of lines per outage.

Why: during an 18 s broker outage aiokafka's clients (the backend reader, one transactional
producer per state partition, the persister's consumer) each retry and log every failure — the
issue measured 17,296 ERROR lines ("Unable to update metadata" alone 5,775 times), which buries
the one line an operator needs. So:

* :class:`BackendHealth` (sans-I/O, clock injected) turns probe outcomes into lines: one WARNING
  when the backend becomes unreachable, a reminder every ``repeat_s`` (10 s, then every 60 s after
  the first minute) saying for how long, and one line when it is reachable again. It is what the
  ``kshare_backend_up`` gauge reads.
* :class:`AiokafkaLogGate` sits on the ``aiokafka`` logger: WARNING+ lines are deduplicated by
  message template (the first of each kind per ``window_s`` passes), and during an outage only
  the first ``outage_budget`` pass at all. Nothing disappears silently: the suppressed count is
  carried by the health lines ("… 5775 aiokafka log lines suppressed").
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any
from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaError

from .errors import BackendError

log = logging.getLogger("kshare.backend")

_AIOKAFKA = "aiokafka"


class AiokafkaLogGate(logging.Handler):
    """A handler on the ``aiokafka`` logger (which stops propagating) that forwards what passes
    through ``kshare.aiokafka`` (so the root handlers and levels apply unchanged)."""

    def __init__(self, *, window_s: float = 300.0, outage_budget: int = 2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(logging.DEBUG)
        self.window_s = window_s
        self.outage_budget = outage_budget
        self.clock = clock
        self.suppressed = 0  # since start
        self._seen: dict[tuple[str, str], float] = {}
        self._outage = False
        self._outage_passed = 0
        self._forward = logging.getLogger("kshare.aiokafka")

    def outage(self, active: bool) -> None:
        self._outage = active
        self._outage_passed = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            now = self.clock()
            key = (record.name, str(record.msg))
            last = self._seen.get(key)
            if self._outage and self._outage_passed >= self.outage_budget or \
                    last is not None and now - last < self.window_s:
                self.suppressed += 1
                return
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[key] = now
            if self._outage:
                self._outage_passed += 1
        self._forward.handle(record)


_GATE: AiokafkaLogGate | None = None


def aiokafka_gate() -> AiokafkaLogGate:
    """The process's gate, installed on first use (idempotent)."""
    global _GATE
    if _GATE is None:
        _GATE = AiokafkaLogGate()
        logger = logging.getLogger(_AIOKAFKA)
        logger.addHandler(_GATE)
        logger.propagate = False
    return _GATE


class BackendHealth:
    """Up/down from probe outcomes, with rate-limited, deduplicated lines (see module docstring)."""

    def __init__(self, *, gate: AiokafkaLogGate | None = None, repeat_s: float = 10.0,
                 slow_repeat_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.gate = gate
        self.repeat_s = repeat_s
        self.slow_repeat_s = slow_repeat_s
        self.clock = clock
        self.up = True
        self.outages = 0
        self.down_since: float | None = None
        self._last_line = 0.0
        self._suppressed_at_start = 0
        self.last_error: str | None = None

    def _suppressed(self) -> int:
        return (self.gate.suppressed if self.gate else 0) - self._suppressed_at_start

    def failed(self, error: str) -> None:
        now = self.clock()
        self.last_error = error
        if self.up:
            self.up = False
            self.outages += 1
            self.down_since = self._last_line = now
            self._suppressed_at_start = self.gate.suppressed if self.gate else 0
            if self.gate:
                self.gate.outage(True)
            log.warning("backend unreachable (%s), retrying", error)
            return
        assert self.down_since is not None
        down_for = now - self.down_since
        every = self.repeat_s if down_for < 60 else self.slow_repeat_s
        if now - self._last_line >= every:
            self._last_line = now
            log.warning("backend unreachable for %d s, retrying (%s; %d aiokafka log lines suppressed)",
                        down_for, error, self._suppressed())

    def succeeded(self) -> None:
        if self.up:
            return
        assert self.down_since is not None
        down_for = self.clock() - self.down_since
        suppressed = self._suppressed()
        self.up = True
        self.down_since = None
        if self.gate:
            self.gate.outage(False)
        log.warning("backend reachable again after %.0f s (%d aiokafka log lines suppressed during the outage)",
                    down_for, suppressed)


async def watch_health(probe: Callable[[], Awaitable[Any]], health: BackendHealth, lease_of: Callable[[], Any],
                       drop: Callable[[str], None], *, up_every_s: float, down_every_s: float) -> None:
    """Probe the backend for ever and keep ``health`` current; a single sidecar's lease (if any)
    lapses on failed probes and is renewed from an answered probe's send time, and each of those
    two changes closes every backend connection (``drop``: a cut connection resumes only at TCP's
    next retransmission, tens of seconds after a long cut; a new one at once)."""
    while True:
        await asyncio.sleep(up_every_s if health.up else down_every_s)
        sent = time.monotonic()
        try:
            await asyncio.wait_for(probe(), 5.0)
        except (BackendError, KafkaError, OSError, asyncio.TimeoutError) as exc:
            health.failed(str(exc) or type(exc).__name__)
            lease = lease_of()
            if lease is not None and lease.check():
                drop("this sidecar's lease lapsed (the backend stopped answering)")
        else:
            health.succeeded()
            lease = lease_of()
            if lease is not None and lease.renew(sent):
                drop("the backend answers again after this sidecar's lease lapsed")


def drop_connections(client: Any) -> int:
    """Close every connection of an aiokafka client (``AIOKafkaClient``; None: nothing): requests in
    flight fail at once instead of at their timeout, and the next request connects afresh.

    Why: a cut link leaves TCP connections that neither end closes; requests on them wait out
    ``request.timeout.ms`` (30 s: a share fetch reading from the backend held the client's
    acknowledgements behind it that long), and once the link is back the stalled connection
    recovers only at TCP's next retransmission, seconds to a minute away. A cluster member whose
    lease lapsed (cluster/lease.py) drops them all."""
    conns = getattr(client, "_conns", None)
    if not conns:
        return 0
    closed = 0
    for conn in list(conns.values()):
        try:
            conn.close()
            closed += 1
        except Exception:  # noqa: BLE001 - closing is best effort; the next request reconnects
            log.debug("closing a backend connection failed", exc_info=True)
    return closed


class Suspension:
    """A backend that must not be waited for: every request fails at once until resumed.

    A cluster member whose lease lapsed (cluster/lease.py) serves nothing, and must not keep its
    clients waiting out backend timeouts. Closing the connections fails the requests on them, but
    not a request waiting to connect (aiokafka waits up to its request timeout, and a silent
    firewall answers no SYN): a share fetch's read held that long kept the client's next requests
    waiting behind it. So requests run as tasks this cancels."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._inflight: set[asyncio.Future[Any]] = set()

    def suspend(self, reason: str, client: Any) -> int:
        self.reason = reason
        for task in list(self._inflight):
            task.cancel()
        return drop_connections(client)

    def resume(self) -> None:
        self.reason = None

    async def abortable(self, request: Any) -> Any:
        """Await ``request`` (a coroutine); :class:`ConnectionAbortedError` when a suspension ends it."""
        task = asyncio.ensure_future(request)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.reason is not None and task.cancelled() and not (current and current.cancelling()):
                raise ConnectionAbortedError(self.reason) from None
            raise
