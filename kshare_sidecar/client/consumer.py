"""``ShareConsumer``: an asyncio share-group consumer in aiokafka's shape (the thin I/O layer).

Why here and this way: Python's only share consumer (confluent-kafka's) is synchronous and v1-only
(no RENEW); asyncio services need one that speaks the protocol itself. The rules live in pure
modules (``membership``, ``session``, ``acks``, ``records``); this module is the public facade
and :mod:`.fetcher` (Kafka's ShareConsumeRequestManager) moves the requests and keeps their books:

- one background task heartbeats the group coordinator at the interval it returns
  (:class:`~.membership.Membership` decides rejoin / coordinator lookup / fatal);
- ``getmany`` first turns the previous poll's records into ACCEPTs (implicit mode), then sends
  one ShareFetch per node leading an assigned partition, concurrently, each carrying that node's
  pending acks (acks for partitions the fetch does not list go by ShareAcknowledge first);
- **prefetch** (on by default): when ``getmany`` hands records out and nothing is left buffered,
  the next ShareFetch goes out at once, as librdkafka's thread fetches while the application
  works, so the next ``getmany`` finds records instead of waiting a round trip. It carries the
  acks pending at that moment — never those of the records just handed out: in implicit mode
  they are accepted only when the application asks again, and go with the fetch after. It waits
  for nothing (MaxWaitMs 0; an empty answer leaves the long poll to ``getmany``) and is one
  ShareFetch per node ahead at most, so the records it holds locked are at most one poll's
  (``max_poll_records``); ``commit``, ``renew`` and ``close`` wait for it (a round trip). One
  that comes back empty turns it off for the next ``PREFETCH_BACKOFF_POLLS`` polls: the share-
  partition's window is full of the records being handled (a producer batch larger than
  ``share.partition.max.record.locks`` — 100-byte records — is acquired whole) or the log is
  drained, and every fetch sent ahead would be a round trip for nothing;
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
from typing import Any, Self

from aiokafka.structs import TopicPartition

from .acks import AcknowledgeType, RangesInFlight
from .cluster import TRANSPORT_ERRORS as _TRANSPORT
from .cluster import Cluster, Tp, parse_bootstrap
from .errors import AckStateError, AuthenticationFailedError, ConsumerStoppedError, ShareConsumerError
from .fetcher import Deserializer, FetchConfig, ShareConsumeRequestManager
from .heartbeat import Heartbeat
from .membership import Membership
from .records import ShareRecord
from .security import client_security
from .session import FINAL_EPOCH

log = logging.getLogger("kshare.client")

#: polls without a fetch sent ahead after one came back empty: a window-bound consumer (100-byte
#: records; docs/benchmarks.md) wastes one round trip in this many + 1 polls, not in every one
PREFETCH_BACKOFF_POLLS = 8


class ShareConsumer:
    """Consume a share group. Use ``async with ShareConsumer(...) as c`` (or ``start``/``close``)."""

    def __init__(self, *topics: str, bootstrap_servers: str | list[str], group_id: str,
                 client_id: str = "kshare-asyncio", acknowledgement_mode: str = "implicit",
                 max_poll_records: int = 500, fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 52_428_800, request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None,
                 check_crcs: bool = True, max_share_version: int = 2,
                 share_acquire_mode: str = "batch_optimized", security_protocol: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None, sasl_mechanism: str | None = None,
                 sasl_plain_username: str | None = None, sasl_plain_password: str | None = None,
                 sasl_oauth_token_provider: Any = None, offsets_only: bool = False, prefetch: bool = True) -> None:
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError("acknowledgement_mode must be 'implicit' or 'explicit'")
        if offsets_only and acknowledgement_mode != "explicit":
            raise ValueError("offsets_only=True needs acknowledgement_mode='explicit' (nothing is handed out "
                             "to accept implicitly; acknowledge ranges with acknowledge_offsets)")
        if share_acquire_mode not in ("batch_optimized", "record_limit"):
            raise ValueError("share_acquire_mode must be 'batch_optimized' or 'record_limit'")
        self.group_id, self.client_id = group_id, client_id
        self.implicit = acknowledgement_mode == "implicit"
        self._max_poll_records, self._max_wait_ms = max_poll_records, fetch_max_wait_ms
        self._timeout_s, self._backoff_s = request_timeout_ms / 1000, retry_backoff_ms / 1000
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
        #: ShareFetch v2 ShareAcquireMode (record_limit: at most max_poll_records; v1 ignores it)
        acquire_mode = 1 if share_acquire_mode == "record_limit" else 0
        self._requests = ShareConsumeRequestManager(group_id, self._membership, self._cluster, FetchConfig(
            max_poll_records=max_poll_records, min_bytes=fetch_min_bytes, max_bytes=fetch_max_bytes,
            acquire_mode=acquire_mode, timeout_s=self._timeout_s, backoff_s=self._backoff_s, check_crcs=check_crcs,
            key_deserializer=key_deserializer, value_deserializer=value_deserializer, offsets_only=offsets_only))
        self._assigned: frozenset[Tp] = frozenset()
        #: the ShareFetch sent ahead while the application handles what getmany returned
        self._prefetch_enabled = prefetch and not offsets_only
        self._prefetch: asyncio.Task[bool] | None = None
        self._prefetch_skips = 0  # polls left without a fetch sent ahead (one came back empty)
        #: handed out by ``getmany`` to ``getone`` / ``async for``, not yielded yet
        self._iter: collections.deque[ShareRecord] = collections.deque()
        self._fatal: Exception | None = None
        self._assignment_changed = asyncio.Event()
        self._started = self._closed = False

    @property
    def acquisition_lock_timeout_ms(self) -> int | None:
        """Lock duration the brokers last reported (ms)."""
        return self._requests.acquisition_lock_timeout_ms

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
        try:
            await self._prefetched()  # its records are released with the rest by the final epoch
        except (*_TRANSPORT, ShareConsumerError) as exc:
            log.debug("the ShareFetch sent ahead failed: %s", exc)
        if self.implicit:
            self._accept_delivered()
            self._iter.clear()  # never seen, not accepted: the final epoch releases them
        await self._heartbeat.stop(leave=False)
        requests = self._requests
        for node, session in list(requests.sessions.items()):
            async with requests.lock(node):
                if session.open:
                    acks = requests.take_acks(node)
                    try:
                        async with asyncio.timeout(self._timeout_s):
                            await requests.send_acks(node, session, acks, epoch=FINAL_EPOCH)
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

    @property
    def joined(self) -> bool:
        """Whether this member is in the group (the coordinator gave it a member epoch)."""
        return self._membership.joined

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
        if self._requests.config.offsets_only:
            raise ShareConsumerError("an offsets_only consumer decodes no records: use getranges()")
        if self.implicit:
            self._accept_delivered()
        limit = max_records or self._max_poll_records
        out = await self._poll(timeout_ms, lambda: self._requests.drain(limit))
        if out and not self._requests.buffer and self._prefetch_enabled:
            if self._prefetch_skips:
                self._prefetch_skips -= 1
            else:
                self._prefetch = asyncio.ensure_future(self._requests.fetch(self._assigned, 0))
        return out

    async def getranges(self, timeout_ms: int = 0) -> dict[TopicPartition, list[tuple[int, int, int]]]:
        """Offsets-only mode: the ranges acquired for this member, ``{TopicPartition: [(first,
        last, delivery_count)]}``; ``{}`` if none came within ``timeout_ms``. Records are never
        decoded: the ranges may include offsets without a data record (compaction gaps, control
        records). Pending acks go piggybacked on the ShareFetch that acquires."""
        self._check()
        if not self._requests.config.offsets_only:
            raise ShareConsumerError("getranges() needs ShareConsumer(offsets_only=True)")
        return await self._poll(timeout_ms, self._requests.drain_ranges)

    async def _poll(self, timeout_ms: int, drain: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        requests = self._requests
        while True:
            if requests.buffer:
                out = drain()
                if out:
                    return out
            if self._prefetch is not None:
                await self._prefetched()
                continue
            self._check()
            remaining_ms = max(0, int((deadline - loop.time()) * 1000))
            await self._fetch_round(min(self._max_wait_ms, remaining_ms))
            if not requests.buffer and loop.time() >= deadline:
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
        tp = self._tp(record)
        inf = self._requests.inflight.get(tp)
        if (inf is None or record.offset not in inf.acquired) and self._requests.released_ack(tp, record.offset):
            return
        if self._requests.stale_ack(tp, inf, record.offset, record.delivery_count):
            return
        if inf is None:
            raise AckStateError(f"{record.topic}-{record.partition}@{record.offset} is not acquired by this consumer")
        inf.acknowledge(record.offset, AcknowledgeType(ack_type))

    def acknowledge_offsets(self, tp: TopicPartition, first: int, last: int,
                            ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Offsets-only mode: queue one type for ``first..last`` of ``tp``, inside one range that
        ``getranges`` returned; sent with the next fetch or ``commit``."""
        topic_id = self._cluster.ids.get(tp.topic)
        inf = self._requests.inflight.get((topic_id, tp.partition)) if topic_id is not None else None
        if not isinstance(inf, RangesInFlight):
            raise AckStateError(f"{tp.topic}-{tp.partition}@{first}..{last} is not acquired by this consumer")
        inf.acknowledge(first, last, AcknowledgeType(ack_type))

    async def commit(self) -> dict[TopicPartition, Exception | None]:
        """Send every pending ack now (ShareAcknowledge) and return the per-partition outcome of all
        acks sent since the last commit (piggybacked ones included): ``None`` or the error."""
        self._check()
        if self.implicit:
            self._accept_delivered()
        await self._prefetched()
        return await self._requests.commit()

    async def renew(self, record: ShareRecord) -> None:
        """Restart the acquisition lock of ``record`` (RENEW, ShareAcknowledge v2); it stays
        acquired. Raises :class:`UnsupportedVersionError` on a v1-only broker."""
        self._check()
        await self._prefetched()
        await self._requests.renew(self._tp(record), record)

    # -- internals -------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed or not self._started:
            raise ConsumerStoppedError("the consumer is closed" if self._closed else "call start() first")
        if self._fatal is not None:
            raise self._fatal

    async def _prefetched(self) -> None:
        """Wait for the ShareFetch sent ahead (its records land in the buffer); its failure is
        raised here, to the caller that would have sent it."""
        task, self._prefetch = self._prefetch, None
        if task is not None:
            await task
            if not self._requests.buffer:  # nothing was there to take ahead: stop trying for a while
                self._prefetch_skips = PREFETCH_BACKOFF_POLLS

    def _tp(self, record: ShareRecord) -> Tp:
        topic_id = self._cluster.ids.get(record.topic)
        if topic_id is None:
            raise AckStateError(f"unknown topic {record.topic!r}")
        return (topic_id, record.partition)

    def _accept_delivered(self) -> None:
        """Implicit mode: ACCEPT what the application has seen — every record handed out except
        those ``async for`` fetched and has not yielded yet."""
        unseen: dict[Tp, set[int]] = {}
        for rec in self._iter:
            unseen.setdefault(self._tp(rec), set()).add(rec.offset)
        self._requests.accept_delivered(unseen)

    async def _fetch_round(self, max_wait_ms: int) -> None:
        self._assignment_changed.clear()  # before looking at the assignment: no change goes unseen
        if not await self._requests.fetch(self._assigned, max_wait_ms):
            try:  # nothing to fetch: wait for an assignment (or the deadline)
                async with asyncio.timeout(max(max_wait_ms, 10) / 1000):
                    await self._assignment_changed.wait()
            except TimeoutError:
                pass

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
