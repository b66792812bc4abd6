"""What one sidecar knows of its cluster, for routing (pure): live nodes, owners of state
partitions, and from those the leader of a user partition and the coordinator of a group.

Updated from each assignment of the sidecars' group (service/cluster.py); read by Metadata,
FindCoordinator and the share APIs' leader hints. A partition without a known owner (between
a sidecar's death and the rebalance that follows) is named with this sidecar, which answers
NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR until the group has moved it: clients retry.

While this sidecar's lease is lapsed (cluster/lease.py: it cannot know whether the group gave its
partitions away) it names no leader for the partitions it owned or whose owner it does not know
(leader -1: clients refresh their metadata, at another sidecar sooner or later) and no
coordinator for the groups on them: it must not send clients back to itself.
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
        #: the lease lapsed (service/cluster.py): claim nothing until it is renewed
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
        owner = self.owner(share_partition_home(str(topic_id), partition, self.state_partitions))
        if owner is None:
            return -1 if self.lapsed else self.node_id
        return owner

    def coordinator(self, group_id: str) -> int | None:
        return self.owner(group_home(group_id, self.state_partitions))

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
