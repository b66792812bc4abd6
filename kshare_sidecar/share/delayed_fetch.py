"""One ShareFetch's acquisition: Kafka's DelayedShareFetch.

Why a module of its own: this is the fetch half of the hot path — try to acquire from every
session partition (rotated), and when nothing was acquired, park until a share-partition changes
(an ack, a release, a lock expiry wakes ``Slot.waiters``), the backend has new data (a
long-poll), or MaxWaitMs passes. Sessions and acknowledgements stay in :mod:`.manager`, the
backend reads in :mod:`.log_reader`. The work per request is per partition and per log batch,
never per record: the acquired batches are views of the backend's buffer
(``backend/batches.batch_views``), never copied: the answer writes them to the socket as they are.
"""

from __future__ import annotations

import asyncio
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ..backend.batches import batch_views
from ..backend.types import BatchInfo
from ..metrics import STATS as _METRICS
from ..protocol.types import TopicIdPartition
from .engine.sessions import ShareSession, ShareSessionCache
from .engine.types import AcquiredRecords, AcquireMode
from . import key_order as keyorder
from .log_reader import ShareLogReader, _Budget
from .cache import PartitionError, SharePartitionCache, Slot


@dataclass
class PartitionOut:
    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    ack_error: ErrorCode | None = None  # None: the partition carried no acks
    ack_message: str | None = None
    #: the acquired batches' bytes in log order: views of the backend's buffers (or ``bytes``), never joined
    records: list[bytes | memoryview] = field(default_factory=list)
    acquired: list[AcquiredRecords] = field(default_factory=list)


@dataclass
class FetchParams:
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52_428_800
    max_records: int = 500
    batch_size: int = 500
    mode: int = AcquireMode.BATCH_OPTIMIZED


class DelayedShareFetch:
    """The acquisition for one ShareFetch request, from its first try to its answer or deadline."""

    __slots__ = (
        "budget",
        "clock",
        "deadline_ms",
        "group_id",
        "isolation",
        "member_id",
        "params",
        "partitions",
        "read_committed",
        "reader",
        "session",
        "sessions",
        "skip",
    )

    def __init__(self, session: ShareSession, group_id: str, member_id: str, params: FetchParams, *,
                 sessions: ShareSessionCache, partitions: SharePartitionCache, reader: ShareLogReader,
                 read_committed: bool, clock: Callable[[], int],
                 skip: AbstractSet[TopicIdPartition] = frozenset()) -> None:
        """``clock``: the sidecar's monotonic milliseconds (timeutil.Clock, handed down from app.py),
        on which MaxWaitMs runs out."""
        self.session = session
        self.group_id = group_id
        self.member_id = member_id
        self.params = params
        self.sessions = sessions
        self.partitions = partitions
        self.reader = reader
        self.read_committed = read_committed
        self.isolation = 1 if read_committed else 0
        self.skip = skip  # partitions answered TOPIC_AUTHORIZATION_FAILED instead
        self.clock = clock
        self.deadline_ms = clock() + params.max_wait_ms
        self.budget = _Budget(params.max_records, params.max_bytes)

    async def run(self, on_park: Callable[[], None] | None = None) -> dict[TopicIdPartition, PartitionOut]:
        """Acquire until MinBytes is met, MaxRecords is used up, a partition fails or the time is up.
        ``on_park`` is called once, just before the first wait: only waiting is left, so the
        connection's next request may run (wire.Connection.release_ordering)."""
        params, budget = self.params, self.budget
        out: dict[TopicIdPartition, PartitionOut] = {}
        while True:
            if self.sessions.get(self.session.key) is not self.session:
                return out  # closed while parked (TCP disconnect, epoch -1): acquire nothing for it
            slots = await self._session_slots(out)
            for slot in slots:
                if budget.records <= 0 or budget.bytes <= 0:
                    break
                tp = (uuid.UUID(slot.key.topic_id), slot.key.partition)
                try:
                    got = await self._acquire(slot)
                except PartitionError as exc:
                    _fail(out, tp, exc)
                    continue
                if got is not None:
                    records, acquired = got
                    part = out.setdefault(tp, PartitionOut(*tp))
                    part.records += records  # views, not bytes: nothing is copied
                    part.acquired += acquired
            acquired_bytes = params.max_bytes - budget.bytes
            remaining_ms = self.deadline_ms - self.clock()
            if any(p.error != ErrorCode.none for p in out.values()) or remaining_ms <= 0 or \
                    (acquired_bytes and acquired_bytes >= max(params.min_bytes, 1)) or budget.records <= 0 or \
                    self.partitions.quiescing:
                return out
            if on_park is not None:  # only waiting is left: let the connection's next request run
                on_park()
                on_park = None
            await self._wait(slots, remaining_ms)

    async def _session_slots(self, out: dict[TopicIdPartition, PartitionOut]) -> list[Slot]:
        """The session's share-partitions, rotated so every partition gets its turn first (each
        round asks again: a share-partition may be loaded meanwhile); lookup errors go into ``out``."""
        session, group_id, slot_for = self.session, self.group_id, self.partitions.slot_for
        tps = sorted(session.partitions - self.skip)
        if not tps:
            return []
        start = session.rotation % len(tps)
        session.rotation = start + 1
        unloaded = [tp for tp in tps if self.partitions.loaded(group_id, *tp) is None]
        if len(unloaded) > 1:
            # loaded side by side, not one after another: each load is a state read (a claim
            # written) and an offset lookup at the backend, and a member's first fetch after a
            # restart or takeover lists all its partitions (100 took seconds one by one). Errors
            # are answered by the loop below, which asks again.
            await asyncio.gather(*(slot_for(group_id, *tp) for tp in unloaded), return_exceptions=True)
        slots: list[Slot] = []
        for tp in tps[start:] + tps[:start]:
            try:
                slots.append(await slot_for(group_id, *tp))
            except PartitionError as exc:
                _fail(out, tp, exc)
        return slots

    async def _acquire(self, slot: Slot) -> tuple[list[memoryview], list[AcquiredRecords]] | None:
        """Acquire whole batches of one share-partition from its next fetch offset; the views of
        exactly the acquired batches, unchanged, with the acquired ranges."""
        sp = slot.partition
        if not sp.can_acquire() or not self.partitions.serving or self.partitions.quiescing:
            return None
        params, budget = self.params, self.budget
        ext = getattr(sp, "ext", None)  # ExtendedSharePartition: groups using kshare's extensions
        key_ordering = ext is not None and ext.key_ordering
        async with slot.fetch_lock:  # members of one share-partition read the log one at a time
            # Under key ordering an acquisition may find only records whose keys are in flight
            # (held back, nothing delivered): the next batches are tried at once, not after a park
            # and a wake-up each, up to a bound that keeps one request from holding the loop long.
            for _ in range(_KEY_ORDER_TRIES if key_ordering else 1):
                offset = sp.next_fetch_offset()
                if offset is None:
                    return None
                # records a lock expiry or a release made available go out again once that is written
                if offset < sp.end_offset and (slot.unsaved or slot.dirty) and \
                        not await self.partitions.made_durable(slot):
                    return None
                result = await self.reader.read(slot, offset, self.isolation, budget)
                if result is None or slot.dead or not self.partitions.serving:
                    return None  # given up or past the lease while reading (share/cache.py)
                batches = _within_bytes(_acquirable(result.batches, offset, sp.speo + sp.free_locks), budget.bytes,
                                        first=budget.bytes == params.max_bytes)
                if not batches:
                    return None
                acquired = sp.acquire(self.member_id, batches,  # BatchInfo: (base, last, producer, txn, control, ...)
                                      budget.records, params.batch_size, mode=params.mode, fetch_offset=offset,
                                      aborted_transactions=result.aborted_transactions if self.read_committed else None)
                if not acquired or not key_ordering:
                    break
                acquired = await keyorder.order(self.reader.backend, slot, self.member_id, acquired, result, batches)
                spared = getattr(sp, "spared", 0)
                if spared:
                    slot.wake_acquirers()  # heads left for the other members: their parked fetches can take them
                # tried again only when everything went into holds: heads beyond this member's
                # share are the others' (trying again would acquire and give back the same ones)
                if acquired or spared or slot.dead or not sp.can_acquire():
                    break
        if not acquired or result is None:
            return None
        slot.wake_acquirers()  # more may be there: the next parked fetch looks (it waits for the lock)
        self.reader.read_ahead(slot, result, self.isolation)
        self.partitions.track(slot)
        records = _slice(result.records, batches, acquired)
        n = sum(a.last_offset - a.first_offset + 1 for a in acquired)
        size = sum(len(r) for r in records)
        budget.records -= n
        budget.bytes -= size
        _METRICS.delivered_records += n
        _METRICS.delivered_bytes += size
        _METRICS.count_delivered(slot.key.group_id, acquired)  # per group: the console, the alert rules
        return records, acquired

    async def _wait(self, slots: list[Slot], remaining_ms: int) -> None:
        """Park until a share-partition changes (ack, release, lock expiry), new data arrives in
        the backend, or the time is up (the event loop's timer sleeps; ``run`` decides by the clock
        whether the time is up)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        for slot in slots:
            slot.waiters[waiter] = None
        pending: list[asyncio.Future[None]] = [waiter]
        for slot in slots:
            offset = slot.partition.next_fetch_offset()
            # A long poll waits for records not yet in the log. Below its end the records are
            # there, and what keeps them (keys in flight, the window) changes only through the
            # share-partition, which wakes ``waiter``: a poll there would answer at once with bytes
            # already read, and the fetch would park and poll again. Dirty: nothing to read for.
            if offset is not None and offset >= slot.log_end and slot.partition.can_acquire() and not slot.dirty:
                poll = self.reader.long_poll(slot, offset, remaining_ms, self.isolation)
                pending.append(asyncio.ensure_future(poll))
        try:
            await asyncio.wait(pending, timeout=remaining_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in pending:
                if not fut.done():
                    fut.cancel()
            for fut in pending[1:]:
                if fut.done() and not fut.cancelled():
                    fut.exception()  # retrieved: a failed long-poll just ends the wait
            for slot in slots:
                slot.waiters.pop(waiter, None)


#: acquisitions one fetch tries in a row on a key-ordered share-partition while each finds only
#: records whose keys are in flight
_KEY_ORDER_TRIES = 16


def _fail(out: dict[TopicIdPartition, PartitionOut], tp: TopicIdPartition, exc: PartitionError) -> None:
    """``tp`` cannot serve this request. Records this request already acquired from it (before a
    wait, during which its leadership moved) are answered, not replaced by the error: their
    acquisition counted, so an answer without them would be a delivery no consumer saw. The
    client learns of the move at its next request."""
    part = out.get(tp)
    if part is not None and part.acquired:
        return
    out[tp] = PartitionOut(*tp, error=exc.code, message=str(exc))


def _acquirable(batches: Sequence[BatchInfo], offset: int, last: int) -> Sequence[BatchInfo]:
    """The batches of a read that hold offsets from ``offset`` up to ``last`` (the furthest the
    window may reach: SPEO + free locks), found by bisection. A read covers several windows; the
    rest cannot be acquired now, and walking them per ShareFetch (thousands with small producer
    batches) was the acquisition's largest cost."""
    lo = bisect_left(batches, offset, key=_last_offset)
    hi = bisect_right(batches, last, lo, key=_base_offset)
    return batches[lo:hi]


def _last_offset(b: BatchInfo) -> int:
    return b.last_offset


def _base_offset(b: BatchInfo) -> int:
    return b.base_offset


def _within_bytes(batches: Sequence[BatchInfo], room: int, *, first: bool) -> Sequence[BatchInfo]:
    """The leading batches that fit in the ShareFetch's remaining MaxBytes, whole batches only; the
    first batch of a response goes even when it is larger, so that a consumer always progresses
    (Kafka's rule for Fetch and ShareFetch). The backend read is larger than that (it reads at least
    64 KiB): without this a ShareFetch with a small MaxBytes acquired everything the read held.

    A read's batches lie end to end in its buffer, so the cut is a bisection on their ends (a walk
    over every batch of the read cost more than the rest of a small ShareFetch); where a read has a
    gap between batches the cut comes no later than the sizes allow."""
    if not batches:
        return batches
    n = bisect_right(batches, batches[0].start + room, key=_end)
    if n == 0 and first:
        n = 1
    return batches[:n]


def _end(b: BatchInfo) -> int:
    return b.end


def _slice(records: bytes | memoryview, batches: Sequence[BatchInfo], acquired: list[AcquiredRecords]
           ) -> list[memoryview]:
    """The fetched bytes of exactly the log batches that overlap an acquired range, unchanged
    (never decoded: batches are forwarded as the backend wrote them), as views. Choosing the
    batches is a merge of two sorted lists (per batch, not per record); cutting them out is
    ``backend/batches.batch_views``, the one implementation."""
    ranges = sorted((a.first_offset, a.last_offset) for a in acquired)
    chosen: list[BatchInfo] = []
    i = 0
    for b in batches:
        while i < len(ranges) and ranges[i][1] < b.base_offset:
            i += 1
        if i == len(ranges):
            break
        if ranges[i][0] <= b.last_offset:
            chosen.append(b)
    return batch_views(records, chosen)
