"""What one sidecar knows of its cluster, for routing (pure): live nodes, owners of state
partitions, and from those the leader of a user partition and the coordinator of a group.

Updated from each assignment of the sidecars' group (cluster/membership.py); read by Metadata,
FindCoordinator and the share APIs' leader hints. A partition without a known owner (between
a sidecar's death and the rebalance that follows) is named with this sidecar, which answers
NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR until the group has moved it: clients retry.

While this sidecar's lease is lapsed (cluster/lease.py: it cannot know whether the group gave its
partitions away) it must not send clients back to itself: for the partitions it owned or whose
owner it does not know it names *another* live sidecar as leader, and as coordinator of the
groups on them. Naming none (leader -1) is not enough: librdkafka asks its most recently used
connection for metadata, which for a client whose partitions were all here is this sidecar
again, so it never learned the new owner (the nemesis's "cut for good" stalled that way). The
sidecar named answers with the real owner, or NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR, after
which the client's next metadata request goes to it. Only a sidecar that knows no other names
none (-1).

A lapsed sidecar's map is stale, and the sidecar it names must be one a client can get an answer
from: while lapsed it probes its peers (cluster/peers.py) and names only those it reached
(``reachable``) — for what it owned, and for what its map gives to a peer it cannot reach (that
peer is most likely what the fault cut off, and its partitions are being moved). With no peer
reached (this sidecar is the one cut off, and so most likely are the clients asking it) it names
none for what it owned, and the map's owner for the rest. Measured (the nemesis, seed 1381822026:
one sidecar cut from the backend while another was split off with a client): naming an
unreachable peer sent librdkafka's share consumer there, and it fetches from one broker at a
time, so that one request held every partition of the consumer until its 60 s socket timeout or
TCP's next retransmission after the heal — twice in a row across two faults, 82-105 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..persist.ownership import group_home, share_partition_home
from .assign import ClusterMap, Endpoints


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int


class ClusterView:
    def __init__(self, node_id: int, endpoints: Endpoints, state_partitions: int) -> None:
        self.node_id = node_id
        self.endpoints = dict(endpoints)  # this sidecar's, per listener name
        self.state_partitions = state_partitions
        self.map = ClusterMap(0, {node_id: dict(endpoints)}, {})
        #: the lease lapsed (cluster/membership.py): claim nothing until it is renewed
        self.lapsed = False
        #: while lapsed, the peers the last probe reached (cluster/peers.py); None: not probed
        #: (every peer counts)
        self.reachable: frozenset[int] | None = None
        #: the probe itself (``async settled()``: its first round is done), set by the membership
        self.peers: Any = None

    def update(self, new: ClusterMap) -> None:
        nodes = dict(new.nodes)
        nodes[self.node_id] = dict(self.endpoints)  # always list ourselves (we answer, after all)
        self.map = ClusterMap(new.generation, nodes, dict(new.owners), dict(new.claims))

    def owner(self, state_partition: int) -> int | None:
        owner = self.map.owners.get(state_partition)
        if self.lapsed and (owner == self.node_id or (owner is not None and self._cut_off(owner))):
            return None
        return owner

    def _cut_off(self, node: int) -> bool:
        """Lapsed: ``node`` did not answer the last probe while another peer did (reaching none,
        this sidecar cannot tell a peer's cut from its own: the map's owner stands)."""
        reached = self.reachable
        return reached is not None and bool(reached) and node not in reached

    def leader(self, topic_id: str, partition: int) -> int:
        """The sidecar leading every share-partition of this user partition (-1: none known)."""
        home = share_partition_home(str(topic_id), partition, self.state_partitions)
        owner = self.owner(home)
        if owner is None:
            return self._elsewhere(home) if self.lapsed else self.node_id
        return owner

    def coordinator(self, group_id: str) -> int | None:
        home = group_home(group_id, self.state_partitions)
        owner = self.owner(home)
        if owner is None and self.lapsed:
            found = self._elsewhere(home)
            return found if found >= 0 else None
        return owner

    def _elsewhere(self, state_partition: int) -> int:
        """Lapsed: another sidecar to send clients to (spread by state partition), one the last
        probe reached when there was a probe; -1 if none."""
        reached = self.reachable
        others = sorted(n for n in self.map.nodes if n != self.node_id and (reached is None or n in reached))
        return others[state_partition % len(others)] if others else -1

    def node(self, node_id: int, listener: str | None) -> Node | None:
        """``node_id``'s address on ``listener`` (the listener the client is connected on; the
        first one a node advertises when it has no listener of that name)."""
        endpoints = self.map.nodes.get(node_id)
        if not endpoints:
            return None
        host, port = endpoints[listener] if listener is not None and listener in endpoints \
            else next(iter(endpoints.values()))
        return Node(node_id, host, port)

    def nodes(self, listener: str | None) -> list[Node]:
        return [n for n in (self.node(i, listener) for i in sorted(self.map.nodes)) if n is not None]
