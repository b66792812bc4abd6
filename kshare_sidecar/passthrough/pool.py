"""What the forwarder knows about the backend cluster, and the connections it forwards on.

Two kinds of backend connection, for two reasons:

- **Control** (:class:`BackendPool`): one shared connection per backend broker for the sidecar's
  own small requests — ApiVersions at start, Metadata (leaders and their epochs),
  FindCoordinator (group and transaction coordinators). Answers are cached here.
- **Upstream** (:class:`Upstream`): one set of connections *per client connection*, opened
  lazily per backend broker and closed with the client's connection. A Kafka broker processes
  one request per connection at a time, so sharing an upstream between clients would let one
  client's long-poll Fetch stall everyone's Produce; per-client upstreams also keep each
  client's ordering, quotas and — with ``passthrough.credentials = client`` — its principal: the
  upstream authenticates as the client (a PLAIN password replayed, or a delegation token owned by
  the client's principal, :mod:`.tokens`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..auth.acls import NOT_PROVIDED
from ..backend.brokerconn import BrokerConn, BrokerConnError
from ..backend.errors import LEADER_NOT_AVAILABLE, BackendUnavailableError
from ..protocol.constants import CoordinatorType
from ..protocol.errors import KafkaError
from ..protocol.requests import request_payload
from ..wire import codec
from . import routes

if TYPE_CHECKING:
    from ..backend.clients import BackendClients
    from ..backend.security import BackendSecurity

log = logging.getLogger("kshare.forward")

_ZERO_UUID = uuid.UUID(int=0)
#: Metadata version the pool asks the backend with (topic ids from v10, epochs from v7).
_METADATA_MAX = 12
_FIND_COORDINATOR_MAX = 4  # batched keys from v4; v5+ only adds error codes for txn v2
#: A refresh for an unknown topic/partition at most this often (a client retrying a deleted
#: topic must not turn into a Metadata storm on the backend).
_MIN_REFRESH_S = 0.5

GROUP_KEY, TXN_KEY = CoordinatorType.GROUP, CoordinatorType.TRANSACTION


class BackendUnavailable(BackendUnavailableError):
    """No backend broker could answer (every bootstrap address failed). LEADER_NOT_AVAILABLE:
    retriable, and the code a broker puts on a topic it cannot serve right now."""

    def __init__(self, message: str) -> None:
        super().__init__(LEADER_NOT_AVAILABLE, message)


def make(api_key: int, version: int, **values: Any) -> Any:
    """A kio request entity of ``(api_key, version)`` from the ``values`` its schema has."""
    cls = codec.request_class(api_key, version)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def encode(request: Any, client_id: str | None = "kshare") -> bytes:
    """A request entity as a payload (no size prefix; the correlation id is set on send)."""
    return request_payload(request, 0, client_id)


def decode(api_key: int, version: int, payload: bytes | bytearray | memoryview) -> Any:
    """A response payload (no size prefix) as the kio entity of ``(api_key, version)``. A raw
    answer is a writable buffer, which kio's readers refuse: it is copied (small answers only —
    a raw answer is decoded only to read its error codes or topics)."""
    if not isinstance(payload, bytes):
        payload = bytes(payload)
    _, body = codec.decode_response(payload, codec.response_class(api_key, version))
    return body


@dataclasses.dataclass(slots=True)
class PartitionInfo:
    leader: int
    epoch: int


class BackendPool:
    """Backend brokers, partition leaders and coordinators, from the backend's own answers."""

    def __init__(self, clients: BackendClients, *, request_timeout_s: float = 30.0) -> None:
        self.clients = clients  # every connection made by it, with the backend's one security
        self._bootstrap = clients.bootstrap
        self._timeout = request_timeout_s
        self.brokers: dict[int, tuple[str, int]] = {}
        self.versions: dict[int, tuple[int, int]] = {}
        #: the backend's features from the same ApiVersions answer: (name, min, max) triples
        self.supported_features: list[tuple[str, int, int]] = []
        self.finalized_features: list[tuple[str, int, int]] = []
        self.finalized_features_epoch = -1
        self.cluster_id: str | None = None
        self.controller_id = -1
        self._partitions: dict[str, dict[int, PartitionInfo]] = {}
        self._names: dict[uuid.UUID, str] = {}
        self._coordinators: dict[tuple[int, str], int] = {}
        self._control: dict[int, BrokerConn] = {}
        self._boot: list[BrokerConn] = [clients.broker(h, p, node_id=-1) for h, p in self._bootstrap]
        self._last_refresh = 0.0
        self._refreshing: asyncio.Task[Any] | None = None

    @property
    def security(self) -> BackendSecurity:
        """The backend's security (TLS/SASL), as the sidecar: what the control connections use."""
        return self.clients.security

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Learn the backend's API versions and brokers (raises :class:`BackendUnavailable`)."""
        self.versions = await self._api_versions()
        await self.metadata([])

    async def close(self) -> None:
        for conn in (*self._control.values(), *self._boot):
            await conn.close()

    @property
    def single_node(self) -> int | None:
        """The backend's only broker, when it has exactly one (every route is then trivial)."""
        if len(self.brokers) == 1:
            return next(iter(self.brokers))
        return None

    def any_node(self) -> int:
        if not self.brokers:
            raise BackendUnavailable("no backend broker is known")
        return min(self.brokers)

    # -- requests on the control connections ---------------------------------------------------
    async def call(self, node: int | None, request: Any) -> Any:
        """Send ``request`` (kio entity) to ``node`` (``None``: any broker) and decode the answer."""
        api_key, version = type(request).__api_key__, type(request).__version__
        return decode(api_key, version, await self.call_payload(node, request))

    async def call_payload(self, node: int | None, request: Any) -> bytes:
        """:meth:`call` without decoding: the answer's payload (header + body, no size prefix)."""
        payload = encode(request)
        conns = [self._control_conn(node)] if node is not None else self._any_conns()
        last: Exception | None = None
        for conn in conns:
            try:
                return await conn.request(payload, timeout_s=self._timeout)
            except (BrokerConnError, TimeoutError) as exc:
                last = exc
        raise BackendUnavailable(f"no backend broker answered api key {type(request).__api_key__}: {last}")

    def _control_conn(self, node: int) -> BrokerConn:
        conn = self._control.get(node)
        if conn is None:
            host, port = self.brokers[node]
            conn = self._control[node] = self.clients.broker(host, port, node_id=node)
        return conn

    def _any_conns(self) -> list[BrokerConn]:
        known = [self._control_conn(n) for n in sorted(self.brokers)]
        return [c for c in known if c.connected] + [c for c in known if not c.connected] + self._boot

    async def _api_versions(self) -> dict[int, tuple[int, int]]:
        request = make(18, 3, client_software_name="kshare", client_software_version="1")
        response = await self.call(None, request)
        if response.error_code != ErrorCode.none:
            raise BackendUnavailable(f"backend ApiVersions failed: {ErrorCode(response.error_code).name}")
        versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        if versions.get(18, (0, 3))[1] >= 4:
            # KIP-1022: a v3 answer leaves out every feature whose lowest version is 0
            # (kraft.version, group.version, transaction.version, ...); v4 lists them all.
            response = await self.call(None, make(18, 4, client_software_name="kshare", client_software_version="1"))
        self.supported_features = [(str(f.name), int(f.min_version), int(f.max_version))
                                   for f in response.supported_features]
        self.finalized_features = [(str(f.name), int(f.min_version_level), int(f.max_version_level))
                                   for f in response.finalized_features]
        self.finalized_features_epoch = int(response.finalized_features_epoch)
        return versions

    def version(self, api_key: int, highest: int) -> int:
        lo, hi = self.versions.get(api_key, (0, -1))
        v = min(hi, highest)
        if v < lo:
            raise BackendUnavailable(f"the backend speaks api key {api_key} only in versions {lo}..{hi}")
        return v

    # -- metadata --------------------------------------------------------------------------------
    async def metadata(self, names: Iterable[str] | None, *, auto_create: bool = False,
                       authorized_operations: bool = False) -> Any:
        """A backend Metadata answer for ``names`` (``None``: all topics, ``[]``: brokers only),
        with each topic's authorized operations (for the sidecar's principal) when asked; every
        answer refreshes the broker and leader caches."""
        version = self.version(3, _METADATA_MAX)
        req_cls = codec.request_class(3, version)
        topic_cls = routes.item_class(req_cls, "topics")
        topics = None if names is None else tuple(make(3, version, name=n) if topic_cls is None
                                                  else _topic_entry(topic_cls, n) for n in names)
        if version == 0 and topics is None:
            topics = ()
        request = make(3, version, topics=topics, allow_auto_topic_creation=auto_create,
                       include_cluster_authorized_operations=False,
                       include_topic_authorized_operations=authorized_operations)
        response = await self.call(None, request)
        self._learn(response, full=names is None)
        return response

    async def cluster_authorized_operations(self) -> int:
        """The backend's AuthorizedOperations on the cluster for the sidecar's principal
        (DescribeCluster); "not provided" from a backend without DescribeCluster (before 2.8)."""
        if 60 not in self.versions:
            return NOT_PROVIDED
        answer = await self.call(None, make(60, self.version(60, 1), include_cluster_authorized_operations=True))
        return int(answer.cluster_authorized_operations)

    def _learn(self, response: Any, *, full: bool) -> None:
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        if brokers:
            for node in set(self._control) - set(brokers):
                conn = self._control.pop(node)
                asyncio.get_running_loop().create_task(conn.close())
            self.brokers = brokers
        self.cluster_id = getattr(response, "cluster_id", None) or self.cluster_id
        self.controller_id = int(getattr(response, "controller_id", -1))
        if full:
            self._partitions.clear()
        for topic in response.topics:
            if topic.error_code != ErrorCode.none or topic.name is None:
                continue
            self._partitions[topic.name] = {
                int(p.partition_index): PartitionInfo(int(p.leader_id), int(getattr(p, "leader_epoch", -1)))
                for p in topic.partitions}
            topic_id = getattr(topic, "topic_id", None)
            if topic_id is not None and topic_id != _ZERO_UUID:
                self._names[topic_id] = topic.name

    async def topic_ids(self, names: Iterable[str]) -> frozenset[uuid.UUID]:
        """The backend's ids of ``names`` (asked now; topics without an id are left out)."""
        wanted = set(names)
        await self.metadata(sorted(wanted))
        return frozenset(i for i, name in self._names.items() if name in wanted)

    async def leader(self, topic: Any, partition: int) -> int | None:
        """The backend leader of ``topic`` (name or topic id) / ``partition``; ``None`` if unknown
        or leaderless after one (rate-limited) refresh."""
        found = self._cached_leader(topic, partition)
        if found is None:
            await self.refresh()
            found = self._cached_leader(topic, partition)
        return found

    def _cached_leader(self, topic: Any, partition: int) -> int | None:
        name = self._names.get(topic) if isinstance(topic, uuid.UUID) else topic
        info = self._partitions.get(name, {}).get(partition) if name is not None else None
        if info is None or info.leader < 0 or info.leader not in self.brokers:
            return None
        return info.leader

    async def refresh(self) -> None:
        """Refresh every topic's leaders, at most every ``_MIN_REFRESH_S`` (shared by callers)."""
        if self._refreshing is None:
            if time.monotonic() - self._last_refresh < _MIN_REFRESH_S:
                return
            self._refreshing = asyncio.ensure_future(self._refresh())
        task = self._refreshing
        try:
            await asyncio.shield(task)
        except BackendUnavailable:
            pass

    async def _refresh(self) -> None:
        try:
            await self.metadata(None)
        finally:
            self._last_refresh = time.monotonic()
            self._refreshing = None

    def forget_leaders(self) -> None:
        """A NOT_LEADER answer or a broken connection: the next lookup refreshes."""
        self._partitions.clear()

    # -- coordinators -------------------------------------------------------------------------------
    async def coordinator(self, key_type: int, key: str, *, refresh: bool = False) -> int:
        """The backend broker coordinating ``key`` (group id or transactional id); raises
        :class:`CoordinatorError` with the backend's code when it cannot name one."""
        cached = None if refresh else self._coordinators.get((key_type, key))
        if cached is not None and cached in self.brokers:
            return cached
        version = self.version(10, _FIND_COORDINATOR_MAX)
        if version >= 4:
            request = make(10, version, key_type=key_type, coordinator_keys=(key,))
        else:
            request = make(10, version, key=key, key_type=key_type)
        response = await self.call(None, request)
        entry = response.coordinators[0] if version >= 4 else response
        if entry.error_code != ErrorCode.none:
            raise CoordinatorError(ErrorCode(entry.error_code), getattr(entry, "error_message", None))
        node = int(entry.node_id)
        if node not in self.brokers:
            self.brokers[node] = (entry.host, int(entry.port))
        self._coordinators[(key_type, key)] = node
        return node

    async def check_coordinator(self, key_type: int, key: str) -> tuple[ErrorCode, str | None] | None:
        """``None`` when the backend names a coordinator for ``key``, else its error."""
        try:
            await self.coordinator(key_type, key, refresh=True)
        except CoordinatorError as exc:
            return exc.code, exc.message
        except BackendUnavailable as exc:
            return ErrorCode.coordinator_not_available, f"the backend is unavailable: {exc}"
        return None

    def forget_coordinator(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)

    def upstream(self, credentials: tuple[str, str] | None = None, *, principal: str | None = None,
                 security: Any = None, release: Callable[[], None] | None = None) -> Upstream:
        """A client connection's upstream. passthrough.credentials = client: with ``credentials``
        (a PLAIN client's user and password) its backend connections authenticate as that user;
        with ``security`` (a delegation token of ``principal``, passthrough/tokens.py) as that; either
        way the backend authorizes the client instead of the sidecar. ``release`` runs at close."""
        if credentials is not None:
            principal = f"User:{credentials[0]}"
            security = dataclasses.replace(self.security, username=credentials[0], password=credentials[1],
                                           token_file=None)
        return Upstream(self, principal=principal, security=security, release=release)


class CoordinatorError(KafkaError):
    """The backend has no coordinator for a key (FindCoordinator's error code and message)."""


class Upstream:
    """One client connection's connections to the backend brokers (see module docstring)."""

    def __init__(self, pool: BackendPool, principal: Any = None, security: BackendSecurity | None = None,
                 release: Callable[[], None] | None = None) -> None:
        self.pool = pool
        self.principal = principal  # None: the sidecar's own
        #: the client's credentials (its password or a delegation token of its principal), made
        #: from the backend's security; None: the sidecar's own
        self.credentials = security
        self._release = release
        self._conns: dict[int, BrokerConn] = {}

    def conn(self, node: int) -> BrokerConn:
        conn = self._conns.get(node)
        address = self.pool.brokers.get(node)
        if address is None:
            raise BrokerConnError(f"backend broker {node} is not known")
        if conn is None or (conn.host, conn.port) != address:
            if conn is not None:
                conn.drop("broker address changed")
            clients = self.pool.clients
            conn = self._conns[node] = clients.broker(*address, node_id=node, principal=self.principal) \
                if self.credentials is None else \
                clients.broker_as(self.credentials, *address, node_id=node, principal=self.principal)
        return conn

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()
        release, self._release = self._release, None
        if release is not None:
            release()


def _topic_entry(cls: type, name: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{"name": name, **({"topic_id": _ZERO_UUID} if "topic_id" in names else {})})
