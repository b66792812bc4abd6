"""Reading user-topic bytes for share-partitions: the batch cache, window-sized backend reads,
read-ahead and the long-polls a parked ShareFetch waits on.

Why a module of its own: this is the part of the fetch path that talks to the backend (Kafka's
ReplicaManager.readFromLog, as seen from DelayedShareFetch), long-lived across requests (the
cache, the read-ahead tasks), while :mod:`.delayed_fetch` holds one request's acquisition and
:mod:`.manager` the sessions and acknowledgements. Nothing here decodes a record: reads return the
backend's raw bytes with parsed batch headers (``backend/batches.py``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..backend.errors import UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, BackendError, UnknownTopicError
from ..backend.types import FetchResult
from ..metrics import STATS as _METRICS
from ..ratelog import backend_failures
from .cache import PartitionError, Slot
from .read_cache import BatchCache

if TYPE_CHECKING:
    from ..backend.backend import Backend

log = logging.getLogger("kshare.shares")
_backend_failures = backend_failures(log)  # one line a minute: the outage itself is logged once (backend/health.py)

#: A log partition in the cache, keyed by topic *id*: a deleted and recreated topic reuses
#: offsets under the same name.
LogKey = tuple[str, int]

#: Bounds of one backend read: at least a useful chunk, never more than the client's budget.
_MIN_READ, _FIRST_READ = 64 * 1024, 1024 * 1024
#: Windows read beyond the free room when reading at the window's end (see _read_size).
_EXTRA_WINDOWS = 2
#: a backend read's errors that can mean "the topic was deleted"
_GONE = frozenset({UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID})


@dataclass(slots=True)
class _Budget:
    """What the client can still take in this ShareFetch (MaxRecords, MaxBytes), counted down."""

    records: int
    bytes: int


class ShareLogReader:
    """The backend reads of the fetch path, shared by every ShareFetch of this sidecar."""

    def __init__(self, backend: Backend, *, cache_bytes: int = 64 * 1024 * 1024, read_ahead: bool = False) -> None:
        self.backend = backend
        self.cache = BatchCache(cache_bytes)
        self.read_ahead_enabled = read_ahead  # read.ahead.enable
        #: log key -> its read-ahead in flight (read_cache.py): the task, the offset it reads from
        #: and its isolation level
        self._reading_ahead: dict[LogKey, tuple[asyncio.Task[None], int, int]] = {}

    async def read(self, slot: Slot, offset: int, isolation: int, budget: _Budget) -> FetchResult | None:
        """The bytes at ``offset``: the cached read covering it, else one backend Fetch sized by
        :func:`_read_size` and capped by this partition's share of the cache. None when the log
        start moved past ``offset`` (OFFSET_OUT_OF_RANGE; the share-partition archived what it
        lost). A backend failure raises :class:`PartitionError` with a code share clients retry.
        Called under the slot's fetch lock.

        A cached read that ends before what this ShareFetch may acquire (the window's room and the
        client's MaxRecords) is **extended** with the next bytes (:meth:`_extend`): Kafka reads a
        share-partition's whole share of MaxBytes at once, so its acquisitions fill the window;
        serving only the cached part cut a poll short wherever a cached read ended (through the
        sidecar, 20,000-record polls on 2 partitions averaged ~13.5k)."""
        log_key = (slot.key.topic_id, slot.key.partition)
        result = self.cache.get(log_key, offset, isolation) or await self._landed(log_key, offset, isolation)
        if result is None:
            return await self._fetch(slot, log_key, offset, isolation, budget)
        if _short_of(slot, result, offset, budget, isolation):
            return await self._extend(slot, log_key, result, offset, isolation, budget)
        return result

    async def _fetch(self, slot: Slot, log_key: LogKey, offset: int, isolation: int,
                     budget: _Budget) -> FetchResult | None:
        """One backend read at ``offset`` into the cache (see :meth:`read`)."""
        sp = slot.partition
        try:
            share = self.cache.max_bytes // (len(self.cache) + 1)  # read-ahead: the cache's share
            size = _in_whole_batches(min(_read_size(slot, offset, budget), share), slot.bytes_per_batch)
            result = await self.backend.fetch(slot.topic, slot.key.partition, offset, max_bytes=size,
                                              max_wait_ms=0, isolation_level=isolation)
        except BackendError as exc:
            _backend_failures.log("read", logging.WARNING, "backend read failed for group=%s partition=%s-%d: "
                                  "%s", slot.key.group_id, slot.topic, slot.key.partition, exc)
            if exc.code in _GONE:
                await self._forget_if_deleted(slot.topic)
            raise PartitionError(_share_error(exc), str(exc)) from exc
        _METRICS.high_watermarks[slot.key] = result.high_watermark  # metrics: lag
        _saw_log_end(slot, result, isolation)
        sp.move_log_start(result.log_start_offset)
        if result.error_code:  # OFFSET_OUT_OF_RANGE: the log start moved past us; archived above
            self.cache.drop(log_key)
            return None
        self.cache.put(log_key, isolation, result)
        batches = result.batches
        if batches:
            count = batches[-1].last_offset - batches[0].base_offset + 1
            sample = len(result.records) / max(count, 1)
            slot.bytes_per_record = _ewma(slot.bytes_per_record, sample)
            per_batch = (batches[-1].end - batches[0].start) / len(batches)  # whole batches only
            slot.bytes_per_batch = _ewma(slot.bytes_per_batch, per_batch)
        return result

    async def _forget_if_deleted(self, topic: str) -> None:
        """The backend no longer knows the topic (deleted): re-read it now, so that the topic cache
        drops it and acknowledgements of its records get UNKNOWN_TOPIC_ID at once, as from Kafka
        (``SharePartitionCache.slot_for``), instead of after the cache's age."""
        refresh = getattr(self.backend, "refresh_topics", None)
        if refresh is None:
            return
        try:
            await refresh([topic])
        except BackendError as exc:
            log.debug("re-reading topic %s after a failed read: %s", topic, exc)

    async def _extend(self, slot: Slot, log_key: LogKey, cached: FetchResult, offset: int, isolation: int,
                      budget: _Budget) -> FetchResult | None:
        """``cached`` joined with the bytes after its end: a read-ahead entry when one starts
        there, else a backend read from there (sized as a read at the window's end). Bytes are read
        once: the extension starts after the last whole batch of ``cached``. The joined read
        replaces the cached one without its batches before the window's start (SPSO), which nothing
        can acquire any more, so the entry stays about one window plus one read long. When the
        backend read fails the cached read is served as it is; when the log start moved past its
        end, nothing of it is left to acquire (None, as :meth:`read`)."""
        after = cached.batches[-1].last_offset + 1
        # a read-ahead starting there (promoted), landed or still in flight
        more = self.cache.get(log_key, after, isolation) or await self._landed(log_key, after, isolation)
        if more is None:
            try:
                more = await self._fetch(slot, log_key, after, isolation, budget)
            except PartitionError:  # logged by _fetch; the acquisition goes on with what is cached
                return cached
            if more is None:  # OFFSET_OUT_OF_RANGE: the share-partition archived what was lost
                return None
        joined = _join(cached, more, min(offset, slot.partition.spso))
        self.cache.put(log_key, isolation, joined)
        return joined

    def read_ahead(self, slot: Slot, result: FetchResult, isolation: int) -> None:
        """Read the next window's bytes in the background when less than half a window is cached
        beyond the window's end (see read_cache.py): the ShareFetch that acknowledges the current
        window then acquires from the cache instead of waiting for a backend round trip."""
        if not self.read_ahead_enabled:
            return
        log_key = (slot.key.topic_id, slot.key.partition)
        sp = slot.partition
        end = result.batches[-1].last_offset
        cap = sp.in_flight + sp.free_locks
        if end + 1 >= result.high_watermark or not slot.bytes_per_record or end - sp.speo >= cap // 2 \
                or log_key in self._reading_ahead or self.cache.has_ahead(log_key, isolation):
            return
        size = max(_MIN_READ, min(int(cap * slot.bytes_per_record * 1.25),
                                  self.cache.max_bytes // (len(self.cache) + 1)))
        size = _in_whole_batches(size, slot.bytes_per_batch)
        if self.cache.bytes + max(size, int(slot.bytes_per_batch)) > self.cache.max_bytes:
            return  # a read-ahead never evicts: bytes read and dropped unused are read amplification
        task = asyncio.ensure_future(self._read_ahead_into_cache(slot, log_key, end + 1, size, isolation))
        self._reading_ahead[log_key] = (task, end + 1, isolation)
        task.add_done_callback(lambda _t: self._reading_ahead.pop(log_key, None))

    async def _landed(self, log_key: LogKey, offset: int, isolation: int) -> FetchResult | None:
        """The cached read at ``offset`` once the read-ahead in flight from at or before it has
        landed; None when there is none (or it failed, or stopped short of ``offset``). The
        acquisition that needs those bytes arrives while they are on their way whenever a
        ShareFetch's round trip is shorter than a backend read — at 100 B records most of them
        did — and reading them again cost a second backend round trip and the same bytes twice."""
        pending = self._reading_ahead.get(log_key)
        if pending is None or pending[2] != isolation or pending[1] > offset:
            return None
        await asyncio.wait((pending[0],))  # not cancelled with this request: the read is shared
        return self.cache.get(log_key, offset, isolation)

    async def _read_ahead_into_cache(self, slot: Slot, log_key: LogKey, offset: int, size: int,
                                     isolation: int) -> None:
        try:
            result = await self.backend.fetch(slot.topic, slot.key.partition, offset, max_bytes=size,
                                              max_wait_ms=0, isolation_level=isolation)
        except BackendError as exc:  # the acquisition that needs these bytes reads them itself
            log.debug("read-ahead of %s-%d at %d failed: %s", slot.topic, slot.key.partition, offset, exc)
            return
        _saw_log_end(slot, result, isolation)
        if result.batches and not result.error_code:
            self.cache.put(log_key, isolation, result, ahead=True)

    async def long_poll(self, slot: Slot, offset: int, poll_ms: int, isolation: int) -> None:
        """Wait in the backend for data at ``offset``. What it returns (at least one whole batch)
        goes into the cache, where the acquisition it wakes will find it: read once, not twice."""
        try:
            result = await self.backend.fetch(slot.topic, slot.key.partition, offset, max_bytes=1,
                                              max_wait_ms=poll_ms, isolation_level=isolation)
        except BackendError as exc:
            if exc.code in _GONE:
                await self._forget_if_deleted(slot.topic)
            raise
        _saw_log_end(slot, result, isolation)
        if result.batches and not result.error_code:
            self.cache.put((slot.key.topic_id, slot.key.partition), isolation, result)

    async def close(self) -> None:
        """Stop background reads (the backend is closed after this)."""
        tasks = [task for task, _, _ in self._reading_ahead.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _log_end(result: FetchResult, isolation: int) -> int:
    """Where the readable log ended when ``result`` was read: the LSO for read_committed, else the
    high watermark."""
    return result.last_stable_offset if isolation else result.high_watermark


def _saw_log_end(slot: Slot, result: FetchResult, isolation: int) -> None:
    if result.high_watermark >= 0:  # an answer without one (a partition error) says nothing of the log
        slot.log_end = _log_end(result, isolation)


def _short_of(slot: Slot, result: FetchResult, offset: int, budget: _Budget, isolation: int) -> bool:
    """Whether a cached read ends before the last offset this ShareFetch could acquire at
    ``offset`` — the end of the share-partition's window room, or MaxRecords on — while the log
    went on past it when it was read (the high watermark, or the LSO for read_committed)."""
    last = result.batches[-1].last_offset
    if last + 1 >= _log_end(result, isolation):
        return False
    sp = slot.partition
    room_last = sp.speo + sp.free_locks  # the highest offset the window may reach now
    return last < min(room_last, offset + budget.records - 1)


def _join(cached: FetchResult, more: FetchResult, keep_from: int) -> FetchResult:
    """One read: the batches of ``cached`` that hold offsets from ``keep_from`` on, then the
    batches of ``more`` after them (byte positions moved into the new buffer); log end and log
    start as ``more`` saw them, the aborted transactions of both."""
    keep = [b for b in cached.batches if b.last_offset >= keep_from]
    if not keep:
        return more
    last = keep[-1].last_offset
    tail = [b for b in more.batches if b.base_offset > last]
    head_from = keep[0].start
    batches = [b._replace(start=b.start - head_from, end=b.end - head_from) for b in keep]
    parts = [memoryview(cached.records)[head_from:keep[-1].end]]
    if tail:
        shift = batches[-1].end - tail[0].start
        batches += [b._replace(start=b.start + shift, end=b.end + shift) for b in tail]
        parts.append(memoryview(more.records)[tail[0].start:tail[-1].end])
    aborted = tuple(sorted(set(cached.aborted_transactions) | set(more.aborted_transactions),
                           key=lambda a: (a[1], a[0])))
    joined = b"".join(parts)
    _METRICS.record_bytes_copied += len(joined)  # the one copy of record bytes left on the read path
    return FetchResult(records=joined, batches=tuple(batches), high_watermark=more.high_watermark,
                       last_stable_offset=more.last_stable_offset, log_start_offset=more.log_start_offset,
                       aborted_transactions=aborted)


def _read_size(slot: Slot, offset: int, budget: _Budget) -> int:
    """Bytes to ask the backend for: what this share-partition can still acquire plus a bounded
    read-ahead (and, by the caller, no more than its share of the read cache), never what the
    client could take. A read sized by the client's MaxBytes (~50 MiB) fetches far more than the
    in-flight window (max_record_locks) lets anyone acquire; the rest is evicted from the cache
    before it is used and read again — read amplification. So: free window room (or
    plus the re-available records, when reading behind the window's end) × the partition's observed
    bytes per record, with 25% headroom; Kafka returns at least one whole batch whatever we ask.

    Why ``_EXTRA_WINDOWS`` more when reading at the window's end: a Fetch cuts the last batch at
    the byte limit, and the cut batch is read again by the next read — on average half a batch
    per read. With 1 MB producer batches and a 2 MiB window that was 28% of all bytes read (1M
    run: 1.28–1.32). Reading three windows makes the cut a third as large relative to the read,
    and the bytes beyond this window wait in the cache for the acquisitions after the next acks
    (cache hits instead of a round trip on the ShareFetch path). The caller's cap (the cache's
    share per partition) keeps all partitions' reads resident together."""
    sp = slot.partition
    behind_end = sp.speo + 1 - offset if offset <= sp.speo else 0  # re-available records to re-read
    records = behind_end + sp.free_locks
    if not slot.bytes_per_record:
        return max(_MIN_READ, min(budget.bytes, _FIRST_READ))
    wanted = min(budget.bytes, int(records * slot.bytes_per_record * 1.25))
    if not behind_end:
        wanted += int(_EXTRA_WINDOWS * (sp.in_flight + sp.free_locks) * slot.bytes_per_record)
    return max(_MIN_READ, wanted)


def _ewma(seen: float, sample: float) -> float:
    """A read's sample folded into what earlier reads saw (the first sample as it is)."""
    return sample if not seen else 0.7 * seen + 0.3 * sample


def _in_whole_batches(size: int, batch_bytes: float) -> int:
    """``size`` as a read that cuts little of a batch. Kafka returns the whole batches that fit in
    a read's max_bytes and the start of the next one, cut; the next read fetches that batch again
    from its start, so the cut part is read twice — most when a read is one to two batches long
    (100-byte records in ~0.5 MB producer batches: 1.4–1.5 bytes read per byte delivered). So a
    read of about one batch asks for one byte (Kafka then returns the first batch, whole: nothing
    cut), and a longer one for a whole number of batches of the size seen so far, plus an eighth
    of one."""
    if batch_bytes <= 0:
        return size
    batches = round(size / batch_bytes)
    if batches <= 1:
        return 1
    return int(batches * batch_bytes + batch_bytes / 8)


def _share_error(exc: BackendError) -> ErrorCode:
    """Only codes share clients expect at partition level: unknown topic, or "leader unavailable"
    (which makes them refresh metadata and retry) for anything transient."""
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.not_leader_or_follower
