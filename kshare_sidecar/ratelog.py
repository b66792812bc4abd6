"""Rate-limited log lines for events a client (or an outage) can repeat at will.

Why: a hostile or broken client can send a malformed frame per millisecond; one WARNING each
would bury the lines an operator needs and fill the disk. Each *kind* of event may log ``burst``
lines per ``interval_s``; the rest are counted, and the next line that gets through says how many
were suppressed — nothing is dropped silently. The clock is injectable for tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    """``log(kind, level, msg, *args)``: at most ``burst`` lines of each kind per interval."""

    def __init__(self, logger: logging.Logger, *, interval_s: float = 60.0, burst: int = 5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval = interval_s
        self._burst = burst
        self._clock = clock
        self._windows: dict[str, tuple[float, int, int]] = {}  # kind -> (start, logged, suppressed)

    def log(self, kind: str, level: int, msg: str, *args: object) -> bool:
        """Log unless this kind is over its budget; returns whether a line was written."""
        now = self._clock()
        start, logged, suppressed = self._windows.get(kind, (now, 0, 0))
        if now - start >= self._interval:
            start, logged = now, 0
        if logged >= self._burst:
            self._windows[kind] = (start, logged, suppressed + 1)
            return False
        if suppressed:
            msg += " (%d similar lines suppressed)"
            args = (*args, suppressed)
        self._windows[kind] = (start, logged + 1, 0)
        if len(self._windows) > 1024:  # kinds are a small fixed set; never let them grow
            self._windows = {kind: self._windows[kind]}
        self._logger.log(level, msg, *args)
        return True

    def suppressed(self, kind: str) -> int:
        return self._windows.get(kind, (0.0, 0, 0))[2]


def backend_failures(logger: logging.Logger) -> RateLimitedLog:
    """For lines that repeat a backend failure per request: one per kind per minute. During an
    outage the backend's own health lines (backend/health.py) say how long it lasts."""
    return RateLimitedLog(logger, interval_s=60.0, burst=1)
