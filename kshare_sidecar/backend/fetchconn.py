"""The connections the backend's Fetches go over: raw, one buffer per answer, records never copied.

Why not aiokafka's connections (every other backend request uses them, through the kio bridge):
the share path's Fetch answers are ~all record bytes the sidecar forwards unchanged, and
aiokafka's reader plus kio's decoder copied each of them four times (see :mod:`.fetchwire`). A
:class:`~.brokerconn.BrokerConn` receives each answer straight into one buffer of its exact size
(``asyncio.BufferedProtocol``) with the same TLS/SASL settings as the rest of the backend
(:class:`~.security.BackendSecurity`), and :func:`~.fetchwire.parse_fetch` reads it in place.

Per broker one connection for reads and up to ``LONG_POLL_CONNS`` for long polls, one long poll
in flight on each while there are enough of them. Why: a broker answers one request per
connection at a time, so a parked Fetch must not hold up reads — nor another partition's long
poll. On one long-poll connection a poll for a partition without new data held every poll queued
behind it until its MaxWaitMs: records that had arrived on the other partitions waited that long
(benchmarks/latency.py at 1,000 records/s: the largest latency of a run 29–504 ms, 500 ms in two
runs of ten, against 40–90 ms in eight runs on lanes of their own). The Fetch version is the
highest both sides know, from the broker's ApiVersions on each new connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.api_versions.v0.response import ApiVersionsResponse

from ..metrics import STATS
from ..protocol.requests import decode_response, request_payload
from . import errors as E
from .brokerconn import BrokerConn, BrokerConnError, FramePool
from .errors import BackendError, BackendUnavailableError
from .fetchwire import FetchWireError, parse_fetch
from .kio_bridge import request_module
from .reads import FETCH_API, FETCH_VERSIONS, PartitionRead, empty_result, fetch_builder
from .types import FetchResult

if TYPE_CHECKING:
    from .connection_states import ClusterConnectionStates
    from .security import BackendSecurity

log = logging.getLogger(__name__)

#: ``address(node) -> (host, port)`` of a backend broker, None when unknown
Address = Callable[[int], "tuple[str, int] | None"]

#: long-poll connections per broker at most (lanes 1..LONG_POLL_CONNS; lane 0 carries the reads).
#: Beyond that many partitions parked at once, polls share the least busy connection.
LONG_POLL_CONNS = 16


class FetchConns:
    """Raw Fetch connections per backend broker (reads and long polls apart)."""

    def __init__(self, address: Address, *, security: BackendSecurity | None = None, client_id: str = "kshare",
                 request_timeout_ms: int = 30_000, setup: ClusterConnectionStates | None = None) -> None:
        self._address = address
        self._security = security
        self._client_id = client_id
        self._timeout_s = request_timeout_ms / 1000
        self._setup = setup  # the connect's bound (socket.connection.setup.timeout.ms), not the request timeout
        self._conns: dict[tuple[int, int], BrokerConn] = {}  # (node, lane): lane 0 reads, 1.. long polls
        self._versions: dict[BrokerConn, int] = {}
        #: (node, lane) -> fetches that chose it and have not ended (a connection still being
        #: opened shows no request in flight yet)
        self._lane_users: collections.Counter[tuple[int, int]] = collections.Counter()  # at most 17 keys a broker
        self._lock = asyncio.Lock()
        self.pool = FramePool()  # answers received into reused buffers (see FramePool)

    async def fetch(self, node: int, reads: Sequence[PartitionRead], *, max_wait_ms: int, isolation_level: int,
                    max_bytes: int | None) -> dict[tuple[str, int], FetchResult]:
        """One Fetch to ``node``: a result for every read, by (topic, partition) (a partition the
        answer lacks gets its top-level error). Raises :class:`BackendUnavailableError` when the
        broker cannot be reached or answers nonsense."""
        lane = self._poll_lane(node) if max_wait_ms > 0 else 0
        key = (node, lane)
        self._lane_users[key] += 1
        try:
            conn = await self._conn(node, lane)
            version = self._versions[conn]
            build = fetch_builder(reads, max_wait_ms=max_wait_ms, isolation_level=isolation_level, max_bytes=max_bytes)
            payload = request_payload(build(request_module(FETCH_API, version), version), 0, self._client_id)
            fut = await conn.send(payload, framed=True)
            frame = await asyncio.wait_for(fut, self._timeout_s + max_wait_ms / 1000)
            _, error, results = parse_fetch(frame, version, 4)
        except (BrokerConnError, OSError) as exc:
            self._drop(node, lane, str(exc))
            raise BackendUnavailableError(E.NETWORK_EXCEPTION, f"broker {node}: {exc}") from None
        except TimeoutError:
            self._drop(node, lane, "timed out")
            raise BackendUnavailableError(E.REQUEST_TIMED_OUT, f"Fetch to broker {node} timed out") from None
        except FetchWireError as exc:
            self._drop(node, lane, str(exc))
            raise BackendUnavailableError(E.NETWORK_EXCEPTION, f"broker {node}: unreadable Fetch answer: {exc}") \
                from None
        finally:
            self._lane_users[key] -= 1
        STATS.backend_fetch_requests += 1  # read amplification: backend bytes ÷ delivered bytes
        STATS.backend_fetch_bytes += len(frame)
        STATS.backend_fetch_cut_bytes += sum(r.cut_bytes for r in results.values())
        for r in reads:
            results.setdefault((r.topic, r.partition), empty_result(error or E.UNKNOWN_SERVER_ERROR))
        return results

    def _poll_lane(self, node: int) -> int:
        """The long-poll connection to use: the first one nothing waits on (opened on first use; a
        poll whose ShareFetch gave up is held by the broker until it answers, so it counts), else
        the least busy."""
        best, best_load = 1, None
        for lane in range(1, LONG_POLL_CONNS + 1):
            conn = self._conns.get((node, lane))
            load = max(self._lane_users[node, lane], conn.in_flight if conn is not None else 0)
            if not load:
                return lane
            if best_load is None or load < best_load:
                best, best_load = lane, load
        return best

    async def _conn(self, node: int, lane: int) -> BrokerConn:
        key = (node, lane)
        conn = self._conns.get(key)
        address = self._address(node)
        if address is None:
            raise BackendUnavailableError(E.LEADER_NOT_AVAILABLE, f"broker {node} is not known")
        # ready only once its Fetch version is known: another read may be connecting it right now
        if conn is not None and (conn.host, conn.port) == address and conn.connected and conn in self._versions:
            return conn
        async with self._lock:
            conn = self._conns.get(key)
            if conn is None or (conn.host, conn.port) != address:
                if conn is not None:
                    await conn.close()
                conn = self._conns[key] = BrokerConn(*address, node_id=node, security=self._security,
                                                     connect_timeout_s=self._timeout_s, pool=self.pool,
                                                     setup=self._setup)
            if not conn.connected or conn not in self._versions:
                self._versions[conn] = await self._version(conn)
        return conn

    async def _version(self, conn: BrokerConn) -> int:
        """The highest Fetch version both know (ApiVersions v0: every broker answers it)."""
        payload = request_payload(ApiVersionsRequest(), 0, self._client_id)
        answer = await conn.request(payload, timeout_s=self._timeout_s)
        _, body = decode_response(answer, ApiVersionsResponse)
        for key in body.api_keys:
            if key.api_key == FETCH_API:
                usable = [v for v in FETCH_VERSIONS if key.min_version <= v <= key.max_version]
                if usable:
                    return max(usable)
        raise BackendError(E.UNSUPPORTED_VERSION, f"broker {conn.node_id} offers no Fetch version in "
                                      f"v{FETCH_VERSIONS.start}..v{FETCH_VERSIONS.stop - 1}")

    def _drop(self, node: int, lane: int, reason: str) -> None:
        conn = self._conns.pop((node, lane), None)
        if conn is not None:
            self._versions.pop(conn, None)
            conn.drop(reason)

    def drop_all(self, reason: str) -> None:
        """Drop every connection (a suspended backend: the next fetch connects anew)."""
        for node, lane in list(self._conns):
            self._drop(node, lane, reason)

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        self._versions.clear()
        for conn in conns:
            await conn.close()
