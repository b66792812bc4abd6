"""Re-reads of aged topic metadata by name: one request per topic however many callers find it
aged, and (``stale_ok``) the cached answer now with the re-read behind it.

400 heartbeats a second over a few topics otherwise sent one Metadata request each for every
topic whose entry had just aged, until the first answer came (benchmarks/scale.py); and a group
coordinator that waits a backend round trip every ``metadata_max_age_s`` delays heartbeats.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from .metadata import TopicCache

log = logging.getLogger(__name__)


class NameRefresher:
    """``read(names)`` re-reads names into ``cache``; ``max_age()`` is the age past which an entry
    is re-read (read on every use: tests and the backend's own settings may change it)."""

    def __init__(self, cache: TopicCache, read: Callable[[tuple[str, ...]], Awaitable[None]],
                 max_age: Callable[[], float]) -> None:
        self._cache = cache
        self._read = read
        self._max_age = max_age
        #: topic name -> the Metadata request re-reading it now
        self._inflight: dict[str, asyncio.Future[None]] = {}
        self._background: set[asyncio.Task[None]] = set()  # stale_ok re-reads

    def stale_ok(self, wanted: list[str]) -> bool:
        """True when every name in ``wanted`` is cached (answer from the cache); aged ones are then
        re-read in the background. False: some name is not cached — the caller reads now."""
        by_name = self._cache.by_name
        if not all(n in by_name for n in wanted):
            return False
        now, max_age = time.monotonic(), self._max_age()
        aged = tuple(n for n in wanted if now - by_name[n].at > max_age and n not in self._inflight)
        if aged:
            task = asyncio.ensure_future(self.refresh(aged))
            self._background.add(task)
            task.add_done_callback(self._done)
        return True

    def aged(self, wanted: list[str]) -> tuple[str, ...]:
        """The names of ``wanted`` not cached or older than ``max_age()``."""
        now, max_age, by_name = time.monotonic(), self._max_age(), self._cache.by_name
        return tuple(n for n in wanted if n not in by_name or now - by_name[n].at > max_age)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the next caller reads again
            log.debug("background metadata re-read failed: %r", task.exception())

    async def refresh(self, names: tuple[str, ...]) -> None:
        """Re-read ``names``; a cached (aged) name another caller is re-reading right now waits for
        that answer instead of sending its own request. A name not cached at all is always read
        afresh (a topic created a moment ago must show up at once)."""
        loop = asyncio.get_running_loop()
        while True:
            inflight = self._inflight
            cached = self._cache.by_name
            waits = {inflight[n] for n in names if n in inflight and n in cached}
            todo = tuple(n for n in names if n not in inflight or n not in cached)
            if todo:
                fut: asyncio.Future[None] = loop.create_future()
                for n in todo:
                    inflight.setdefault(n, fut)
                try:
                    await self._read(todo)
                    fut.set_result(None)
                except asyncio.CancelledError:
                    fut.cancel()  # its waiters read for themselves
                    raise
                except Exception as exc:
                    fut.set_exception(exc)
                    fut.exception()  # retrieved: each waiter re-raises it
                    raise
                finally:
                    for n in todo:
                        if inflight.get(n) is fut:
                            del inflight[n]
            again = False
            for w in waits:
                try:
                    await asyncio.shield(w)
                except asyncio.CancelledError:
                    if not w.cancelled():
                        raise  # this caller was cancelled
                    again = True  # the reader was: read again
            if not again:
                return
            names = tuple(n for n in names if n not in todo)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
