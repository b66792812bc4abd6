"""``ShareConsumer``: an asyncio share-group consumer in aiokafka's shape (the thin I/O layer).

Why here and this way: Python's only share consumer (confluent-kafka's) is synchronous and v1-only
(no RENEW); asyncio services need one that speaks the protocol itself. The rules live in pure
modules (``membership``, ``session``, ``acks``, ``records``); this module only moves requests:

- one background task heartbeats the group coordinator at the interval it returns
  (:class:`~.membership.Membership` decides rejoin / coordinator lookup / fatal);
- ``getmany`` first turns the previous poll's records into ACCEPTs (implicit mode), then sends
  one ShareFetch per node leading an assigned partition, concurrently, each carrying that node's
  pending acks (acks for partitions the fetch does not list go by ShareAcknowledge first);
- one :class:`~.conn.NodeConn` per node (Metadata gives leaders and topic ids, FindCoordinator the
  coordinator); per node one lock serialises the share-session epochs;
- ``close`` accepts (implicit mode), sends the final ShareAcknowledge (epoch -1: the broker
  applies the acks and releases everything else this member holds) and leaves (epoch -1).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

from aiokafka.structs import TopicPartition
from kio.schema.errors import ErrorCode

from . import protocol
from .acks import AckBatch, AcknowledgeType, PartitionInFlight
from .cluster import TRANSPORT_ERRORS as _TRANSPORT
from .cluster import Cluster, Tp, parse_bootstrap
from .errors import (
    AcknowledgementError,
    AckStateError,
    AuthenticationFailedError,
    ConsumerStoppedError,
    ShareConsumerError,
    UnsupportedVersionError,
)
from .heartbeat import Heartbeat
from .membership import Membership
from .records import RecordDecodeError, ShareRecord, decode_batches
from .security import client_security
from .session import FINAL_EPOCH, SESSION_ERRORS, ShareSession

log = logging.getLogger("kshare.client")
#: partition errors that mean "ask Metadata who leads it now"
_LEADER_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                            ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id,
                            ErrorCode.leader_not_available, ErrorCode.unknown_leader_epoch})


def _code(value: int) -> ErrorCode:
    """kio types ShareFetch's AcknowledgeErrorCode as a plain int16."""
    try:
        return ErrorCode(int(value))
    except ValueError:
        return ErrorCode.unknown_server_error


@dataclass(slots=True)
class _Chunk:
    """Records of one partition from one ShareFetch answer, not yet handed out."""

    tp: Tp
    key: TopicPartition
    records: list[ShareRecord]


class ShareConsumer:
    """Consume a share group. Use ``async with ShareConsumer(...) as c`` (or ``start``/``close``)."""

    def __init__(self, *topics: str, bootstrap_servers: str | list[str], group_id: str,
                 client_id: str = "kshare-asyncio", acknowledgement_mode: str = "implicit",
                 max_poll_records: int = 500, fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 52_428_800, request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, key_deserializer: Callable[[bytes | None], Any] | None = None,
                 value_deserializer: Callable[[bytes | None], Any] | None = None,
                 check_crcs: bool = True, max_share_version: int = 2,
                 share_acquire_mode: str = "batch_optimized", security_protocol: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None, sasl_mechanism: str | None = None,
                 sasl_plain_username: str | None = None, sasl_plain_password: str | None = None,
                 sasl_oauth_token_provider: Any = None) -> None:
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError("acknowledgement_mode must be 'implicit' or 'explicit'")
        if share_acquire_mode not in ("batch_optimized", "record_limit"):
            raise ValueError("share_acquire_mode must be 'batch_optimized' or 'record_limit'")
        #: ShareFetch v2 ShareAcquireMode (record_limit: at most max_poll_records; v1 ignores it)
        self._acquire_mode = 1 if share_acquire_mode == "record_limit" else 0
        self.group_id, self.client_id = group_id, client_id
        self.implicit = acknowledgement_mode == "implicit"
        self._max_poll_records, self._max_wait_ms = max_poll_records, fetch_max_wait_ms
        self._min_bytes, self._max_bytes = fetch_min_bytes, fetch_max_bytes
        self._timeout_s, self._backoff_s = request_timeout_ms / 1000, retry_backoff_ms / 1000
        self._key_de, self._value_de, self._check_crcs = key_deserializer, value_deserializer, check_crcs
        self._membership = Membership()
        if topics:
            self._membership.subscribe(topics)
        security = client_security(security_protocol, ssl_context, sasl_mechanism, sasl_plain_username,
                                   sasl_plain_password, sasl_oauth_token_provider)  # see client/security.py
        self._cluster = Cluster(parse_bootstrap(bootstrap_servers), client_id, self._timeout_s, max_share_version,
                                security)
        self._heartbeat = Heartbeat(group_id, self._membership, self._cluster, backoff_s=self._backoff_s,
                                    timeout_s=self._timeout_s, on_assignment=self._apply_assignment,
                                    on_fatal=self._set_fatal)
        self._assigned: frozenset[Tp] = frozenset()
        self._sessions: dict[int, ShareSession] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._inflight: dict[Tp, PartitionInFlight] = {}
        #: fetched, not yet handed out: one chunk per partition and response (per-record work in
        #: the hot path is what the throughput benchmark's profile showed; see _drain)
        self._buffer: collections.deque[_Chunk] = collections.deque()
        self._iter: collections.deque[ShareRecord] = collections.deque()
        self._results: dict[TopicPartition, Exception | None] = {}
        self._fatal: Exception | None = None
        self._assignment_changed = asyncio.Event()
        self._started = self._closed = False
        #: lock duration the brokers last reported (ms)
        self.acquisition_lock_timeout_ms: int | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._started:
            return
        try:
            await self._cluster.refresh(self._membership.subscription)
        except BaseException:
            await self._cluster.close()  # no bootstrap connection left behind by a failed start
            raise
        self._started = True
        self._heartbeat.start()

    async def close(self) -> None:
        """Accept (implicit mode), send the final acks with epoch -1 (the broker releases what this
        member still holds), leave the group, close the connections."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closed = True
        if self.implicit:
            self._accept_delivered()
            self._iter.clear()  # never seen, not accepted: the final epoch releases them
        await self._heartbeat.stop(leave=False)
        for node, session in list(self._sessions.items()):
            async with self._lock(node):
                if session.open:
                    acks = self._take_acks(node)
                    try:
                        async with asyncio.timeout(self._timeout_s):
                            await self._send_acks(node, session, acks, epoch=FINAL_EPOCH)
                    except (*_TRANSPORT, ShareConsumerError) as exc:
                        log.debug("final ShareAcknowledge to node %s failed: %s", node, exc)
                session.reset()
        await self._heartbeat.stop(leave=True)
        await self._cluster.close()

    stop = close

    # -- subscription ----------------------------------------------------------------------------
    def subscribe(self, topics: list[str]) -> None:
        self._membership.subscribe(topics)
        self._cluster.stale = True
        self._heartbeat.wake()

    def unsubscribe(self) -> None:
        """Leave the group (records already fetched stay acquired until acknowledged or closed)."""
        self.subscribe([])

    def subscription(self) -> set[str]:
        return set(self._membership.subscription)

    def assignment(self) -> set[TopicPartition]:
        names = self._cluster.names
        return {TopicPartition(names[t], p) for t, p in self._assigned if t in names}

    @property
    def member_id(self) -> str:
        return self._membership.member_id

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """Partitions of ``topic`` in the metadata this consumer holds (``None`` if unknown), as
        aiokafka's: the Faust driver presents every partition of a subscribed topic as assigned."""
        topic_id = self._cluster.ids.get(topic)
        if topic_id is None:
            return None
        return {p for t, p in self._cluster.leaders if t == topic_id}

    async def refresh_metadata(self) -> None:
        """Metadata for the subscribed topics now (otherwise refreshed before the next fetch)."""
        await self._cluster.refresh(self._membership.subscription)

    # -- consuming -------------------------------------------------------------------------------
    async def getmany(self, timeout_ms: int = 0, max_records: int | None = None
                      ) -> dict[TopicPartition, list[ShareRecord]]:
        """Records acquired for this member, by partition; ``{}`` if none came within
        ``timeout_ms``. In implicit mode the records of the previous call are accepted first."""
        self._check()
        if self.implicit:
            self._accept_delivered()
        limit = max_records or self._max_poll_records
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            if self._buffer:
                out = self._drain(limit)
                if out:
                    return out
            self._check()
            remaining_ms = max(0, int((deadline - loop.time()) * 1000))
            await self._fetch_round(min(self._max_wait_ms, remaining_ms))
            if not self._buffer and loop.time() >= deadline:
                return {}

    async def getone(self) -> ShareRecord:
        while not self._iter:
            for records in (await self.getmany(timeout_ms=self._max_wait_ms)).values():
                self._iter.extend(records)
        return self._iter.popleft()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ShareRecord:
        try:
            return await self.getone()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    # -- acknowledging ---------------------------------------------------------------------------
    def acknowledge(self, record: ShareRecord, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Queue ACCEPT, RELEASE or REJECT for ``record``; sent with the next fetch or ``commit``.
        (Also allowed in implicit mode: it replaces the implicit ACCEPT of that record.)"""
        inf = self._inflight.get(self._tp(record))
        if inf is None:
            raise AckStateError(f"{record.topic}-{record.partition}@{record.offset} is not acquired by this consumer")
        inf.acknowledge(record.offset, AcknowledgeType(ack_type))

    async def commit(self) -> dict[TopicPartition, Exception | None]:
        """Send every pending ack now (ShareAcknowledge) and return the per-partition outcome of all
        acks sent since the last commit (piggybacked ones included): ``None`` or the error."""
        self._check()
        if self.implicit:
            self._accept_delivered()
        nodes = {inf.node for inf in self._inflight.values() if inf.pending}
        for node in nodes:
            async with self._lock(node):
                acks = self._take_acks(node)
                if acks:
                    await self._send_acks(node, self._session(node), acks)
        results, self._results = self._results, {}
        return results

    async def renew(self, record: ShareRecord) -> None:
        """Restart the acquisition lock of ``record`` (RENEW, ShareAcknowledge v2); it stays
        acquired. Raises :class:`UnsupportedVersionError` on a v1-only broker."""
        self._check()
        tp = self._tp(record)
        inf = self._inflight.get(tp)
        if inf is None or record.offset not in inf.acquired or record.offset in inf.pending:
            raise AckStateError(f"{record.topic}-{record.partition}@{record.offset} is not acquired by this consumer")
        conn = self._conn(inf.node)
        async with self._lock(inf.node):
            await conn.ensure()
            version = conn.versions[protocol.SHARE_ACKNOWLEDGE]
            if version < 2:
                raise UnsupportedVersionError(
                    f"RENEW needs ShareAcknowledge v2; node {inf.node} offers v{version} only")
            session = self._session(inf.node)
            if not session.open or session.generation != conn.generation:
                raise AckStateError("the share session that acquired the record has ended")
            req = protocol.share_acknowledge(version, group_id=self.group_id, member_id=self.member_id,
                                             epoch=session.ack_epoch(), renew=True,
                                             acks={tp: [AckBatch(record.offset, record.offset, (4,))]})
            try:
                resp = await conn.call(req)
            except _TRANSPORT as exc:
                self._node_failed(inf.node, exc)
                raise AcknowledgementError(None, f"renew not delivered: {exc}") from exc
            session.acknowledged(resp.error_code)
            errors = [resp.error_code] + [p.error_code for t in resp.responses for p in t.partitions]
            bad = next((e for e in errors if e != ErrorCode.none), None)
            if resp.error_code in SESSION_ERRORS:
                self._drop_node(inf.node, resp.error_code)
            if bad is not None:
                raise AcknowledgementError(bad, resp.error_message)

    # -- internals: records ----------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed or not self._started:
            raise ConsumerStoppedError("the consumer is closed" if self._closed else "call start() first")
        if self._fatal is not None:
            raise self._fatal

    def _tp(self, record: ShareRecord) -> Tp:
        topic_id = self._cluster.ids.get(record.topic)
        if topic_id is None:
            raise AckStateError(f"unknown topic {record.topic!r}")
        return (topic_id, record.partition)

    def _drain(self, limit: int) -> dict[TopicPartition, list[ShareRecord]]:
        out: dict[TopicPartition, list[ShareRecord]] = {}
        n = 0
        while self._buffer and n < limit:
            chunk = self._buffer[0]
            take = chunk.records[:limit - n]
            if len(take) == len(chunk.records):
                self._buffer.popleft()
            else:
                chunk.records = chunk.records[len(take):]
            inf = self._inflight.get(chunk.tp)
            if inf is None:
                continue  # its session ended meanwhile: the broker released them
            acquired = inf.acquired
            kept = [r for r in take if r.offset in acquired]
            inf.delivered.update(r.offset for r in kept)
            if kept:
                out.setdefault(chunk.key, []).extend(kept)
                n += len(kept)
        return out

    def _accept_delivered(self) -> None:
        """Implicit mode: ACCEPT what the application has seen — every record handed out except
        those ``async for`` fetched and has not yielded yet."""
        unseen: dict[Tp, set[int]] = {}
        for rec in self._iter:
            unseen.setdefault(self._tp(rec), set()).add(rec.offset)
        for tp, inf in self._inflight.items():
            inf.accept_delivered(skip=unseen.get(tp, ()))

    def _take_records(self, node: int, tp: Tp, part: Any) -> None:
        inf = self._inflight.get(tp)
        if inf is None or inf.node != node:
            if inf is not None:
                self._lose(tp, inf, ErrorCode.not_leader_or_follower)
            inf = self._inflight[tp] = PartitionInFlight(node)
        ranges = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count)) for a in part.acquired_records]
        try:
            raws = {r.offset: r for r in decode_batches(part.records or b"", check_crcs=self._check_crcs)}
        except RecordDecodeError as exc:
            log.error("cannot decode records of %s-%s (released for another consumer): %s",
                      self._cluster.names.get(tp[0], tp[0]), tp[1], exc)
            for first, last, _ in ranges:
                for offset in range(first, last + 1):
                    inf.pending[offset] = AcknowledgeType.RELEASE
            return
        topic = self._cluster.names.get(tp[0], str(tp[0]))
        self._cluster.ids.setdefault(topic, tp[0])
        key_de, value_de = self._key_de, self._value_de
        partition, counts = tp[1], inf.acquired
        records = [ShareRecord(topic, partition, offset, r.timestamp, r.timestamp_type,
                               key_de(r.key) if key_de else r.key, value_de(r.value) if value_de else r.value,
                               list(r.headers), counts[offset])
                   for offset in inf.add_acquired(ranges, raws) for r in (raws[offset],)]
        if records:
            self._buffer.append(_Chunk(tp, TopicPartition(topic, partition), records))

    # -- internals: acks -------------------------------------------------------------------------
    def _take_acks(self, node: int) -> dict[Tp, list[AckBatch]]:
        out = {}
        for tp, inf in list(self._inflight.items()):
            if inf.node == node and inf.pending:
                out[tp] = inf.take_pending()
            if inf.empty:
                del self._inflight[tp]
        return out

    def _result(self, tp: Tp, error: Exception | None) -> None:
        key = TopicPartition(self._cluster.names.get(tp[0], str(tp[0])), tp[1])
        if error is not None:
            log.debug("acknowledgement of %s failed: %s", key, error)
            self._results[key] = error
        else:
            self._results.setdefault(key, None)

    def _results_from(self, acks: dict[Tp, Any], answered: dict[Tp, tuple[ErrorCode, str | None]]) -> None:
        for tp in acks:
            code, msg = answered.get(tp, (ErrorCode.invalid_record_state, "partition missing from the answer"))
            self._result(tp, None if code == ErrorCode.none else AcknowledgementError(code, msg))

    async def _send_acks(self, node: int, session: ShareSession, acks: dict[Tp, list[AckBatch]],
                         *, epoch: int | None = None) -> None:
        """ShareAcknowledge ``acks`` to ``node`` (caller holds the node's lock)."""
        conn = self._conn(node)
        try:
            await conn.ensure()
        except _TRANSPORT as exc:
            self._node_failed(node, exc)
        if session.open and session.generation != conn.generation:
            self._drop_node(node, ErrorCode.share_session_not_found)  # reconnected: the broker released them
        if not session.open:
            for tp in acks:
                self._result(tp, AcknowledgementError(ErrorCode.share_session_not_found, "records were released"))
            return
        if epoch is None and not acks:
            return
        version = conn.versions.get(protocol.SHARE_ACKNOWLEDGE, 1)
        req = protocol.share_acknowledge(version, group_id=self.group_id, member_id=self.member_id,
                                         epoch=session.ack_epoch() if epoch is None else epoch, acks=acks)
        try:
            resp = await conn.call(req)
        except _TRANSPORT as exc:
            for tp in acks:
                self._result(tp, AcknowledgementError(None, f"not delivered: {exc}"))
            self._node_failed(node, exc)
            return
        if epoch is None:
            session.acknowledged(resp.error_code)
        if resp.error_code != ErrorCode.none:
            for tp in acks:
                self._result(tp, AcknowledgementError(resp.error_code, resp.error_message))
            if resp.error_code in SESSION_ERRORS:
                self._drop_node(node, resp.error_code)
            return
        self._results_from(acks, {(t.topic_id, int(p.partition_index)): (p.error_code, p.error_message)
                                  for t in resp.responses for p in t.partitions})

    # -- internals: fetching ---------------------------------------------------------------------
    async def _fetch_round(self, max_wait_ms: int) -> None:
        self._assignment_changed.clear()  # before looking at the assignment: no change goes unseen
        if self._cluster.stale:
            try:
                await self._cluster.refresh(self._membership.subscription)
            except _TRANSPORT as exc:
                log.debug("metadata refresh failed: %s", exc)
        by_node: dict[int, set[Tp]] = {}
        for tp in self._assigned:
            leader = self._cluster.leaders.get(tp, -1)
            if leader in self._cluster.nodes:
                by_node.setdefault(leader, set()).add(tp)
            else:
                self._cluster.stale = True
        nodes = set(by_node) | {inf.node for inf in self._inflight.values() if inf.pending}
        if not by_node:
            # nothing to fetch: still flush acks, then wait for an assignment (or the deadline)
            if nodes:
                await asyncio.gather(*(self._fetch_node(n, set(), 0) for n in nodes))
            try:
                async with asyncio.timeout(max(max_wait_ms, 10) / 1000):
                    await self._assignment_changed.wait()
            except TimeoutError:
                pass
            return
        await asyncio.gather(*(self._fetch_node(n, by_node.get(n, set()), max_wait_ms) for n in nodes))

    async def _fetch_node(self, node: int, wanted: set[Tp], max_wait_ms: int) -> None:
        async with self._lock(node):
            conn, session = self._conn(node), self._session(node)
            try:
                await conn.ensure()
            except _TRANSPORT as exc:
                self._node_failed(node, exc)
                await asyncio.sleep(self._backoff_s)
                return
            if session.open and session.generation != conn.generation:
                self._drop_node(node, ErrorCode.share_session_not_found)  # reconnected: the session is gone
            acks = self._take_acks(node)
            piggy = {tp: b for tp, b in acks.items() if tp in wanted and session.open}
            direct = {tp: b for tp, b in acks.items() if tp not in piggy}
            if direct:
                await self._send_acks(node, session, direct)
            if not wanted:
                return
            plan = session.fetch_plan(wanted, piggy)
            req = protocol.share_fetch(
                conn.versions[protocol.SHARE_FETCH], group_id=self.group_id, member_id=self.member_id,
                epoch=plan.epoch, max_wait_ms=max_wait_ms, min_bytes=self._min_bytes, max_bytes=self._max_bytes,
                max_records=self._max_poll_records, batch_size=self._max_poll_records, listed=plan.listed,
                acks=piggy, forgotten=plan.forgotten, acquire_mode=self._acquire_mode)
            try:
                resp = await conn.call(req, timeout_s=max_wait_ms / 1000 + self._timeout_s)
            except _TRANSPORT as exc:
                for tp in piggy:
                    self._result(tp, AcknowledgementError(None, f"not delivered: {exc}"))
                self._node_failed(node, exc)
                await asyncio.sleep(self._backoff_s)
                return
            session.fetched(plan, resp.error_code)
            if resp.error_code != ErrorCode.none:
                for tp in piggy:
                    self._result(tp, AcknowledgementError(resp.error_code, resp.error_message))
                if resp.error_code in SESSION_ERRORS:
                    self._drop_node(node, resp.error_code)
                else:
                    log.warning("ShareFetch to node %s failed: %s %s", node, resp.error_code.name,
                                resp.error_message or "")
                await asyncio.sleep(self._backoff_s)
                return
            if plan.epoch == 0:
                session.generation = conn.generation
            self.acquisition_lock_timeout_ms = int(resp.acquisition_lock_timeout.total_seconds() * 1000)
            for ep in resp.node_endpoints:
                self._cluster.learn_node(ep.node_id, ep.host, ep.port)
            answered = {}
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

    # -- internals: nodes, sessions, assignment --------------------------------------------------
    def _lock(self, node: int) -> asyncio.Lock:
        return self._locks.setdefault(node, asyncio.Lock())

    def _session(self, node: int) -> ShareSession:
        return self._sessions.setdefault(node, ShareSession())

    def _conn(self, node: int):
        return self._cluster.conn(node)

    def _lose(self, tp: Tp, inf: PartitionInFlight, code: ErrorCode) -> None:
        if inf.drop():
            self._result(tp, AcknowledgementError(code, "the share session ended; the records were released"))
        self._inflight.pop(tp, None)
        if self._buffer:
            self._buffer = collections.deque(c for c in self._buffer if c.tp != tp)

    def _drop_node(self, node: int, code: ErrorCode) -> None:
        """The session at ``node`` is gone: its records were released by the broker."""
        self._session(node).reset()
        for tp, inf in list(self._inflight.items()):
            if inf.node == node:
                self._lose(tp, inf, code)

    def _node_failed(self, node: int, exc: BaseException) -> None:
        log.debug("node %s failed: %s", node, exc)
        self._drop_node(node, ErrorCode.network_exception)
        self._cluster.stale = True

    def _set_fatal(self, error: ShareConsumerError) -> None:
        self._fatal = error
        self._assignment_changed.set()

    async def _apply_assignment(self) -> None:
        """The heartbeat brought a new assignment (topic ids): resolve names and leaders first."""
        c = self._cluster
        tps = frozenset((tid, p) for tid, parts in self._membership.assignment.items() for p in parts)
        if any(tp[0] not in c.names or tp not in c.leaders for tp in tps):
            try:
                await c.refresh(self._membership.subscription)
            except _TRANSPORT as exc:
                log.debug("metadata refresh failed: %s", exc)
                c.stale = True
            except AuthenticationFailedError as exc:
                self._set_fatal(exc)
                return
        if tps != self._assigned:
            log.debug("share group %s: assignment %s", self.group_id, sorted(tps, key=str))
            self._assigned = tps
            self._assignment_changed.set()
