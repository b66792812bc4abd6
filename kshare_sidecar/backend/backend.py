"""The backend facade: topics with stable IDs, raw batch reads, offsets. One per sidecar.

Built on aiokafka's ``AIOKafkaClient`` for what it does well (bootstrap, broker discovery,
TLS/SASL, pipelined connections per broker) and on kio for the request versions aiokafka lacks
(see :mod:`.kio_bridge`). Callers only ever see :mod:`.types` values and :mod:`.errors`.

Reads go straight to the partition leader named by our own Metadata. On a stale-metadata error
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, epoch errors, a broken connection) the
backend refreshes metadata for the topics involved and retries once; after that the error is
reported, never looped on.

Long polls (``max_wait_ms > 0``) use a second connection per broker: Kafka handles one request
per connection at a time, so a parked Fetch would otherwise delay every other read to that broker.

Fetches go over raw connections of their own (:mod:`.fetchconn`: each answer received into one
buffer and read in place, records never copied) once the backend is started with the security
settings they need (``security``, or plaintext); otherwise — a backend given only aiokafka's
``client_options`` for TLS/SASL, the unit tests' fake client — through aiokafka and kio.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.errors import KafkaError, RequestTimedOutError

from ..metrics import STATS
from ..protocol.types import TopicPartition
from . import errors as E
from .aiokafka_setup import bound
from .errors import BackendError, BackendUnavailableError, UnknownTopicError, error_for
from .fetchconn import FetchConns
from .health import BackendHealth, Suspension, aiokafka_gate, drop_connections, watch_health
from .kio_bridge import KioRequest
from .kio_bridge import send as kio_send
from .metadata import CachedTopic, MetadataAnswer, TopicCache, metadata_request, parse_metadata
from .name_refresh import NameRefresher
from .offsets import OffsetLookups
from .reads import (
    PartitionRead,
    empty_result,
    fetch_request,
    route,
    to_result,
)
from .topic_ids import InMemoryTopicIdStore, TopicIdStore
from .types import FetchResult, TopicInfo

if TYPE_CHECKING:
    from .connection_states import ClusterConnectionStates
    from .security import BackendSecurity

log = logging.getLogger(__name__)


class Backend(OffsetLookups):
    """Asyncio access to the backend cluster's user topics.

    ``topic_id_store`` mints IDs when the backend has none (defaults to an in-memory store, fine
    for tests; production passes the persister-backed one). ``internal_topics`` are extra names
    to treat as internal (e.g. kshare's own state topic) besides those the backend flags.
    ``client_options`` go to ``AIOKafkaClient`` (security_protocol, ssl_context, sasl_*...).
    ``backend_topic_ids=False`` ignores the backend's IDs and always mints (useful when state
    must survive a move to another cluster whose IDs differ, and to test the minting path).
    ``security``: the same settings as ``client_options``, for the raw Fetch connections;
    ``connection_states``: the setup timeouts of both kinds of connection (backend/clients.py's).
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        *,
        topic_id_store: TopicIdStore | None = None,
        internal_topics: Iterable[str] = (),
        backend_topic_ids: bool = True,
        metadata_max_age_s: float = 5.0,
        request_timeout_ms: int = 30_000,
        client_id: str = "kshare-sidecar",
        client_options: dict[str, Any] | None = None,
        security: BackendSecurity | None = None,
        connection_states: ClusterConnectionStates | None = None,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._ids = topic_id_store if topic_id_store is not None else InMemoryTopicIdStore()
        self._extra_internal = frozenset(internal_topics)
        self._use_backend_ids = backend_topic_ids
        self._max_age = metadata_max_age_s
        self._request_timeout_ms = request_timeout_ms
        self._client_id = client_id
        self._client_options = dict(client_options or {})
        self._client: AIOKafkaClient | None = None
        self._security, self._setup = security, connection_states
        self._fetch_conns: FetchConns | None = None
        self._cache = TopicCache()
        self._full_refresh: asyncio.Future[None] | None = None
        #: aged entries re-read once however many heartbeats and fetches find them aged meanwhile
        # looked up at each call: tests replace _refresh_names
        self._names = NameRefresher(self._cache, lambda names: self._refresh_names(names),
                                    lambda: self._max_age)
        self.metadata_version: int | None = None  # the Metadata version last negotiated
        #: Up/down from a periodic probe, told in a handful of lines per outage (health.py).
        self.health = BackendHealth(gate=aiokafka_gate())
        self._health_task: asyncio.Task[None] | None = None
        #: a single sidecar's lease (cluster/lease.py): renewed from each answered probe's send time
        self.lease: Any = None
        #: more connections to drop when that lease lapses and when it is renewed (the persister's)
        self.lease_droppers: list[Callable[[], int]] = []
        #: how long a lookup waits for a refresh of topics it has cached (describe_topics)
        self.stale_wait_s = 2.0
        self.suspension = Suspension()  # a lapsed cluster member's backend: every request fails at once

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        client = bound(AIOKafkaClient(bootstrap_servers=self._bootstrap, client_id=self._client_id,
                                      request_timeout_ms=self._request_timeout_ms, **self._client_options), self._setup)
        try:
            await client.bootstrap()
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            await client.close()
            raise BackendUnavailableError(E.NETWORK_EXCEPTION, f"cannot bootstrap from {self._bootstrap}: {exc}") from None
        self._client = client
        if self._security is not None or self._client_options.get("security_protocol", "PLAINTEXT") == "PLAINTEXT":
            self._fetch_conns = FetchConns(self._broker_address, security=self._security, client_id=self._client_id,
                                           request_timeout_ms=self._request_timeout_ms, setup=self._setup)
        try:
            await self.refresh()
        except BaseException:
            self._client = None
            await client.close()
            raise
        self._health_task = asyncio.create_task(self._watch_health(), name="kshare-backend-health")

    async def _watch_health(self, up_every_s: float = 2.0, down_every_s: float = 1.0) -> None:
        """Probe the backend (Metadata for no topics: brokers only) and keep :attr:`health` current."""
        await watch_health(lambda: self._metadata(()), self.health, lambda: self.lease, self._drop_stalled,
                           up_every_s=up_every_s, down_every_s=down_every_s)

    def _drop_stalled(self, reason: str) -> None:
        """A single sidecar's lease lapsed, or came back: close every backend connection. A cut
        connection resumes only at TCP's next retransmission, backed off to tens of seconds by the
        end of a 30 s cut (state writes on one held partitions 25 s past the heal); a new one at once."""
        closed = drop_connections(self._client)
        if self._fetch_conns is not None:
            self._fetch_conns.drop_all(reason)
        for drop in self.lease_droppers:
            try:
                closed += drop()
            except Exception:  # noqa: BLE001 - best effort: the next request reconnects anyway
                log.exception("dropping backend connections failed")
        log.warning("%s: %d backend connections closed", reason, closed)

    def suspend(self, reason: str) -> int:
        """Every request fails at once until :meth:`resume` (backend/health.py, ``Suspension``)."""
        dropped = self.suspension.suspend(reason, self._client)
        if self._fetch_conns is not None:
            self._fetch_conns.drop_all(reason)
        return dropped

    def resume(self) -> None:
        self.suspension.resume()

    async def close(self) -> None:
        await self._names.close()
        if self._health_task is not None:
            self._health_task.cancel()
            await asyncio.gather(self._health_task, return_exceptions=True)
            self._health_task = None
        if self._fetch_conns is not None:
            conns, self._fetch_conns = self._fetch_conns, None
            await conns.close()
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def __aenter__(self) -> Backend:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ topics
    async def refresh(self, names: Iterable[str] | None = None) -> None:
        """Re-read metadata for ``names`` (None = every topic; concurrent full refreshes share one)."""
        if names is not None:
            await self._refresh_names(tuple(names))
            return
        if self._full_refresh is not None:
            await asyncio.shield(self._full_refresh)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._full_refresh = fut
        try:
            answer = await self._metadata(None)
            await self._apply(answer, full=True)
            fut.set_result(None)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            self._full_refresh = None

    async def describe_topics(self, names: Iterable[str] | None = None, *,
                              stale_ok: bool = False) -> dict[str, TopicInfo]:
        """Topics by name. ``None`` = all non-internal topics. Unknown names are simply absent.

        Served from the cache; refreshed when older than ``metadata_max_age_s`` or when a name is
        not cached yet (a topic created a moment ago must show up at once). ``stale_ok``: an aged
        entry is answered as cached and re-read in the background (heartbeats: the group
        coordinator must not wait a backend round trip every ``metadata_max_age_s`` — at a few
        hundred heartbeats a second over few topics, most of them waited for one; the change
        reaches the group at its next heartbeat, as Kafka's coordinator sees its metadata image).
        """
        if stale_ok and names is not None:
            wanted = list(dict.fromkeys(names))
            if self._names.stale_ok(wanted):
                return {n: self._cache.by_name[n].info for n in wanted}
        if names is None:
            if self._cache.age() > self._max_age:
                await self._refreshed(self.refresh(), stale_ok=bool(self._cache.by_name))
            return {n: c.info for n, c in self._cache.by_name.items() if not c.info.internal}
        wanted = list(dict.fromkeys(names))
        missing = self._names.aged(wanted)
        if missing:
            await self._refreshed(self._names.refresh(missing),
                                  stale_ok=all(n in self._cache.by_name for n in missing))
        return {n: self._cache.by_name[n].info for n in wanted if n in self._cache.by_name}

    async def _refreshed(self, refresh: Any, *, stale_ok: bool) -> None:
        """Await a refresh; with ``stale_ok`` (all cached, only old) at most ``stale_wait_s``, not at
        all while the health probe finds the backend down, the rest in the background: an old entry
        beats a timeout (a Metadata answer after 30-40 s kept a client from asking another broker).
        Nor is a suspended backend asked (backend/health.py): a lapsed cluster member answers Metadata
        from what it has — an error there kept a librdkafka consumer asking that sidecar, which
        named no leader, for a minute instead of the sidecars that did."""
        if not stale_ok:
            await refresh
            return
        if self.suspension.reason is not None:
            refresh.close()  # never started: the outage is told by the health lines
            return
        task = asyncio.ensure_future(refresh)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        done, _ = await asyncio.wait({task}, timeout=self.stale_wait_s if self.health.up else 0)
        if done and self.suspension.reason is None:  # suspended meanwhile: its failure says nothing new
            task.result()

    async def refresh_topics(self, names: Iterable[str]) -> None:
        """Re-read ``names`` from the backend now, whatever their cache age (Metadata saw a newer
        partition count in the backend's own answer: CreatePartitions a moment ago)."""
        await self._refresh_names(tuple(dict.fromkeys(names)))

    async def forget_deleted(self, names: Iterable[str], backend_ids: Iterable[uuid.UUID] = ()) -> None:
        """Topics a DeleteTopics just deleted (it passed through the sidecar and succeeded): out of
        the cache now, so their share-partitions answer UNKNOWN_TOPIC_ID at once, as Kafka's do
        (``SharePartitionCache.slot_for``), instead of after the cache's age; and kept out when a broker's
        metadata still lists them a moment longer."""
        cache = self._cache
        ids = set(backend_ids)
        gone = {n for n in names if n in cache.by_name}
        gone |= {c.info.name for c in cache.by_name.values() if c.meta.backend_id in ids}
        for topic_id in ids:
            cache.mark_deleted(topic_id)
        for name in gone:
            old = cache.drop(name)
            if old is None:
                continue
            if old.meta.backend_id is not None:
                cache.mark_deleted(old.meta.backend_id)
            if old.minted:
                await self._ids.forget(name, old.info.topic_id)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """Cache-only lookup (no I/O) for the hot path; see :meth:`resolve_topic_id`."""
        entry = self._cache.by_id.get(topic_id)
        return entry.info if entry is not None else None

    def topic_by_name(self, name: str) -> TopicInfo | None:
        entry = self._cache.by_name.get(name)
        return entry.info if entry is not None else None

    async def resolve_topic_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """Like :meth:`topic_by_id`, but a miss triggers one full refresh (a new topic)."""
        info = self.topic_by_id(topic_id)
        if info is None:
            await self.refresh()
            info = self.topic_by_id(topic_id)
        return info

    async def _refresh_names(self, names: tuple[str, ...]) -> None:
        if names:
            await self._apply(await self._metadata(names), full=False)

    async def _metadata(self, names: tuple[str, ...] | None) -> MetadataAnswer:
        client = self._require_client()
        nodes = [b.nodeId for b in client.cluster.brokers()]
        random.shuffle(nodes)
        last: BackendError | None = None
        for node in nodes:
            request = metadata_request(names)
            try:
                response = await self._send(node, request)
            except BackendUnavailableError as exc:
                last = exc
                continue
            self.metadata_version = request.version
            return parse_metadata(response, request.version or 0)
        client.force_metadata_update()
        raise last or BackendUnavailableError(E.NETWORK_EXCEPTION, "no backend broker known")

    async def _apply(self, answer: MetadataAnswer, *, full: bool) -> None:
        cache = self._cache
        now = time.monotonic()
        gone = set(answer.unknown) | {n for n, m in answer.topics.items() if m.backend_id in cache.deleted}
        if full:
            gone |= set(cache.by_name) - set(answer.topics)
        for name in gone:
            old = cache.drop(name)
            if old is not None and old.minted:
                await self._ids.forget(name, old.info.topic_id)
        for name, meta in answer.topics.items():
            if name in gone:
                continue
            old = cache.by_name.get(name)
            if meta.backend_id is not None and self._use_backend_ids:
                topic_id, minted = meta.backend_id, False
            else:
                if old is not None and old.minted and len(meta.leaders) < old.info.partitions:
                    # Partition counts never shrink: this is a new topic under an old name.
                    await self._ids.forget(name, old.info.topic_id)
                topic_id, minted = await self._ids.get_or_create(name), True
                if old is None or old.info.topic_id != topic_id:
                    log.info("backend gives no topic ID for %r: using minted %s", name, topic_id)
            internal = meta.internal or name in self._extra_internal
            info = TopicInfo(name, topic_id, len(meta.leaders), internal)
            cache.put(CachedTopic(info, meta, minted, now))
        if full:
            cache.full_refresh_at = now

    # ------------------------------------------------------------------ fetch
    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int,
        max_wait_ms: int = 0,
        isolation_level: int = 0,
    ) -> FetchResult:
        """Read whole batches of one partition from ``offset`` (raw bytes, batch headers parsed).

        OFFSET_OUT_OF_RANGE is *returned* (``error_code`` 1, empty records) with the current log
        start, high watermark and LSO filled in, since callers must react to it (archive records
        below the new log start). Every other error raises a :class:`BackendError`.
        With ``max_wait_ms`` > 0 the backend holds the request until data exists at ``offset``.
        """
        key = (topic, partition)
        result = (await self.fetch_many([PartitionRead(topic, partition, offset, max_bytes)],
                                        max_wait_ms=max_wait_ms, isolation_level=isolation_level))[key]
        if result.error_code not in (0, E.OFFSET_OUT_OF_RANGE):
            raise error_for(result.error_code, f"fetch {topic}[{partition}]@{offset} failed: error {result.error_code}",
                            topic=topic, partition=partition)
        return result

    async def fetch_many(
        self,
        reads: Sequence[PartitionRead],
        *,
        max_wait_ms: int = 0,
        isolation_level: int = 0,
        max_bytes: int | None = None,
    ) -> dict[TopicPartition, FetchResult]:
        """Read several partitions at once: one Fetch per leader broker, sent concurrently.

        Never raises for a partition's error; each result carries its ``error_code`` (Kafka codes,
        see :mod:`.errors`). ``max_bytes`` caps each per-broker response (default: the sum of the
        partitions' limits). Each partition appears at most once in ``reads``.
        """
        self._require_client()
        results: dict[TopicPartition, FetchResult] = {}
        pending = list(reads)
        for attempt in (0, 1):
            if not pending:
                break
            await self._ensure_known({r.topic for r in pending})
            by_leader, errored = route(pending, self._leader)
            results.update(errored)
            outcomes = await asyncio.gather(
                *(self._fetch_from(node, rs, max_wait_ms, isolation_level, max_bytes) for node, rs in by_leader.items())
            )
            for part in outcomes:
                results.update(part)
            retry = [r for r in reads if results[(r.topic, r.partition)].error_code in E.REFRESH_AND_RETRY]
            if attempt == 0 and retry:
                await self._refresh_after_error({r.topic for r in retry})
                pending = retry
            else:
                pending = []
        await self._fill_out_of_range(results, isolation_level)
        return results

    async def _fetch_from(
        self, node: int, reads: list[PartitionRead], max_wait_ms: int, isolation_level: int, max_bytes: int | None
    ) -> dict[TopicPartition, FetchResult]:
        wait = max(0, min(max_wait_ms, self._request_timeout_ms - 5_000))
        if self._fetch_conns is not None:
            return await self._fetch_raw(self._fetch_conns, node, reads, wait, isolation_level, max_bytes)
        group = ConnectionGroup.COORDINATION if wait > 0 else ConnectionGroup.DEFAULT
        request = fetch_request(reads, max_wait_ms=wait, isolation_level=isolation_level, max_bytes=max_bytes)
        try:
            response = await self._send(node, request, group=group)
        except BackendUnavailableError as exc:
            return {(r.topic, r.partition): empty_result(exc.code) for r in reads}
        out: dict[TopicPartition, FetchResult] = {}
        top_error = int(getattr(response, "error_code", 0))
        STATS.backend_fetch_requests += 1  # read amplification
        for t in response.responses:
            for p in t.partitions:
                STATS.backend_fetch_bytes += len(p.records or b"")
                result = out[(t.topic, int(p.partition_index))] = to_result(p)
                STATS.backend_fetch_cut_bytes += result.cut_bytes
        for r in reads:
            out.setdefault((r.topic, r.partition), empty_result(top_error or E.UNKNOWN_SERVER_ERROR))
        return out

    async def _fetch_raw(self, conns: FetchConns, node: int, reads: list[PartitionRead], wait: int,
                         isolation_level: int, max_bytes: int | None) -> dict[TopicPartition, FetchResult]:
        # Fetches go over connections of their own, so a suspension (a lapsed lease) must end them
        # too: a read left waiting on a cut backend held every share fetch of this sidecar for a
        # minute, past librdkafka's socket timeout.
        if self.suspension.reason is not None:
            return {(r.topic, r.partition): empty_result(E.NETWORK_EXCEPTION) for r in reads}
        try:
            return await self.suspension.abortable(conns.fetch(node, reads, max_wait_ms=wait,
                                                               isolation_level=isolation_level, max_bytes=max_bytes))
        except ConnectionAbortedError:
            return {(r.topic, r.partition): empty_result(E.NETWORK_EXCEPTION) for r in reads}
        except BackendUnavailableError as exc:
            if self._client is not None:
                self._client.force_metadata_update()
            return {(r.topic, r.partition): empty_result(exc.code) for r in reads}

    def _broker_address(self, node: int) -> tuple[str, int] | None:
        broker = self._client.cluster.broker_metadata(node) if self._client is not None else None
        return (broker.host, broker.port) if broker is not None else None

    # ------------------------------------------------------------------ plumbing
    def _require_client(self) -> AIOKafkaClient:
        if self._client is None:
            raise BackendError(E.UNKNOWN_SERVER_ERROR, "Backend is not started")
        if self.suspension.reason is not None:
            raise BackendUnavailableError(E.NETWORK_EXCEPTION, self.suspension.reason)
        return self._client

    async def _send(self, node: int, request: KioRequest, *, group: ConnectionGroup = ConnectionGroup.DEFAULT) -> Any:
        client = self._require_client()
        try:
            return await self.suspension.abortable(kio_send(client, node, request, group=group))
        except (RequestTimedOutError, asyncio.TimeoutError):
            raise BackendUnavailableError(E.REQUEST_TIMED_OUT, f"request to broker {node} timed out") from None
        except (KafkaError, OSError) as exc:
            client.force_metadata_update()
            raise BackendUnavailableError(E.NETWORK_EXCEPTION, f"broker {node}: {exc!r}") from None

    async def _ensure_known(self, topics: set[str]) -> None:
        missing = tuple(t for t in topics if t not in self._cache.by_name)
        if missing:
            await self._refresh_names(missing)

    async def _refresh_after_error(self, topics: set[str]) -> None:
        try:
            await self._refresh_names(tuple(topics))
        except BackendUnavailableError as exc:
            log.debug("metadata refresh after a read error failed: %s", exc)  # the retry reports
        # a new leader may be a broker aiokafka has not connected to yet
        client = self._client
        if client is not None:
            missing = {m for t in topics if (c := self._cache.by_name.get(t)) for m in c.meta.leaders}
            if any(n >= 0 and client.cluster.broker_metadata(n) is None for n in missing):
                await client.force_metadata_update()

    def _leader(self, topic: str, partition: int) -> int:
        entry = self._cache.by_name.get(topic)
        if entry is None or not 0 <= partition < len(entry.meta.leaders):
            raise UnknownTopicError(E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic or partition {topic}[{partition}]",
                                    topic=topic, partition=partition)
        return entry.meta.leaders[partition]
