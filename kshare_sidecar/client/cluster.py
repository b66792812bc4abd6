"""What the share consumer knows about the cluster: nodes, connections, topic ids and leaders.

Why a class of its own: the heartbeat loop and the fetch path both need "a connection to node
N", "who leads partition P", "which name has topic id T", and both may learn something new
(FindCoordinator, ShareFetch's NodeEndpoints / CurrentLeader). One connection per node, as
aiokafka and Kafka's clients do; the bootstrap connections are used only until Metadata named
the nodes.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..protocol.address import parse_bootstrap
from . import protocol
from .conn import BrokerConnError, NodeConn

if TYPE_CHECKING:
    from kshare_sidecar.backend.security import BackendSecurity

log = logging.getLogger("kshare.client")

Tp = protocol.Tp
TRANSPORT_ERRORS = (BrokerConnError, TimeoutError, OSError)
__all__ = ["TRANSPORT_ERRORS", "Cluster", "Tp", "parse_bootstrap"]  # consumer.py imports these from here


class Cluster:
    def __init__(self, bootstrap: list[tuple[str, int]], client_id: str, timeout_s: float,
                 max_share_version: int | None, security: BackendSecurity | None = None) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._client_id, self._timeout_s, self._cap = client_id, timeout_s, max_share_version
        self.nodes: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, NodeConn] = {}
        self._boot: list[NodeConn] = []
        self.names: dict[uuid.UUID, str] = {}
        self.ids: dict[str, uuid.UUID] = {}
        self.leaders: dict[Tp, int] = {}
        self.stale = True  # refresh Metadata before the next fetch
        self._next = -1  # where any_call starts among the known nodes

    def _new(self, node: int, host: str, port: int) -> NodeConn:
        return NodeConn(node, host, port, self._client_id, timeout_s=self._timeout_s, max_share_version=self._cap,
                        security=self._security)

    def conn(self, node: int) -> NodeConn:
        host, port = self.nodes[node]
        conn = self._conns.get(node)
        if conn is None or (conn.host, conn.port) != (host, port):
            conn = self._conns[node] = self._new(node, host, port)
        return conn

    def learn_node(self, node: int, host: str, port: int) -> None:
        self.nodes[int(node)] = (host, int(port))

    def moved(self, tp: Tp, leader: int) -> None:
        """A partition answered NOT_LEADER etc.: take its CurrentLeader if we know the node."""
        if leader >= 0 and leader in self.nodes:
            self.leaders[tp] = leader
        else:
            self.stale = True

    async def any_call(self, request: Any) -> Any:
        """Ask any reachable node (known nodes first, each call starting at the next one, then the
        bootstrap servers). Rotating matters: a broker that answers but knows less — a sidecar cut
        off from its backend names no leader for its partitions — must not be the only one asked."""
        errors = []
        known = list(self.nodes)
        self._next = (self._next + 1) % max(len(known), 1)
        for conn in [self.conn(n) for n in known[self._next:] + known[:self._next]]:
            try:
                return await conn.call(request)
            except (*TRANSPORT_ERRORS, LookupError) as exc:
                errors.append(f"{conn.host}:{conn.port}: {exc}")
        # no known node answered (or none is known yet): back to the bootstrap servers
        if not self._boot:
            self._boot = [self._new(-1, h, p) for h, p in self._bootstrap]
        for conn in self._boot:
            try:
                return await conn.call(request)
            except (*TRANSPORT_ERRORS, LookupError) as exc:
                errors.append(f"{conn.host}:{conn.port}: {exc}")
        raise BrokerConnError("no broker answered: " + "; ".join(errors))

    async def refresh(self, topics: tuple[str, ...]) -> None:
        """Metadata v12 for ``topics``: brokers, topic ids (both directions) and leaders."""
        self.stale = False
        resp = await self.any_call(protocol.metadata(topics))
        for b in resp.brokers:
            self.learn_node(b.node_id, b.host, b.port)
        for t in resp.topics:
            if t.error_code != ErrorCode.none or t.topic_id is None:
                if t.error_code != ErrorCode.unknown_topic_or_partition:
                    self.stale = True
                continue
            self.names[t.topic_id], self.ids[t.name] = t.name, t.topic_id
            for p in t.partitions:
                self.leaders[(t.topic_id, int(p.partition_index))] = int(p.leader_id)
        if self._boot and self.nodes:
            for conn in self._boot:
                await conn.close()
            self._boot = []

    async def find_coordinator(self, group_id: str) -> int:
        resp = await self.any_call(protocol.find_coordinator(group_id))
        if resp.error_code != ErrorCode.none:
            raise BrokerConnError(f"FindCoordinator: {resp.error_code.name}")
        self.learn_node(resp.node_id, resp.host, resp.port)
        return int(resp.node_id)

    async def close(self) -> None:
        for conn in [*self._conns.values(), *self._boot]:
            await conn.close()
