"""Which loaded share-partitions the per-share-partition metrics look at (`MetricWatch`, part of
`SharePartitionCache`, share/cache.py).

A sidecar may hold 100,000 share-partitions, most of them idle. A /metrics scrape that walked
every one of them ran in the metrics server's thread for about a second at that size, and while
a thread computes it holds the GIL: the event loop crawled meanwhile, and every scrape showed as
hundreds of milliseconds on the heartbeats of thousands of members (benchmarks/scale.py). A
share-partition's in-flight count and lag only change after a request asked for it — a fetch,
an acknowledgement, a release, a load — so those mark it here, on the event loop; a scrape looks
at the marked ones only, and asks the loop to forget those it found idle unless they were marked
again meanwhile (so nothing that changed after the scrape looked is dropped).
"""

from __future__ import annotations

import asyncio

from ..persist.model import SharePartitionKey
from .slot import Slot


class MetricWatch:
    """Mixed into :class:`~kshare_sidecar.share.cache.SharePartitionCache`; ``_init_watch`` in its constructor."""

    slots: dict[SharePartitionKey, Slot]

    def _init_watch(self) -> None:
        #: key -> the mark's sequence number (its latest use)
        self.watched: dict[SharePartitionKey, int] = {}
        self._watch_seq = 0
        self._watch_loop: asyncio.AbstractEventLoop | None = None

    def watch(self, slot: Slot) -> None:
        """The share-partition was asked for (event loop only): the metrics look at it again."""
        if self._watch_loop is None:
            self._watch_loop = asyncio.get_running_loop()
        self._watch_seq += 1
        self.watched[slot.key] = self._watch_seq

    def drop_slot(self, key: SharePartitionKey) -> Slot:
        """Remove a loaded share-partition (evicted, retired, unloaded, led elsewhere) with its
        mark, so the marks stay bounded by what is loaded even when nothing scrapes; KeyError when
        it is not loaded."""
        slot = self.slots.pop(key)
        self.watched.pop(key, None)
        return slot

    def watched_slots(self) -> list[tuple[SharePartitionKey, Slot | None, int]]:
        """The marked share-partitions, from any thread: (key, slot or None once dropped, mark)."""
        slots = self.slots
        return [(key, slots.get(key), seq) for key, seq in list(self.watched.items())]

    def forget_idle(self, seen: list[tuple[SharePartitionKey, int]]) -> None:
        """From any thread: stop looking at these (found idle or dropped) unless marked again
        since ``seen`` was taken; applied on the event loop, which alone changes ``watched``."""
        loop = self._watch_loop
        if not seen or loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._forget, seen)
        except RuntimeError:  # the loop closed meanwhile: nothing to keep up to date
            pass

    def _forget(self, seen: list[tuple[SharePartitionKey, int]]) -> None:
        watched = self.watched
        for key, seq in seen:
            if watched.get(key) == seq:
                del watched[key]
