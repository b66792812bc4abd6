"""The executors' Fetch requests: raw Kafka Fetch over the project's own backend connections.

Why not a librdkafka consumer (the readers until 2026-11-29): it decodes every record into a
Python ``Message`` before the source can make columns of it. A Fetch response carries the
record batches as they are stored; :mod:`.decode` makes columns of those bytes directly.

Each Spark Python worker keeps one :class:`Fetcher` per configuration (Spark reuses its workers):
one :class:`~kshare_sidecar.backend.brokerconn.BrokerConn` per broker (TLS and SASL PLAIN / SCRAM as
the sidecar's own backend connections do them, re-authenticating before a SASL session
expires), ApiVersions once per connection, partition leaders from Metadata (refreshed when a
Fetch says the leader moved), and a private asyncio event loop that runs only while a request
is under way: executors are synchronous, and a loop thread would contend for the GIL with the
decoding. Requests are Fetch v4..v12 by topic name (``backend/reads.py``), one partition each,
``min_bytes`` 1 and the reader's ``fetch.wait.max.ms``: the offsets asked for were acquired, so
they exist; the wait only matters for read_committed records of a transaction still open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, NamedTuple

from kio.schema.api_versions.v3 import request as api_versions_req
from kio.schema.errors import ErrorCode

from ..backend.brokerconn import BrokerAuthError, BrokerConn, BrokerConnError
from ..backend.fetchwire import read_fetch
from ..backend.metadata import metadata_request
from ..backend.reads import FETCH_API, PartitionRead, fetch_request, list_offsets_request
from ..protocol.address import parse_bootstrap
from ..protocol.constants import OffsetSpec
from ..protocol.requests import decode_response, request_payload, response_class_of

log = logging.getLogger("kshare.spark")

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
#: A Fetch error that a fresh Metadata answer (and a retry) can cure.
_RETRY = frozenset(int(c) for c in (
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error,
    ErrorCode.replica_not_available, ErrorCode.offset_not_available, ErrorCode.request_timed_out,
    ErrorCode.network_exception, ErrorCode.not_enough_replicas))
_BACKOFF_S = 0.1


class FetchAnswer(NamedTuple):
    """One partition's part of a Fetch response."""

    records: memoryview  # of the response frame
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset), read_committed only
    error: int


class FetchError(Exception):
    """The backend refused the read for good (authorization, unsupported versions, ...)."""


class Fetcher:
    """Fetch requests to the leaders of the partitions read (see the module docstring)."""

    def __init__(self, servers: str, *, security: Any = None, client_id: str = "kshare-spark-reader",
                 isolation: int = READ_COMMITTED, max_wait_ms: int = 100, request_timeout_s: float = 60.0) -> None:
        self.bootstrap = parse_bootstrap(servers)
        self.security = security
        self.client_id = client_id
        self.isolation = isolation
        self.max_wait_ms = max_wait_ms
        self.request_timeout_s = request_timeout_s
        self.loop = asyncio.new_event_loop()
        self.nodes: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self._conns: dict[int, BrokerConn] = {}
        self._versions: dict[int, dict[int, tuple[int, int]]] = {}  # per node: the broker's api ranges
        #: (topic, partition, Fetch range) -> (request bytes, offset / partition size / total size positions, version)
        self._templates: dict[tuple[str, int, Any], tuple[bytes, int, int, int, int]] = {}
        self.fetches = 0

    # -- synchronous API (executors) ---------------------------------------------------------------
    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, deadline: float) -> FetchAnswer:
        """One partition's records from ``offset`` (at least one whole batch, then up to
        ``max_bytes``); retries a moved leader or a broken connection until ``deadline``
        (``time.monotonic()``), then raises :class:`TimeoutError`."""
        return self.loop.run_until_complete(self._fetch(topic, partition, offset, max_bytes, deadline))

    def log_start(self, topic: str, partition: int, deadline: float) -> int:
        """The partition's log start offset (ListOffsets EARLIEST at its leader): where a Fetch
        answered OFFSET_OUT_OF_RANGE, because retention deleted what it asked for."""
        return self.loop.run_until_complete(self._log_start(topic, partition, deadline))

    def close(self) -> None:
        if self.loop.is_closed():
            return
        for conn in list(self._conns.values()):
            self.loop.run_until_complete(conn.close())
        self._conns.clear()
        self.loop.close()

    # -- internals -----------------------------------------------------------------------------------
    async def _fetch(self, topic: str, partition: int, offset: int, max_bytes: int, deadline: float) -> FetchAnswer:
        why = ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"reading {topic}[{partition}] at offset {offset}: {why or 'no answer'}")
            try:
                node = await self._leader(topic, partition, left)
                answer = await self._fetch_from(node, topic, partition, offset, max_bytes, left)
            except BrokerAuthError as exc:
                raise FetchError(str(exc)) from None
            except (BrokerConnError, TimeoutError, OSError) as exc:
                why = str(exc) or type(exc).__name__
                self.leaders.clear()  # the node may be gone or moved: ask Metadata again
                await asyncio.sleep(min(_BACKOFF_S, max(0.0, deadline - time.monotonic())))
                continue
            if answer.error in _RETRY:
                why = f"{ErrorCode(answer.error).name} from broker {node}"
                self.leaders.pop((topic, partition), None)
                await asyncio.sleep(min(_BACKOFF_S, max(0.0, deadline - time.monotonic())))
                continue
            self.fetches += 1
            return answer

    async def _log_start(self, topic: str, partition: int, deadline: float) -> int:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the log start offset of {topic}[{partition}]: no answer")
            try:
                node = await self._leader(topic, partition, left)
                conn, entity = await self._prepare(node, list_offsets_request(topic, partition, OffsetSpec.EARLIEST,
                                                                              self.isolation), left)
                resp = await self._call(conn, entity, left)
            except BrokerAuthError as exc:
                raise FetchError(str(exc)) from None
            except (BrokerConnError, TimeoutError, OSError):
                self.leaders.clear()
                await asyncio.sleep(min(_BACKOFF_S, max(0.0, deadline - time.monotonic())))
                continue
            for t in resp.topics:
                for p in t.partitions:
                    if int(p.error_code) in _RETRY:
                        self.leaders.pop((topic, partition), None)
                        break
                    if int(p.error_code):
                        raise FetchError(f"ListOffsets {topic}[{partition}]: {ErrorCode(int(p.error_code)).name}")
                    return int(p.offset)
            await asyncio.sleep(min(_BACKOFF_S, max(0.0, deadline - time.monotonic())))

    def _conn(self, node: int) -> BrokerConn:
        host, port = self.nodes[node] if node >= 0 else self.bootstrap[-node - 1]
        conn = self._conns.get(node)
        if conn is None or (conn.host, conn.port) != (host, port):
            conn = self._conns[node] = BrokerConn(host, port, node_id=node, security=self.security)
            self._versions.pop(node, None)
        return conn

    async def _prepare(self, node: int, build: Any, timeout_s: float) -> tuple[BrokerConn, Any]:
        """This node's connection and the kio entity of ``build`` (a ``KioRequest`` of backend/) in the
        version this node's ApiVersions allow."""
        conn = self._conn(node)
        versions = self._versions.get(node)
        if versions is None or not conn.connected:
            versions = self._versions[node] = await self._api_versions(conn, timeout_s)
        return conn, build.prepare(versions).entity

    async def _send(self, conn: BrokerConn, entity: Any, timeout_s: float) -> bytearray:
        """Send a kio request and wait for its answer: the very frame the socket filled (size prefix
        included; nothing copied)."""
        answer = await conn.send(request_payload(entity, 0, self.client_id), framed=True)
        timeout = min(timeout_s, self.request_timeout_s)
        try:
            frame: bytearray = await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            conn.drop(f"request timed out after {timeout:.1f} s")
            raise
        return frame

    async def _call(self, conn: BrokerConn, entity: Any, timeout_s: float) -> Any:
        """Send a small request (ApiVersions, Metadata, ListOffsets) and decode its answer with kio."""
        frame = await self._send(conn, entity, timeout_s)
        request_cls: type = type(entity)
        return decode_response(bytes(frame[4:]), response_class_of(request_cls))[1]

    async def _api_versions(self, conn: BrokerConn, timeout_s: float) -> dict[int, tuple[int, int]]:
        from kshare_sidecar import __version__

        req = api_versions_req.ApiVersionsRequest(client_software_name="kshare-spark-reader",
                                                  client_software_version=str(__version__))
        resp = await self._call(conn, req, timeout_s)
        if resp.error_code != ErrorCode.none:
            raise FetchError(f"ApiVersions from {conn.host}:{conn.port}: {ErrorCode(resp.error_code).name}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}

    async def _leader(self, topic: str, partition: int, timeout_s: float) -> int:
        node = self.leaders.get((topic, partition))
        if node is not None and node in self.nodes:
            return node
        await self._refresh(topic, timeout_s)
        node = self.leaders.get((topic, partition), -1)
        if node < 0 or node not in self.nodes:
            raise BrokerConnError(f"no leader known for {topic}[{partition}]")
        return node

    async def _refresh(self, topic: str, timeout_s: float) -> None:
        """Metadata for ``topic`` from a known broker, else from the bootstrap servers in turn."""
        errors = []
        candidates = list(self.nodes) + [-(i + 1) for i in range(len(self.bootstrap))]
        for node in candidates:
            try:
                conn, entity = await self._prepare(node, metadata_request([topic]), timeout_s)
                resp = await self._call(conn, entity, timeout_s)
            except BrokerAuthError:
                raise
            except (BrokerConnError, TimeoutError, OSError) as exc:
                errors.append(f"{self._address(node)}: {exc}")
                continue
            self.nodes = {int(b.node_id): (str(b.host), int(b.port)) for b in resp.brokers}
            if node < 0:  # the bootstrap connections are not needed once the brokers are known
                for boot in [n for n in self._conns if n < 0]:
                    await self._conns.pop(boot).close()
            for t in resp.topics:
                code = int(t.error_code)
                if code == int(ErrorCode.topic_authorization_failed):
                    raise FetchError(f"not authorized to read topic {t.name!r} (TOPIC_AUTHORIZATION_FAILED)")
                if code == 0:
                    for p in t.partitions:
                        self.leaders[(str(t.name), int(p.partition_index))] = int(p.leader_id)
            return
        raise BrokerConnError("no broker answered Metadata: " + "; ".join(errors))

    def _address(self, node: int) -> str:
        host, port = self.nodes[node] if node >= 0 else self.bootstrap[-node - 1]
        return f"{host}:{port}"

    async def _fetch_from(self, node: int, topic: str, partition: int, offset: int, max_bytes: int,
                          timeout_s: float) -> FetchAnswer:
        conn = self._conn(node)
        versions = self._versions.get(node)
        if versions is None or not conn.connected:
            versions = self._versions[node] = await self._api_versions(conn, timeout_s)
        payload, version = self._fetch_payload(versions, topic, partition, offset, max_bytes)
        answer = await conn.send(payload, framed=True)
        timeout = min(timeout_s, self.request_timeout_s)
        try:
            frame: bytearray = await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            conn.drop(f"request timed out after {timeout:.1f} s")
            raise
        _, error, partitions = read_fetch(frame, version, 4)
        if error:
            return FetchAnswer(memoryview(b""), -1, -1, -1, (), error)
        for p in partitions:
            if p.topic == topic and p.partition == partition:
                if p.error == int(ErrorCode.topic_authorization_failed):
                    raise FetchError(f"not authorized to read topic {topic!r} (TOPIC_AUTHORIZATION_FAILED)")
                return FetchAnswer(p.records, p.high_watermark, p.last_stable_offset, p.log_start_offset, p.aborted,
                                   p.error)
        return FetchAnswer(memoryview(b""), -1, -1, -1, (), int(ErrorCode.unknown_topic_or_partition))

    def _fetch_payload(self, versions: dict[int, tuple[int, int]], topic: str, partition: int, offset: int,
                       max_bytes: int) -> tuple[bytes, int]:
        """A Fetch request's bytes and version. kio encodes one request per partition and version
        once, with marker values where the offset and the sizes go; each Fetch copies it and
        writes them in (kio's encoding took about a tenth of a 10k-record read's CPU)."""
        key = (topic, partition, versions.get(FETCH_API))
        cached = self._templates.get(key)
        if cached is None:
            request = fetch_request([PartitionRead(topic, partition, _MARK_OFFSET, _MARK_PART)],
                                    max_wait_ms=self.max_wait_ms, isolation_level=self.isolation, max_bytes=_MARK_TOTAL)
            entity = request.prepare(versions).entity
            template = request_payload(entity, 0, self.client_id)
            at = {name: _find_once(template, mark) for name, mark in (
                ("offset", _MARK_OFFSET.to_bytes(8, "big")), ("part", _MARK_PART.to_bytes(4, "big")),
                ("total", _MARK_TOTAL.to_bytes(4, "big")))}
            cached = self._templates[key] = (template, at["offset"], at["part"], at["total"], entity.__version__)
        template, at_offset, at_part, at_total, version = cached
        payload = bytearray(template)
        payload[at_offset:at_offset + 8] = offset.to_bytes(8, "big")
        payload[at_part:at_part + 4] = max_bytes.to_bytes(4, "big")
        payload[at_total:at_total + 4] = max_bytes.to_bytes(4, "big")
        return bytes(payload), version


#: Marker values in a Fetch request template (``Fetcher._fetch_payload``): byte patterns that
#: cannot occur elsewhere in a request (0xFE and a lone 0x98 are never part of UTF-8 text).
_MARK_OFFSET = 0x7EDC_BA98_7654_3210
_MARK_PART = 0x7ECA_FE01
_MARK_TOTAL = 0x7ECA_FE02


def _find_once(data: bytes, pattern: bytes) -> int:
    at = data.find(pattern)
    if at < 0 or data.find(pattern, at + 1) >= 0:
        raise FetchError("cannot build a Fetch request template")  # a topic name holding a marker
    return at
