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
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def update(self, new: ClusterMap) -> None:
        nodes = dict(new.nodes)
        nodes[self.node_id] = dict(self.endpoints)  # always list ourselves (we answer, after all)
        self.map = ClusterMap(new.generation, nodes, dict(new.owners), dict(new.claims))

    def owner(self, state_partition: int) -> int | None:
        owner = self.map.owners.get(state_partition)
        if self.lapsed and owner == self.node_id:
            return None
        return owner

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
        """Lapsed: another live sidecar to send clients to (spread by state partition), -1 if none."""
        others = sorted(n for n in self.map.nodes if n != self.node_id)
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
