"""ShareFetch and ShareAcknowledge: share sessions, piggybacked acks, then acquisition.

Order inside one request, as Kafka does it: session epoch rules first, then acknowledgements
(applied on arrival and answered only after the durable write) side by side with — unless the
request is ack-only or closes the session — the acquisition of records, which waits up to
MaxWaitMs when there are none. An empty answer is never sent early: librdkafka refetches at once
and would spin.

Where the pieces are (Kafka's names where our classes play its roles): this module is the entry
of both requests (KafkaApis' handlers and SharePartitionManager's fetchMessages/acknowledge);
the share sessions are :class:`~kshare_sidecar.share.engine.sessions.ShareSessionCache`; one request's
acquisition and parking is :class:`.delayed_fetch.DelayedShareFetch`; backend reads, the batch
cache and read-ahead are :class:`.log_reader.ShareLogReader`; the loaded share-partitions and
their durable writes are :class:`.cache.SharePartitionCache`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..config.sections import GroupConfig
from ..metrics import STATS as _METRICS
from ..protocol.types import TopicIdPartition
from ..ratelog import RateLimitedLog
from .engine.acks import parse_ack_batches
from .engine.sessions import SessionError, ShareSession, ShareSessionCache
from .engine.types import AckBatch
from ..states import RENEW
from .log_reader import ShareLogReader
from .cache import PartitionError, SharePartitionCache, Slot
from .state_writes import PendingAcks
from .delayed_fetch import DelayedShareFetch, FetchParams, PartitionOut

if TYPE_CHECKING:
    from ..backend.backend import Backend

__all__ = ["FetchParams", "PartitionOut", "ShareOut", "SharePartitionManager"]

log = logging.getLogger("kshare.shares")
#: a client can ask for sessions in a loop: one WARNING per burst, the rest counted
_refusals = RateLimitedLog(log)

#: ``await readable(topic_name) -> bool``: may the requesting principal READ the topic (authorization
#: on; a refusal is confirmed on ACLs read after the request arrived, auth/acls.Decider.permits)
Readable = Callable[[str], Awaitable[bool]]
#: a request's topics: (topic id, partition, its AcknowledgementBatches)
RequestTopics = list[tuple[uuid.UUID, int, list[AckBatch]]]


@dataclass
class ShareOut:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    lock_timeout_ms: int = 0
    partitions: list[PartitionOut] = field(default_factory=list)


class SharePartitionManager:
    """ShareFetch and ShareAcknowledge for every share group this sidecar serves."""

    def __init__(self, *, sessions: ShareSessionCache, partitions: SharePartitionCache, backend: Backend,
                 group_config: Callable[[str], Mapping[str, Any]], cache_bytes: int = 64 * 1024 * 1024,
                 read_ahead: bool = False, clock: Callable[[], int] | None = None) -> None:
        """``clock``: the sidecar's monotonic milliseconds (timeutil.Clock, from app.py): the
        fetches' MaxWaitMs deadlines and the timings logged; by default the partition cache's."""
        self.sessions = sessions
        self.partitions = partitions
        self.clock = clock if clock is not None else partitions.clock
        self.backend = backend
        self.group_config = group_config
        self.reader = ShareLogReader(backend, cache_bytes=cache_bytes, read_ahead=read_ahead)
        self.cache = self.reader.cache  # the read cache (tests size it)

    # -- entry points ------------------------------------------------------------------------
    async def share_fetch(self, *, conn_id: int, group_id: str, member_id: str, epoch: int, params: FetchParams,
                          topics: RequestTopics, forgotten: list[TopicIdPartition], is_renew: bool = False,
                          on_park: Callable[[], None] | None = None, readable: Readable | None = None) -> ShareOut:
        _METRICS.share_fetch_requests += 1
        key = (group_id, member_id)
        group = GroupConfig.of(self.group_config(group_id))  # read once per request, typed
        lock_ms = group.record_lock_duration_ms
        acks = _merge_acks(topics)
        if not member_id or len(member_id) > 36:
            _METRICS.share_fetch_failed += 1
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
            _METRICS.share_fetch_failed += 1
            return ShareOut(exc.code, str(exc))
        for topic_id, p, _ in topics:
            session.partitions.add((topic_id, p))
        for tp in forgotten:
            session.partitions.discard(tp)
        # Kafka keeps partitions of topics the principal may not READ in the session and answers
        # them TOPIC_AUTHORIZATION_FAILED on every fetch; their acks are not applied.
        denied = await self._denied(readable, set(session.partitions) | set(acks))
        out: dict[TopicIdPartition, PartitionOut] = {}
        t0 = self.clock()
        # The durable write of the piggybacked acks and the acquisition of new records run side by
        # side: the response waits for both, so a fetch costs max(write, read), not their sum.
        allowed_acks = {tp: b for tp, b in acks.items() if tp not in denied}
        ack_task = asyncio.ensure_future(self._acknowledge(
            group_id, member_id, allowed_acks, allow_renew=is_renew,
            renew_enabled=group.renew_acknowledge_enable)) if allowed_acks else None
        fetched: dict[TopicIdPartition, PartitionOut] = {}
        try:
            if epoch != -1 and not is_renew and params.max_records > 0 and params.max_bytes > 0 \
                    and session.partitions - denied:
                read_committed = group.isolation_level == "read_committed"
                fetched = await DelayedShareFetch(
                    session, group_id, member_id, params, sessions=self.sessions, partitions=self.partitions,
                    reader=self.reader, read_committed=read_committed, clock=self.clock,
                    skip=denied).run(on_park)
        finally:
            ack_results = await ack_task if ack_task is not None else {}
        if fetched and self.sessions.get(key) is None:
            # The connection closed while this fetch was acquiring (between its awaits): nobody
            # will receive these records, and connection_closed has already released the member's
            # others. Release them too, or a delivery would be counted that never happened.
            self.partitions.release_member(group_id, member_id, fetched)
        t1 = self.clock()
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
            log.debug("ShareFetch group=%s member=%s: acks and fetch %d ms (%d ack partitions), %d records",
                      group_id, member_id, t1 - t0, len(acks),
                      sum(a.last_offset - a.first_offset + 1 for p in out.values() for a in p.acquired))
        return ShareOut(lock_timeout_ms=lock_ms, partitions=list(out.values()))

    async def share_acknowledge(self, *, conn_id: int, group_id: str, member_id: str, epoch: int,
                                topics: RequestTopics, is_renew: bool = False,
                                readable: Readable | None = None) -> ShareOut:
        _METRICS.share_ack_requests += 1
        key = (group_id, member_id)
        group = GroupConfig.of(self.group_config(group_id))
        lock_ms = group.record_lock_duration_ms
        try:
            if epoch == 0:
                raise SessionError(ErrorCode.invalid_share_session_epoch,
                                   "ShareAcknowledge cannot open a share session (epoch 0)")
            session = self._existing_session(key, epoch, conn_id)
        except SessionError as exc:
            _METRICS.share_ack_failed += 1
            return ShareOut(exc.code, str(exc))
        acks = _merge_acks(topics)
        denied = await self._denied(readable, set(acks))
        allowed = {tp: b for tp, b in acks.items() if tp not in denied}
        results = await self._acknowledge(group_id, member_id, allowed, allow_renew=is_renew,
                                          renew_enabled=group.renew_acknowledge_enable) if allowed else {}
        results |= {tp: ErrorCode.topic_authorization_failed for tp in denied}
        if epoch == -1:
            self._close(session)
        return ShareOut(lock_timeout_ms=lock_ms,
                        partitions=[PartitionOut(tp[0], tp[1], error=code) for tp, code in results.items()])

    def connection_closed(self, conn_id: int) -> None:
        """TCP disconnect: close the connection's share sessions, releasing their records at once."""
        for session in self.sessions.close_connection(conn_id):
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
            if info is not None and not await readable(info.name):
                denied |= {tp for tp in tps if tp[0] == topic_id}
        return denied

    # -- sessions ----------------------------------------------------------------------------
    async def _open(self, key: tuple[str, str], conn_id: int, max_wait_ms: int) -> ShareSession:
        try:
            session, _replaced = self.sessions.open(key, conn_id)
        except SessionError:
            await asyncio.sleep(max_wait_ms / 1000)  # Kafka holds the request before refusing
            try:
                session, _replaced = self.sessions.open(key, conn_id)
            except SessionError as exc:  # still full: SHARE_SESSION_LIMIT_REACHED
                _refusals.log("share-session-limit", logging.WARNING, "share session refused for group=%s "
                              "member=%s on connection %d: %s (SHARE_SESSION_LIMIT_REACHED; "
                              "group.share.max.share.sessions, share.sessions.max.per.connection)",
                              key[0], key[1], conn_id, exc)
                raise
        return session

    def _existing_session(self, key: tuple[str, str], epoch: int, conn_id: int) -> ShareSession:
        """Epoch -1 names the session to close; any other epoch must be the session's next one."""
        if epoch == -1:
            session = self.sessions.get(key)
            if session is None:
                raise SessionError(ErrorCode.share_session_not_found, f"no share session for member {key[1]}")
            return session
        return self.sessions.advance(key, epoch, conn_id)

    def _close(self, session: ShareSession) -> None:
        self.sessions.close(session.key)
        self.partitions.release_member(session.key[0], session.key[1], session.partitions)

    # -- acknowledgements --------------------------------------------------------------------
    async def _acknowledge(self, group_id: str, member_id: str, acks: dict[TopicIdPartition, list[AckBatch]],
                           *, allow_renew: bool, renew_enabled: bool = True) -> dict[TopicIdPartition, ErrorCode]:
        results: dict[TopicIdPartition, ErrorCode] = {}
        planned: list[tuple[Slot, object]] = []  # (slot, PendingAcks): persist_plans takes AckPlans too
        for (topic_id, p), batches in acks.items():
            if isinstance(parse_ack_batches(batches, allow_renew=allow_renew), ErrorCode):
                results[(topic_id, p)] = ErrorCode.invalid_request  # Kafka validates batches first
                continue
            if not renew_enabled and any(RENEW in b.ack_types for b in batches):
                # share.renew.acknowledge.enable=false (read at each acknowledgement, as Kafka's
                # SharePartition does): the partition's acknowledgement fails as a whole
                results[(topic_id, p)] = ErrorCode.invalid_record_state
                continue
            try:
                slot = await self.partitions.slot_for(group_id, topic_id, p, load=False)
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

    async def close(self) -> None:
        """Stop background reads (the backend is closed after this)."""
        await self.reader.close()


def _merge_acks(topics: Iterable[tuple[uuid.UUID, int, list[AckBatch]]]
                ) -> dict[TopicIdPartition, list[AckBatch]]:
    """Clients may list one TopicId (and even one partition) more than once: merge, keep order."""
    acks: dict[TopicIdPartition, list[AckBatch]] = {}
    for topic_id, p, batches in topics:
        if batches:
            acks.setdefault((topic_id, p), []).extend(batches)
    return acks
