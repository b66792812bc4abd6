"""The share consumer's requests and their books: Kafka's ShareConsumeRequestManager (plus its
ShareFetchBuffer) for :class:`~kshare_sidecar.client.consumer.ShareConsumer`.

Why apart from the consumer: :mod:`.consumer` is the public facade (lifecycle, subscription,
``getmany``, ``acknowledge``, ``commit``); this module is what moves ShareFetch and
ShareAcknowledge and keeps their bookkeeping consistent:

- per node a :class:`~.session.ShareSession` (epochs) and one lock serialising it;
- per partition a :class:`~.acks.PartitionInFlight` (acquired offsets, delivered ones, pending
  acks): acks go piggybacked on the next ShareFetch to that node, or by ShareAcknowledge when
  the fetch does not list the partition;
- a buffer of fetched records not yet handed out, one chunk per partition and response (per-record
  work in the hot path is what the throughput benchmark's profile showed; see ``drain``);
- the per-partition outcome of every ack sent since the last ``commit``.

A session that ends (an error, a reconnect: the broker released its records) drops every book
of its node at once (``drop_node``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka.structs import TopicPartition
from kio.schema.errors import ErrorCode

from . import protocol
from .acks import AckBatch, AcknowledgeType, PartitionInFlight, RangesInFlight
from .cluster import TRANSPORT_ERRORS as _TRANSPORT
from .cluster import Cluster, Tp
from .conn import NodeConn
from .errors import AcknowledgementError, AckStateError, UnsupportedVersionError
from .membership import Membership
from .records import RecordDecodeError, ShareRecord, share_records
from .session import SESSION_ERRORS, ShareSession

log = logging.getLogger("kshare.client")
#: partition errors that mean "ask Metadata who leads it now"
_LEADER_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                            ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id,
                            ErrorCode.leader_not_available, ErrorCode.unknown_leader_epoch})
#: a record deserializer (key or value)
Deserializer = Callable[[bytes | None], Any]


def _code(value: int) -> ErrorCode:
    """kio types ShareFetch's AcknowledgeErrorCode as a plain int16."""
    try:
        return ErrorCode(int(value))
    except ValueError:
        return ErrorCode.unknown_server_error


#: offsets handed out and then released by a leader move, kept acknowledgeable (see _lose)
_RELEASED_KEPT = 100_000


@dataclass(slots=True)
class _Chunk:
    """Records of one partition from one ShareFetch answer, not yet handed out, with their
    offsets; ``books`` are the partition's books they were acquired into (when those are gone or
    replaced, the session ended and the broker released them: the chunk is dropped whole)."""

    tp: Tp
    key: TopicPartition
    records: list[ShareRecord]
    offsets: list[int]
    books: Any
    #: the books' block of these records (acks.Block; None: they went into the per-offset dicts)
    block: Any = None
    #: records before it are handed out: a poll takes its share by this index, not by copying
    #: what is left (an answer of ~8,000 100-byte records is handed out 500 at a time)
    start: int = 0


@dataclass(slots=True)
class _RangeChunk:
    """Acquired ranges of one partition from one ShareFetch answer (offsets-only mode)."""

    tp: Tp
    key: TopicPartition
    ranges: list[tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """The consumer's fetch settings, as ShareFetch sends them."""

    max_poll_records: int
    min_bytes: int
    max_bytes: int
    acquire_mode: int  # ShareFetch v2 ShareAcquireMode (1: record_limit)
    timeout_s: float
    backoff_s: float
    check_crcs: bool
    key_deserializer: Deserializer | None
    value_deserializer: Deserializer | None
    #: keep only AcquiredRecords ranges, never decode records (``ShareConsumer(offsets_only=True)``)
    offsets_only: bool = False


class ShareConsumeRequestManager:
    """ShareFetch / ShareAcknowledge per node, and the books they keep (see the module docstring)."""

    def __init__(self, group_id: str, membership: Membership, cluster: Cluster, config: FetchConfig) -> None:
        self.group_id = group_id
        self._membership = membership
        self._cluster = cluster
        self.config = config
        self.sessions: dict[int, ShareSession] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self.inflight: dict[Tp, Any] = {}  # PartitionInFlight, or RangesInFlight (offsets only)
        self.buffer: collections.deque[Any] = collections.deque()  # _Chunk, or _RangeChunk
        self.results: dict[TopicPartition, Exception | None] = {}
        #: offsets handed to the application whose share session then ended (the broker released
        #: them), with the code: their acknowledgement fails at the next commit instead of raising
        self.released: dict[Tp, tuple[set[int], ErrorCode]] = {}
        #: lock duration the brokers last reported (ms)
        self.acquisition_lock_timeout_ms: int | None = None

    # -- handing records out ---------------------------------------------------------------------
    def drain(self, limit: int) -> dict[TopicPartition, list[ShareRecord]]:
        """Up to ``limit`` buffered records still acquired by this member, marked delivered."""
        out: dict[TopicPartition, list[ShareRecord]] = {}
        n = 0
        while self.buffer and n < limit:
            chunk = self.buffer[0]
            k, start = limit - n, chunk.start
            if k >= len(chunk.records) - start:
                self.buffer.popleft()
                take, offsets = chunk.records, chunk.offsets
                if start:
                    take, offsets = take[start:], offsets[start:]
            else:
                end = start + k
                take, offsets = chunk.records[start:end], chunk.offsets[start:end]
                chunk.start = end
            inf = self.inflight.get(chunk.tp)
            if inf is None or inf is not chunk.books:
                continue  # its session ended meanwhile: the broker released them
            inf.hand_out(chunk.block, offsets)
            out.setdefault(chunk.key, []).extend(take)
            n += len(take)
        return out

    def drain_ranges(self) -> dict[TopicPartition, list[tuple[int, int, int]]]:
        """Offsets-only mode: every buffered acquired range, ``(first, last, delivery_count)``."""
        out: dict[TopicPartition, list[tuple[int, int, int]]] = {}
        while self.buffer:
            chunk = self.buffer.popleft()
            if chunk.tp in self.inflight:  # else its session ended meanwhile: released
                out.setdefault(chunk.key, []).extend(chunk.ranges)
        return out

    def accept_delivered(self, unseen: dict[Tp, set[int]]) -> None:
        """Implicit mode: ACCEPT every record handed out, except the ``unseen`` ones."""
        for tp, inf in self.inflight.items():
            inf.accept_delivered(skip=unseen.get(tp, ()))

    def _take_records(self, node: int, tp: Tp, part: Any) -> None:
        inf: Any = self.inflight.get(tp)
        if inf is None or inf.node != node:
            if inf is not None:
                self._lose(tp, inf, ErrorCode.not_leader_or_follower)
            inf = self.inflight[tp] = (RangesInFlight if self.config.offsets_only else PartitionInFlight)(node)
        ranges = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count)) for a in part.acquired_records]
        if self.config.offsets_only:  # the payloads are someone else's business (the Spark executors)
            topic = self._cluster.names.get(tp[0], str(tp[0]))
            self._cluster.ids.setdefault(topic, tp[0])
            self.buffer.append(_RangeChunk(tp, TopicPartition(topic, tp[1]), inf.add_acquired(ranges)))
            return
        topic = self._cluster.names.get(tp[0], str(tp[0]))
        self._cluster.ids.setdefault(topic, tp[0])
        try:
            records, offsets = self._records(topic, tp[1], part.records or b"", sorted(ranges))
        except RecordDecodeError as exc:
            log.error("cannot decode records of %s-%s (released for another consumer): %s", topic, tp[1], exc)
            inf.release(ranges)
            return
        inf.add_acquired(ranges, offsets, ascending=True)
        if inf.reacquired:  # copies of the earlier acquisition not handed out yet: they would come twice
            self._drop_stale(tp, inf, set(offsets))
        if inf.superseded:  # never sent: the application must not take them for accepted
            self._result(tp, AcknowledgementError(ErrorCode.invalid_record_state, f"{inf.superseded} acknowledgements "
                         "not sent: their records were delivered again (their acquisition locks had run out)"))
            inf.superseded = 0
        if records:
            self.buffer.append(_Chunk(tp, TopicPartition(topic, tp[1]), records, offsets, inf, inf.last_block))

    def _records(self, topic: str, partition: int, data: bytes | memoryview, ranges: list[tuple[int, int, int]]
                 ) -> tuple[list[ShareRecord], list[int]]:
        """The records of ``data`` inside the acquired ``ranges`` (sorted), and their offsets."""
        config = self.config
        return share_records(topic, partition, data, ranges, key_deserializer=config.key_deserializer,
                             value_deserializer=config.value_deserializer, check_crcs=config.check_crcs)

    # -- acknowledgements ------------------------------------------------------------------------
    def take_acks(self, node: int) -> dict[Tp, list[AckBatch]]:
        """The pending acks of ``node``'s partitions, taken out of their books."""
        out: dict[Tp, list[AckBatch]] = {}
        for tp, inf in list(self.inflight.items()):
            if inf.node == node and inf.has_pending:
                out[tp] = inf.take_pending()
            if inf.empty:
                del self.inflight[tp]
        return out

    def _result(self, tp: Tp, error: Exception | None) -> None:
        key = TopicPartition(self._cluster.names.get(tp[0], str(tp[0])), tp[1])
        if error is not None:
            log.debug("acknowledgement of %s failed: %s", key, error)
            self.results[key] = error
        else:
            self.results.setdefault(key, None)

    def _results_from(self, acks: Iterable[Tp], answered: dict[Tp, tuple[ErrorCode, str | None]]) -> None:
        for tp in acks:
            code, msg = answered.get(tp, (ErrorCode.invalid_record_state, "partition missing from the answer"))
            self._result(tp, None if code == ErrorCode.none else AcknowledgementError(code, msg))

    async def commit(self) -> dict[TopicPartition, Exception | None]:
        """Send every pending ack now; the outcomes of all acks sent since the last commit."""
        nodes = {inf.node for inf in self.inflight.values() if inf.has_pending}
        for node in nodes:
            async with self.lock(node):
                acks = self.take_acks(node)
                if acks:
                    await self.send_acks(node, self.session(node), acks)
        results, self.results = self.results, {}
        return results

    async def send_acks(self, node: int, session: ShareSession, acks: dict[Tp, list[AckBatch]],
                        *, epoch: int | None = None) -> None:
        """ShareAcknowledge ``acks`` to ``node`` (caller holds the node's lock)."""
        conn = self.conn(node)
        try:
            await conn.ensure()
        except _TRANSPORT as exc:
            self.node_failed(node, exc)
        if session.open and session.generation != conn.generation:
            self.drop_node(node, ErrorCode.share_session_not_found)  # reconnected: the broker released them
        if not session.open:
            for tp in acks:
                self._result(tp, AcknowledgementError(ErrorCode.share_session_not_found, "records were released"))
            return
        if epoch is None and not acks:
            return
        version = conn.versions.get(protocol.SHARE_ACKNOWLEDGE, 1)
        req = protocol.share_acknowledge(version, group_id=self.group_id, member_id=self._membership.member_id,
                                         epoch=session.ack_epoch() if epoch is None else epoch, acks=acks)
        try:
            resp = await conn.call(req)
        except _TRANSPORT as exc:
            for tp in acks:
                self._result(tp, AcknowledgementError(None, f"not delivered: {exc}"))
            self.node_failed(node, exc)
            return
        if epoch is None:
            session.acknowledged(resp.error_code)
        if resp.error_code != ErrorCode.none:
            for tp in acks:
                self._result(tp, AcknowledgementError(resp.error_code, resp.error_message))
            if resp.error_code in SESSION_ERRORS:
                self.drop_node(node, resp.error_code)
            return
        self._results_from(acks, {(t.topic_id, int(p.partition_index)): (p.error_code, p.error_message)
                                  for t in resp.responses for p in t.partitions})

    async def renew(self, tp: Tp, record: ShareRecord) -> None:
        """RENEW one acquired record (ShareAcknowledge v2): its acquisition lock restarts."""
        inf = self.inflight.get(tp)
        if inf is None or record.offset not in inf.acquired or record.offset in inf.pending:
            raise AckStateError(f"{record.topic}-{record.partition}@{record.offset} is not acquired by this consumer")
        conn = self.conn(inf.node)
        async with self.lock(inf.node):
            await conn.ensure()
            version = conn.versions[protocol.SHARE_ACKNOWLEDGE]
            if version < 2:
                raise UnsupportedVersionError(
                    f"RENEW needs ShareAcknowledge v2; node {inf.node} offers v{version} only")
            session = self.session(inf.node)
            if not session.open or session.generation != conn.generation:
                raise AckStateError("the share session that acquired the record has ended")
            req = protocol.share_acknowledge(version, group_id=self.group_id, member_id=self._membership.member_id,
                                             epoch=session.ack_epoch(), renew=True,
                                             acks={tp: [AckBatch(record.offset, record.offset, (4,))]})
            try:
                resp = await conn.call(req)
            except _TRANSPORT as exc:
                self.node_failed(inf.node, exc)
                raise AcknowledgementError(None, f"renew not delivered: {exc}") from exc
            session.acknowledged(resp.error_code)
            errors = [resp.error_code] + [p.error_code for t in resp.responses for p in t.partitions]
            bad = next((e for e in errors if e != ErrorCode.none), None)
            if resp.error_code in SESSION_ERRORS:
                self.drop_node(inf.node, resp.error_code)
            if bad is not None:
                raise AcknowledgementError(bad, resp.error_message)

    # -- fetching --------------------------------------------------------------------------------
    async def fetch(self, assigned: Iterable[Tp], max_wait_ms: int) -> bool:
        """One ShareFetch per node leading an assigned partition, concurrently (acks of other
        nodes flushed too). False when no assigned partition has a known leader: the caller waits
        for an assignment instead."""
        if self._cluster.stale:
            try:
                await self._cluster.refresh(self._membership.subscription)
            except _TRANSPORT as exc:
                log.debug("metadata refresh failed: %s", exc)
        by_node: dict[int, set[Tp]] = {}
        for tp in assigned:
            leader = self._cluster.leaders.get(tp, -1)
            if leader in self._cluster.nodes:
                by_node.setdefault(leader, set()).add(tp)
            else:
                self._cluster.stale = True
        nodes = set(by_node) | {inf.node for inf in self.inflight.values() if inf.has_pending}
        if not by_node:
            # nothing to fetch: still flush acks
            if nodes:
                await asyncio.gather(*(self._fetch_node(n, set(), 0) for n in nodes))
            return False
        await asyncio.gather(*(self._fetch_node(n, by_node.get(n, set()), max_wait_ms) for n in nodes))
        return True

    async def _fetch_node(self, node: int, wanted: set[Tp], max_wait_ms: int) -> None:
        cfg = self.config
        async with self.lock(node):
            conn, session = self.conn(node), self.session(node)
            try:
                await conn.ensure()
            except _TRANSPORT as exc:
                self.node_failed(node, exc)
                await asyncio.sleep(cfg.backoff_s)
                return
            if session.open and session.generation != conn.generation:
                self.drop_node(node, ErrorCode.share_session_not_found)  # reconnected: the session is gone
            acks = self.take_acks(node)
            piggy = {tp: b for tp, b in acks.items() if tp in wanted and session.open}
            direct = {tp: b for tp, b in acks.items() if tp not in piggy}
            if direct:
                await self.send_acks(node, session, direct)
            if not wanted:
                return
            plan = session.fetch_plan(wanted, piggy)
            req = protocol.share_fetch_wire(
                conn.versions[protocol.SHARE_FETCH], conn.client_id, group_id=self.group_id,
                member_id=self._membership.member_id,
                epoch=plan.epoch, max_wait_ms=max_wait_ms, min_bytes=cfg.min_bytes, max_bytes=cfg.max_bytes,
                max_records=cfg.max_poll_records, batch_size=cfg.max_poll_records, listed=plan.listed,
                acks=piggy, forgotten=plan.forgotten, acquire_mode=cfg.acquire_mode)
            try:
                resp = await conn.call(req, timeout_s=max_wait_ms / 1000 + cfg.timeout_s)
            except _TRANSPORT as exc:
                for tp in piggy:
                    self._result(tp, AcknowledgementError(None, f"not delivered: {exc}"))
                self.node_failed(node, exc)
                await asyncio.sleep(cfg.backoff_s)
                return
            session.fetched(plan, resp.error_code)
            if resp.error_code != ErrorCode.none:
                for tp in piggy:
                    self._result(tp, AcknowledgementError(resp.error_code, resp.error_message))
                if resp.error_code in SESSION_ERRORS:
                    self.drop_node(node, resp.error_code)
                else:
                    log.warning("ShareFetch to node %s failed: %s %s", node, resp.error_code.name,
                                resp.error_message or "")
                await asyncio.sleep(cfg.backoff_s)
                return
            if plan.epoch == 0:
                session.generation = conn.generation
            self.acquisition_lock_timeout_ms = int(resp.acquisition_lock_timeout.total_seconds() * 1000)
            for ep in resp.node_endpoints:
                self._cluster.learn_node(ep.node_id, ep.host, ep.port)
            answered: dict[Tp, tuple[ErrorCode, str | None]] = {}
            for topic in resp.responses:
                for part in topic.partitions:
                    tp = (topic.topic_id, int(part.partition_index))
                    answered[tp] = (_code(part.acknowledge_error_code), part.acknowledge_error_message)
                    if part.error_code in _LEADER_ERRORS:
                        self._cluster.moved(tp, int(part.current_leader.leader_id))
                    elif part.error_code != ErrorCode.none:
                        log.warning("ShareFetch of %s from node %s: %s %s", tp, node, part.error_code.name,
                                    part.error_message or "")
                    elif part.acquired_records:
                        self._take_records(node, tp, part)
            self._results_from(piggy, answered)

    # -- nodes and sessions ----------------------------------------------------------------------
    def lock(self, node: int) -> asyncio.Lock:
        return self._locks.setdefault(node, asyncio.Lock())

    def session(self, node: int) -> ShareSession:
        return self.sessions.setdefault(node, ShareSession())

    def conn(self, node: int) -> NodeConn:
        return self._cluster.conn(node)

    def _lose(self, tp: Tp, inf: Any, code: ErrorCode) -> None:
        if isinstance(inf, PartitionInFlight) and inf.delivered:  # records (offsets-only mode has ranges)
            # added to what an earlier loss released (a leader can move twice while the application
            # works through one batch); bounded: past _RELEASED_KEPT offsets the oldest are forgotten
            # (acknowledging one of those raises AckStateError, as before they were kept)
            if sum(len(offsets) for offsets, _code in self.released.values()) > _RELEASED_KEPT:
                self.released.clear()
            self.released[tp] = (self.released.get(tp, (set(), code))[0] | inf.delivered, code)
        if inf.drop():
            self._result(tp, AcknowledgementError(code, "the share session ended; the records were released"))
        self.inflight.pop(tp, None)
        if self.buffer:
            self.buffer = collections.deque(c for c in self.buffer if c.tp != tp)

    def _drop_stale(self, tp: Tp, inf: Any, again: set[int]) -> None:
        for chunk in self.buffer:
            if chunk.tp == tp and chunk.books is inf and not again.isdisjoint(chunk.offsets[chunk.start:]):
                keep = [i for i in range(chunk.start, len(chunk.offsets)) if chunk.offsets[i] not in again]
                chunk.records, chunk.offsets = [chunk.records[i] for i in keep], [chunk.offsets[i] for i in keep]
                chunk.start = 0

    def stale_ack(self, tp: Tp, inf: Any, offset: int, count: int) -> bool:
        """An acknowledgement of a copy handed out before its lock ran out and this member was
        handed the record again (the books hold a higher delivery count now): applied to the
        newer acquisition it would settle a copy the application has not seen. It fails at the
        next commit, as the broker answers an acknowledgement after the lock ran out
        (INVALID_RECORD_STATE); the newer copy is the one to acknowledge."""
        held = inf.acquired.get(offset) if isinstance(inf, PartitionInFlight) else None
        if held is None or count >= held:
            return False
        self._result(tp, AcknowledgementError(ErrorCode.invalid_record_state, "the record's acquisition lock ran out "
                                              "and it was delivered again (a higher delivery count) before this "
                                              "acknowledgement"))
        return True

    def released_ack(self, tp: Tp, offset: int) -> bool:
        """An acknowledgement of a record handed out before its share session ended (a leader
        moved while the application worked): it fails at the next commit, as in Kafka's clients,
        rather than raising. False: the record was never handed out here."""
        entry = self.released.get(tp)
        if entry is None or offset not in entry[0]:
            return False
        self._result(tp, AcknowledgementError(entry[1], "the share session ended before the acknowledgement was "
                                                        "sent; the broker released the record"))
        return True

    def drop_node(self, node: int, code: ErrorCode) -> None:
        """The session at ``node`` is gone: its records were released by the broker."""
        self.session(node).reset()
        for tp, inf in list(self.inflight.items()):
            if inf.node == node:
                self._lose(tp, inf, code)

    def node_failed(self, node: int, exc: BaseException) -> None:
        log.debug("node %s failed: %s", node, exc)
        self.drop_node(node, ErrorCode.network_exception)
        self._cluster.stale = True
