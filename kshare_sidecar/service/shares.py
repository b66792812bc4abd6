"""ShareFetch and ShareAcknowledge: share sessions, piggybacked acks, long-poll acquisition.

Order inside one request, as Kafka does it: session epoch rules first, then acknowledgements
(applied on arrival and answered only after the durable write), then — unless the request is
ack-only or closes the session — records are acquired, waiting up to MaxWaitMs when there are
none. An empty answer is never sent early: librdkafka refetches at once and would spin.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ..log.errors import BackendError, UnknownTopicError
from ..log.batches import slice_batches
from ..log.types import BatchInfo, FetchResult
from ..metrics import STATS as _METRICS  # kshare metrics (issue 7)
from ..protocol.types import TopicIdPartition
from ..ratelog import backend_failures
from ..share.sessions import SessionError, ShareSession, ShareSessionCache
from ..share.types import AcquiredRecords, AcquireMode
from . import keyorder
from .partitions import PartitionError, PendingAcks, SharePartitionManager, Slot
from ..share.acks import parse_ack_batches
from .readcache import BatchCache  # noqa: F401 - re-exported

log = logging.getLogger("kshare.shares")
_backend_failures = backend_failures(log)  # one line a minute: the outage itself is logged once (log/health.py)

#: ``readable(topic_name) -> bool``: may the requesting principal READ the topic (authorization on)
Readable = Callable[[str], bool]


@dataclass
class PartitionOut:
    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    ack_error: ErrorCode | None = None  # None: the partition carried no acks
    ack_message: str | None = None
    records: bytes = b""
    acquired: list[AcquiredRecords] = field(default_factory=list)


@dataclass
class ShareOut:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    lock_timeout_ms: int = 0
    partitions: list[PartitionOut] = field(default_factory=list)


@dataclass
class FetchParams:
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52_428_800
    max_records: int = 500
    batch_size: int = 500
    mode: int = AcquireMode.BATCH_OPTIMIZED


class ShareService:
    def __init__(self, *, sessions: ShareSessionCache, partitions: SharePartitionManager, backend,
                 group_config, cache_bytes: int = 64 * 1024 * 1024, read_ahead: bool = False) -> None:
        self.sessions = sessions
        self.partitions = partitions
        self.backend = backend
        self.group_config = group_config
        self.cache = BatchCache(cache_bytes)
        self.read_ahead = read_ahead  # read.ahead.enable
        self._rotation: dict[tuple[str, str], int] = {}
        self._reading_ahead: dict[tuple, asyncio.Task] = {}  # log key -> its read-ahead (readcache.py)

    # -- entry points ------------------------------------------------------------------------
    async def share_fetch(self, *, conn_id: int, group_id: str, member_id: str, epoch: int, params: FetchParams,
                          topics: list[tuple[uuid.UUID, int, list]], forgotten: list[TopicIdPartition],
                          is_renew: bool = False, on_park=None, readable: Readable | None = None) -> ShareOut:
        _METRICS.share_fetch_requests += 1  # metrics (issue 7)
        key = (group_id, member_id)
        lock_ms = int(self.group_config(group_id)["share.record.lock.duration.ms"])
        acks = _merge_acks(topics)
        if not member_id or len(member_id) > 36:
            _METRICS.share_fetch_failed += 1  # metrics (issue 7)
            return ShareOut(ErrorCode.invalid_request, "MemberId must be 1..36 characters")
        try:
            if epoch == 0:
                if acks:
                    return ShareOut(ErrorCode.invalid_request, "acknowledgements are not allowed when opening a "
                                    "share session (epoch 0)")
                session = await self._open(key, conn_id, params.max_wait_ms)
            else:
                session = self._existing_session(key, epoch, conn_id)
        except SessionError as exc:
            _METRICS.share_fetch_failed += 1  # metrics (issue 7)
            return ShareOut(exc.code, str(exc))
        for topic_id, p, _ in topics:
            session.partitions.add((topic_id, p))
        for tp in forgotten:
            session.partitions.discard(tp)
        # Kafka keeps partitions of topics the principal may not READ in the session and answers
        # them TOPIC_AUTHORIZATION_FAILED on every fetch; their acks are not applied.
        denied = await self._denied(readable, set(session.partitions) | set(acks))
        out: dict[TopicIdPartition, PartitionOut] = {}
        t0 = time.monotonic()
        # The durable write of the piggybacked acks and the acquisition of new records run side by
        # side: the response waits for both, so a fetch costs max(write, read), not their sum.
        allowed_acks = {tp: b for tp, b in acks.items() if tp not in denied}
        ack_task = asyncio.ensure_future(self._acknowledge(group_id, member_id, allowed_acks,
                                                           allow_renew=is_renew)) if allowed_acks else None
        fetched: dict[TopicIdPartition, PartitionOut] = {}
        try:
            if epoch != -1 and not is_renew and params.max_records > 0 and params.max_bytes > 0 \
                    and session.partitions - denied:
                fetched = await self._fetch(session, group_id, member_id, params, on_park, skip=denied)
        finally:
            ack_results = await ack_task if ack_task is not None else {}
        if fetched and self.sessions.get(key) is None:
            # The connection closed while this fetch was acquiring (between its awaits): nobody
            # will receive these records, and connection_closed has already released the member's
            # others. Release them too, or a delivery would be counted that never happened.
            self.partitions.release_member(group_id, member_id, fetched)
        t1 = time.monotonic()
        for tp, code in ack_results.items():
            out[tp] = PartitionOut(tp[0], tp[1], ack_error=code)
        for tp in denied & set(acks):
            out[tp] = PartitionOut(tp[0], tp[1], ack_error=ErrorCode.topic_authorization_failed)
        if epoch == -1:
            self._close(session)
            return ShareOut(lock_timeout_ms=lock_ms, partitions=list(out.values()))
        if not is_renew:
            for tp in denied & session.partitions:
                fetched[tp] = PartitionOut(tp[0], tp[1], error=ErrorCode.topic_authorization_failed)
        for tp, part in fetched.items():
            if tp in out:
                part.ack_error = out[tp].ack_error
            out[tp] = part
        if log.isEnabledFor(logging.DEBUG):
            log.debug("ShareFetch group=%s member=%s: acks and fetch %.1f ms (%d ack partitions), %d records",
                      group_id, member_id, (t1 - t0) * 1000, len(acks),
                      sum(a.last_offset - a.first_offset + 1 for p in out.values() for a in p.acquired))
        return ShareOut(lock_timeout_ms=lock_ms, partitions=list(out.values()))

    async def share_acknowledge(self, *, conn_id: int, group_id: str, member_id: str, epoch: int,
                                topics: list[tuple[uuid.UUID, int, list]], is_renew: bool = False,
                                readable: Readable | None = None) -> ShareOut:
        _METRICS.share_ack_requests += 1  # metrics (issue 7)
        key = (group_id, member_id)
        lock_ms = int(self.group_config(group_id)["share.record.lock.duration.ms"])
        try:
            if epoch == 0:
                raise SessionError(ErrorCode.invalid_share_session_epoch,
                                   "ShareAcknowledge cannot open a share session (epoch 0)")
            session = self._existing_session(key, epoch, conn_id)
        except SessionError as exc:
            _METRICS.share_ack_failed += 1  # metrics (issue 7)
            return ShareOut(exc.code, str(exc))
        acks = _merge_acks(topics)
        denied = await self._denied(readable, set(acks))
        allowed = {tp: b for tp, b in acks.items() if tp not in denied}
        results = await self._acknowledge(group_id, member_id, allowed, allow_renew=is_renew) if allowed else {}
        results |= {tp: ErrorCode.topic_authorization_failed for tp in denied}
        if epoch == -1:
            self._close(session)
        return ShareOut(lock_timeout_ms=lock_ms,
                        partitions=[PartitionOut(tp[0], tp[1], error=code) for tp, code in results.items()])

    def connection_closed(self, conn_id: int) -> None:
        """TCP disconnect: close the connection's share sessions, releasing their records at once."""
        for session in self.sessions.close_connection(conn_id):
            self._rotation.pop(session.key, None)
            released = self.partitions.release_member(session.key[0], session.key[1], session.partitions)
            log.info("connection %d closed: share session of group=%s member=%s released %d records",
                     conn_id, session.key[0], session.key[1], released)

    async def _denied(self, readable: Readable | None, tps: set[TopicIdPartition]) -> set[TopicIdPartition]:
        """The partitions whose topic the principal may not READ (unknown ids are left to the
        UNKNOWN_TOPIC_ID answer, as Kafka does)."""
        if readable is None or not tps:
            return set()
        denied: set[TopicIdPartition] = set()
        for topic_id in {t for t, _ in tps}:
            info = await self.backend.resolve_topic_id(topic_id)
            if info is not None and not readable(info.name):
                denied |= {tp for tp in tps if tp[0] == topic_id}
        return denied

    # -- sessions ----------------------------------------------------------------------------
    async def _open(self, key, conn_id: int, max_wait_ms: int) -> ShareSession:
        try:
            session, _replaced = self.sessions.open(key, conn_id)
        except SessionError:
            await asyncio.sleep(max_wait_ms / 1000)  # Kafka holds the request before refusing
            session, _replaced = self.sessions.open(key, conn_id)  # raises again if still full
        return session

    def _existing_session(self, key, epoch: int, conn_id: int) -> ShareSession:
        """Epoch -1 names the session to close; any other epoch must be the session's next one."""
        if epoch == -1:
            session = self.sessions.get(key)
            if session is None:
                raise SessionError(ErrorCode.share_session_not_found, f"no share session for member {key[1]}")
            return session
        return self.sessions.advance(key, epoch, conn_id)

    def _close(self, session: ShareSession) -> None:
        self.sessions.close(session.key)
        self._rotation.pop(session.key, None)
        self.partitions.release_member(session.key[0], session.key[1], session.partitions)

    # -- acknowledgements --------------------------------------------------------------------
    async def _acknowledge(self, group_id: str, member_id: str, acks: dict[TopicIdPartition, list],
                           *, allow_renew: bool) -> dict[TopicIdPartition, ErrorCode]:
        results: dict[TopicIdPartition, ErrorCode] = {}
        planned: list[tuple[Slot, PendingAcks]] = []
        for (topic_id, p), batches in acks.items():
            if isinstance(parse_ack_batches(batches, allow_renew=allow_renew), ErrorCode):
                results[(topic_id, p)] = ErrorCode.invalid_request  # Kafka validates batches first
                continue
            try:
                slot = await self._slot(group_id, topic_id, p, load=False)
            except PartitionError as exc:
                results[(topic_id, p)] = exc.code
                continue
            planned.append((slot, PendingAcks(member_id, batches, allow_renew)))
        if planned:
            by_key = {slot.key: (uuid.UUID(slot.key.topic_id), slot.key.partition) for slot, _ in planned}
            for key, code in (await self.partitions.persist_plans(planned)).items():
                results[by_key[key]] = code
                if code != ErrorCode.none:
                    log.info("acknowledgement rejected with %s: group=%s member=%s partition=%s-%d",
                             code.name, group_id, member_id, key.topic_id, key.partition)
        return results

    async def _slot(self, group_id: str, topic_id: uuid.UUID, partition: int, *, load: bool = True) -> Slot:
        """The share-partition, loaded on demand for a fetch. An acknowledgement (``load=False``)
        does not load one: like Kafka's SharePartitionManager, which answers UNKNOWN_TOPIC_OR_PARTITION
        for a share-partition nothing was fetched from (not in its cache; found by the long parity
        run — kshare loaded it and answered INVALID_RECORD_STATE)."""
        slot = self.partitions.loaded(group_id, topic_id, partition)
        if slot is not None:
            return slot
        info = await self.backend.resolve_topic_id(topic_id)
        if info is None:
            raise PartitionError(ErrorCode.unknown_topic_id, f"unknown topic id {topic_id}")
        if not 0 <= partition < info.partitions:
            raise PartitionError(ErrorCode.unknown_topic_or_partition, f"{info.name} has no partition {partition}")
        if not self.partitions.leads(topic_id, partition):  # a cluster: the leader's answer comes first
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"partition {info.name}-{partition} is led by another sidecar")
        if not load and not self.partitions.loading(group_id, topic_id, partition):
            raise PartitionError(ErrorCode.unknown_topic_or_partition, f"share-partition {info.name}-{partition} of "
                                 f"group {group_id} is not loaded: nothing was fetched from it")
        return await self.partitions.get(group_id, topic_id, partition, info.name)

    # -- fetching ----------------------------------------------------------------------------
    async def _fetch(self, session: ShareSession, group_id: str, member_id: str,
                     params: FetchParams, on_park=None, skip: set[TopicIdPartition] = frozenset()
                     ) -> dict[TopicIdPartition, PartitionOut]:
        deadline = time.monotonic() + params.max_wait_ms / 1000
        out: dict[TopicIdPartition, PartitionOut] = {}
        budget = _Budget(params.max_records, params.max_bytes)
        read_committed = self.group_config(group_id)["share.isolation.level"] == "read_committed"
        while True:
            if self.sessions.get(session.key) is not session:
                return out  # closed while parked (TCP disconnect, epoch -1): acquire nothing for it
            slots = await self._session_slots(session, group_id, out, skip)
            for slot in slots:
                if budget.records <= 0 or budget.bytes <= 0:
                    break
                tp = (uuid.UUID(slot.key.topic_id), slot.key.partition)
                try:
                    got = await self._acquire(slot, member_id, params, budget, read_committed)
                except PartitionError as exc:
                    out[tp] = PartitionOut(*tp, error=exc.code, message=str(exc))
                    continue
                if got is not None:
                    records, acquired = got
                    part = out.setdefault(tp, PartitionOut(*tp))
                    part.records += records
                    part.acquired += acquired
            acquired_bytes = params.max_bytes - budget.bytes
            remaining = deadline - time.monotonic()
            if any(p.error != ErrorCode.none for p in out.values()) or remaining <= 0 or \
                    (acquired_bytes and acquired_bytes >= max(params.min_bytes, 1)) or budget.records <= 0:
                return out
            if on_park is not None:  # only waiting is left: let the connection's next request run
                on_park()
                on_park = None
            await self._wait(slots, remaining, read_committed)

    async def _session_slots(self, session: ShareSession, group_id: str,
                             out: dict[TopicIdPartition, PartitionOut],
                             skip: set[TopicIdPartition] = frozenset()) -> list[Slot]:
        """The session's share-partitions, rotated so every partition gets its turn first."""
        tps = sorted(session.partitions - skip)
        if not tps:
            return []
        start = self._rotation.get(session.key, 0) % len(tps)
        self._rotation[session.key] = start + 1
        slots = []
        for tp in tps[start:] + tps[:start]:
            try:
                slots.append(await self._slot(group_id, *tp))
            except PartitionError as exc:
                out[tp] = PartitionOut(*tp, error=exc.code, message=str(exc))
        return slots

    async def _acquire(self, slot: Slot, member_id: str, params: FetchParams, budget: _Budget,
                       read_committed: bool) -> tuple[bytes, list[AcquiredRecords]] | None:
        sp = slot.partition
        if not sp.can_acquire():
            return None
        async with slot.fetch_lock:  # members of one share-partition read the log one at a time
            offset = sp.next_fetch_offset()
            if offset is None:
                return None
            isolation = 1 if read_committed else 0
            # keyed by topic *id*: a deleted and recreated topic reuses offsets under the same name
            log_key = (slot.key.topic_id, slot.key.partition)
            result = self.cache.get(log_key, offset, isolation)
            if result is None:
                try:
                    share = self.cache.max_bytes // (len(self.cache) + 1)  # read-ahead: the cache's share
                    result = await self.backend.fetch(slot.topic, slot.key.partition, offset,
                                                      max_bytes=min(_read_size(slot, offset, budget), share),
                                                      max_wait_ms=0, isolation_level=isolation)
                except BackendError as exc:
                    _backend_failures.log("read", logging.WARNING, "backend read failed for group=%s partition=%s-%d: "
                                          "%s", slot.key.group_id, slot.topic, slot.key.partition, exc)
                    raise PartitionError(_share_error(exc), str(exc)) from exc
                _METRICS.high_watermarks[slot.key] = result.high_watermark  # metrics (issue 7): lag
                sp.move_log_start(result.log_start_offset)
                if result.error_code:  # OFFSET_OUT_OF_RANGE: the log start moved past us; archived above
                    self.cache.drop(log_key)
                    return None
                self.cache.put(log_key, isolation, result)
                if result.batches:
                    count = result.batches[-1].last_offset - result.batches[0].base_offset + 1
                    sample = len(result.records) / max(count, 1)
                    slot.bytes_per_record = sample if not slot.bytes_per_record else \
                        0.7 * slot.bytes_per_record + 0.3 * sample
            batches = [b for b in result.batches if b.last_offset >= offset]
            if not batches:
                return None
            acquired = sp.acquire(member_id, [(b.base_offset, b.last_offset, b.producer_id, b.is_transactional,
                                               b.is_control) for b in batches],
                                  budget.records, params.batch_size, mode=params.mode, fetch_offset=offset,
                                  aborted_transactions=result.aborted_transactions if read_committed else None)
            if acquired and getattr(sp, "ext", None) is not None and sp.ext.key_ordering:
                acquired = await keyorder.order(self.backend, slot, member_id, acquired, result, batches)
        if not acquired:
            return None
        self._read_ahead(slot, log_key, result, isolation)
        self.partitions.track(slot)
        records = _slice(result.records, batches, acquired)
        n = sum(a.last_offset - a.first_offset + 1 for a in acquired)
        budget.records -= n
        budget.bytes -= len(records)
        _METRICS.delivered_records += n
        _METRICS.delivered_bytes += len(records)
        return records, acquired

    def _read_ahead(self, slot: Slot, log_key: tuple, result: FetchResult, isolation: int) -> None:
        """Read the next window's bytes in the background when less than half a window is cached
        beyond the window's end (see readcache.py): the ShareFetch that acknowledges the current
        window then acquires from the cache instead of waiting for a backend round trip."""
        if not self.read_ahead:
            return
        sp = slot.partition
        end = result.batches[-1].last_offset
        cap = sp.in_flight + sp.free_locks
        if end + 1 >= result.high_watermark or not slot.bytes_per_record or end - sp.speo >= cap // 2 \
                or log_key in self._reading_ahead or self.cache.has_ahead(log_key, isolation):
            return
        size = max(_MIN_READ, min(int(cap * slot.bytes_per_record * 1.25),
                                  self.cache.max_bytes // (len(self.cache) + 1)))
        if self.cache.bytes + size > self.cache.max_bytes:
            return  # a read-ahead never evicts: bytes read and dropped unused are read amplification
        task = asyncio.ensure_future(self._read_ahead_into_cache(slot, log_key, end + 1, size, isolation))
        self._reading_ahead[log_key] = task
        task.add_done_callback(lambda _t: self._reading_ahead.pop(log_key, None))

    async def _read_ahead_into_cache(self, slot: Slot, log_key: tuple, offset: int, size: int, isolation: int) -> None:
        try:
            result = await self.backend.fetch(slot.topic, slot.key.partition, offset, max_bytes=size,
                                              max_wait_ms=0, isolation_level=isolation)
        except BackendError as exc:  # the acquisition that needs these bytes reads them itself
            log.debug("read-ahead of %s-%d at %d failed: %s", slot.topic, slot.key.partition, offset, exc)
            return
        if result.batches and not result.error_code:
            self.cache.put(log_key, isolation, result, ahead=True)

    async def close(self) -> None:
        """Stop background reads (the backend is closed after this)."""
        tasks = list(self._reading_ahead.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _wait(self, slots: list[Slot], remaining_s: float, read_committed: bool) -> None:
        """Park until a share-partition changes (ack, release, lock expiry), new data arrives in
        the backend, or the time is up."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        for slot in slots:
            slot.waiters.add(waiter)
        pending = [waiter]
        poll_ms = int(remaining_s * 1000)
        isolation = 1 if read_committed else 0
        for slot in slots:
            offset = slot.partition.next_fetch_offset()
            if offset is not None and slot.partition.can_acquire():
                pending.append(asyncio.ensure_future(self._long_poll(slot, offset, poll_ms, isolation)))
        try:
            await asyncio.wait(pending, timeout=remaining_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in pending:
                if not fut.done():
                    fut.cancel()
            for fut in pending[1:]:
                if fut.done() and not fut.cancelled():
                    fut.exception()  # retrieved: a failed long-poll just ends the wait
            for slot in slots:
                slot.waiters.discard(waiter)

    async def _long_poll(self, slot: Slot, offset: int, poll_ms: int, isolation: int) -> None:
        """Wait in the backend for data at ``offset``. What it returns (at least one whole batch)
        goes into the cache, where the acquisition it wakes will find it: read once, not twice."""
        result = await self.backend.fetch(slot.topic, slot.key.partition, offset, max_bytes=1,
                                          max_wait_ms=poll_ms, isolation_level=isolation)
        if result.batches and not result.error_code:
            self.cache.put((slot.key.topic_id, slot.key.partition), isolation, result)


#: Bounds of one backend read: at least a useful chunk, never more than the client's budget.
_MIN_READ, _FIRST_READ = 64 * 1024, 1024 * 1024
#: Windows read beyond the free room when reading at the window's end (issue 14, see _read_size).
_EXTRA_WINDOWS = 2


def _read_size(slot: Slot, offset: int, budget: _Budget) -> int:
    """Bytes to ask the backend for: what this share-partition can still acquire plus a bounded
    read-ahead (and, by the caller, no more than its share of the read cache), never what the
    client could take. A read sized by the client's MaxBytes (~50 MiB) fetches far more than the
    in-flight window (max_record_locks) lets anyone acquire; the rest is evicted from the cache
    before it is used and read again — read amplification (issue 14). So: free window room (or
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


@dataclass
class _Budget:
    records: int
    bytes: int


def _share_error(exc: BackendError) -> ErrorCode:
    """Only codes share clients expect at partition level: unknown topic, or "leader unavailable"
    (which makes them refresh metadata and retry) for anything transient."""
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.not_leader_or_follower


def _merge_acks(topics: Iterable[tuple[uuid.UUID, int, list]]) -> dict[TopicIdPartition, list]:
    """Clients may list one TopicId (and even one partition) more than once: merge, keep order."""
    acks: dict[TopicIdPartition, list] = {}
    for topic_id, p, batches in topics:
        if batches:
            acks.setdefault((topic_id, p), []).extend(batches)
    return acks


def _slice(records: bytes, batches: list[BatchInfo], acquired: list[AcquiredRecords]) -> bytes:
    """The fetched bytes of exactly the log batches that overlap an acquired range, unchanged
    (never decoded: batches are forwarded as the backend wrote them)."""
    ranges = sorted((a.first_offset, a.last_offset) for a in acquired)
    chosen, i = [], 0
    for b in batches:
        while i < len(ranges) and ranges[i][1] < b.base_offset:
            i += 1
        if i == len(ranges):
            break
        if ranges[i][0] <= b.last_offset:
            chosen.append(b)
    return slice_batches(records, chosen)
