"""A loaded share-partition (`Slot`) and the dropping of idle ones from memory.

A sidecar may hold 100,000 share-partitions, most of them idle (docs/capacity.md). A slot makes
its locks and its set of parked fetches only when first used, and a share-partition that nobody
asked for in ``share.partition.idle.eviction.ms`` and that holds nothing but durable state is
dropped: its next fetch or acknowledgement loads it from the persisted snapshot again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ..persist.model import SharePartitionKey
from .engine.partition import SharePartition

log = logging.getLogger("kshare.partitions")


@dataclass(slots=True, eq=False)
class Slot:
    """One loaded share-partition with its coordination primitives.

    A sidecar may hold 100,000 of them, most idle: the locks and the set of parked fetches are
    made when first used (an idle share-partition held ~1.2 KB, half of it these)."""

    key: SharePartitionKey
    topic: str
    partition: SharePartition
    dead: bool = False  # retired after its durable state was found to differ: never written again
    #: Log bytes per record seen in this partition's reads (sizes the next read).
    bytes_per_record: float = 0.0
    #: Log bytes per batch seen in them (reads are sized in whole batches: log_reader._in_whole_batches).
    bytes_per_batch: float = 0.0
    #: where the readable log ended at the last read (the high watermark, or the LSO under
    #: read_committed); -1 before any: a parked fetch waits in the backend only for offsets from here on
    log_end: int = -1
    #: the manager's clock when a request last asked for it (idle eviction)
    last_used: int = 0
    #: writes of its current state queued with nobody awaiting them (lock expiry, a release)
    unsaved: int = 0
    #: its durable start offset is still unset (no state written since the SPSO was resolved)
    start_unset: bool = False
    #: a write of its current state failed: memory is ahead of the durable state until one succeeds
    dirty: bool = False
    _write_lock: asyncio.Lock | None = None
    _fetch_lock: asyncio.Lock | None = None
    #: parked fetches, oldest first (a dict: ordered, O(1) removal)
    _waiters: dict[asyncio.Future, None] | None = None

    @property
    def write_lock(self) -> asyncio.Lock:
        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        return self._write_lock

    @property
    def fetch_lock(self) -> asyncio.Lock:
        if self._fetch_lock is None:
            self._fetch_lock = asyncio.Lock()
        return self._fetch_lock

    @property
    def waiters(self) -> dict[asyncio.Future, None]:
        if self._waiters is None:
            self._waiters = {}
        return self._waiters

    def busy(self) -> bool:
        """A request is using it (a state write, a backend read, a parked fetch), or a write of its
        state is still queued or failed."""
        return bool(self.unsaved or self.dirty or (self._write_lock is not None and self._write_lock.locked())
                    or (self._fetch_lock is not None and self._fetch_lock.locked()) or self._waiters)

    def wake(self) -> None:
        """Every parked fetch looks again (a change of leadership, limits or the log: any of them
        may now acquire, or must answer)."""
        waiters = self._waiters
        if not waiters:
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        waiters.clear()

    def wake_acquirers(self) -> None:
        """Records may have become acquirable (an acknowledgement, a fetch that took some, heads
        a fetch left to others): wake the oldest parked fetch, if anything can be acquired.

        One, not all: a woken fetch may take every record made available (they go out whole, up
        to its MaxRecords), and the fetches behind it would wait for the same fetch lock to find
        nothing. Waking every parked fetch on every acknowledgement made each ShareFetch of a
        partition shared by many members run about three acquisitions that found nothing (key
        ordering, where most of the window waits for its keys). A fetch that acquires wakes the
        next one while more can be acquired (``DelayedShareFetch._acquire``); one left parked
        still answers at its MaxWaitMs."""
        waiters = self._waiters
        if not waiters or not self.partition.can_acquire():
            return
        while waiters:
            fut = next(iter(waiters))
            del waiters[fut]
            if not fut.done():  # one that gave up (cancelled) is passed over
                fut.set_result(None)
                return


class IdleEviction:
    """Mixed into :class:`~kshare_sidecar.share.cache.SharePartitionCache`."""

    # the manager's (declared for the type checker)
    slots: dict[SharePartitionKey, Slot]
    drop_slot: Callable[[SharePartitionKey], Slot]  # MetricWatch.drop_slot
    evicted: dict[SharePartitionKey, int | None]
    idle_eviction_ms: int
    clock: Callable[[], int]
    _loading: dict[SharePartitionKey, asyncio.Task]

    async def _eviction_loop(self) -> None:
        period = min(60.0, max(1.0, self.idle_eviction_ms / 4000))
        while True:
            await asyncio.sleep(period)
            try:
                self.evict_idle()
            except Exception:  # noqa: BLE001 - the next pass tries again
                log.exception("evicting idle share-partitions failed; continuing")

    def loading(self, group_id: str, topic_id: uuid.UUID, partition: int) -> bool:
        """Whether a load of this share-partition is under way (a fetch started it), or it was
        loaded and dropped while idle (it loads again as if it had stayed)."""
        key = SharePartitionKey(group_id, str(topic_id), partition)
        return key in self._loading or key in self.evicted

    def evict_idle(self, now: int | None = None) -> int:
        """Drop the loaded share-partitions nobody asked for in ``idle_eviction_ms`` that hold
        nothing but durable state: nothing acquired (no lock, no hold), no request using them, no
        state write queued. Their next request loads them from the persisted snapshot, which then
        equals what memory held. Returns how many were dropped."""
        if self.idle_eviction_ms <= 0:
            return 0
        limit = (self.clock() if now is None else now) - self.idle_eviction_ms
        gone = [slot for slot in self.slots.values()
                if slot.last_used <= limit and not slot.busy() and slot.partition.quiet()
                and slot.key not in self._loading]
        for slot in gone:
            self.drop_slot(slot.key)
            slot.dead = True  # a reference someone still holds writes nothing
            self.evicted[slot.key] = slot.partition.spso if slot.start_unset else None
        if gone:
            log.debug("%d idle share-partitions dropped from memory (%d loaded)", len(gone), len(self.slots))
        return len(gone)
