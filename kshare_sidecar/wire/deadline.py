"""Reads bounded in time by one timer per connection (`ReadDeadline`).

``asyncio.timeout_at`` around every read makes a timer handle per read and asks for the running
loop and the current task each time (on Python 3.11 each of those is a ``getpid()`` system call);
a connection reads once per request. Here one timer is armed for the earliest deadline and, when
it fires before the deadline has come (activity moved it on), re-armed for the new one: a read
costs no timer handle, and the timer fires about once per timeout period, not once per read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class ReadDeadline:
    """Bounds the reads of one task: ``await read(coro_factory, deadline)`` raises TimeoutError
    when ``deadline`` (loop time) passes first. ``task()`` names the reading task (it is cancelled
    to stop the read, then un-cancelled, as ``asyncio.timeout`` does)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, task: Callable[[], asyncio.Task[None] | None]) -> None:
        self._loop = loop
        self._task = task
        self._timer: asyncio.TimerHandle | None = None
        self._when = 0.0
        self._deadline = 0.0
        self._reading = False
        self._expired = False

    async def read(self, reader: asyncio.StreamReader, size: int, deadline: float) -> bytes:
        if self._timer is None or self._when > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._when = self._loop.call_at(deadline, self._fire), deadline
        self._deadline = deadline
        self._reading = True
        try:
            return await reader.read(size)
        except asyncio.CancelledError:
            task = self._task()
            if self._expired and task is not None and task.uncancel() == 0:
                self._expired = False
                raise TimeoutError from None
            raise
        finally:
            self._reading = False

    def cancel(self) -> None:
        """Stop the timer (the connection closes: the timer would hold it until it fires)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        task = self._task()
        if not self._reading or task is None:
            return  # the next read arms it again
        if self._loop.time() < self._deadline:
            self._timer, self._when = self._loop.call_at(self._deadline, self._fire), self._deadline
            return
        self._expired = True
        task.cancel()
