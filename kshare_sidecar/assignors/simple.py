"""Kafka's share-group ``SimpleAssignor`` (4.3): balance first, then stickiness.

Read from Kafka 4.3.1's ``SimpleHomogeneousAssignmentBuilder`` / ``SimpleHeterogeneousAssignment
Builder`` (the KIP-932 hash-and-round-robin assignor of earlier releases was replaced by it, and
share groups behave differently under churn with each). For a pool of P partitions and M members:

- desired sharing S = ceil(M / P): how many members each partition gets (1 unless M > P);
- member i's desired count = ceil(S·P/M·(i+1)) − ceil(S·P/M·i), so counts differ by at most one
  and add up to S·P;
- keep what members have (stickiness), but revoke partitions of topics they no longer subscribe
  to, partitions beyond a member's desired count, and members beyond S on a partition;
- hand the partitions short of S members to the members short of their count, cycling.

When every member subscribes to the same topics the pool is all their partitions together;
otherwise each topic is its own pool with its own subscribers. Members are numbered in member-id
order and partitions taken in (topic id, partition) order: Kafka numbers them in its hash maps'
iteration order, so *which* member gets the extra partition can differ from Kafka's; how many
each gets, how partitions are shared and what is kept across a change are the same.
"""

from __future__ import annotations

import math

from kshare_sidecar.assignors.model import AssignmentSpec, GroupAssignment, add, empty_assignment

Partition = tuple[str, int]


class SimpleAssignor:
    name = "simple"

    def assign(self, spec: AssignmentSpec) -> GroupAssignment:
        result = empty_assignment(spec)
        members = sorted(spec.members)
        subscriptions = {m: frozenset(t for t in spec.members[m].subscribed_topic_ids if t in spec.topics)
                         for m in members}
        if len(set(subscriptions.values())) == 1:  # homogeneous: one pool of every partition
            topics = sorted(next(iter(subscriptions.values()))) if members else []
            pools = [(topics, [m for m in members if subscriptions[m]])]
        else:
            topics_all = sorted({t for s in subscriptions.values() for t in s})
            pools = [([t], [m for m in members if t in subscriptions[m]]) for t in topics_all]
        for topics, subscribers in pools:
            partitions = [(t, p) for t in topics for p in range(spec.topics[t].partition_count)]
            if not partitions or not subscribers:
                continue
            current = {m: {(t, p) for t in topics for p in spec.members[m].assigned.get(t, ())
                           if p < spec.topics[t].partition_count} for m in subscribers}
            for member, owned in _balance(partitions, subscribers, current).items():
                for topic_id, partition in owned:
                    add(result, member, topic_id, partition)
        return GroupAssignment(result)


def _balance(partitions: list[Partition], members: list[str],
             current: dict[str, set[Partition]]) -> dict[str, set[Partition]]:
    """One pool: Kafka's desired sharing and counts, current assignments kept where they fit."""
    n_parts, n_members = len(partitions), len(members)
    sharing = (n_members + n_parts - 1) // n_parts
    precise = sharing * n_parts / n_members
    desired = {m: math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i, m in enumerate(members)}

    owned = {m: sorted(current.get(m, ())) for m in members}
    for m in members:  # revoke from members with more than their count (keep the lowest partitions)
        owned[m] = owned[m][:desired[m]]
    holders: dict[Partition, list[str]] = {p: [] for p in partitions}
    for m in members:
        for p in owned[m]:
            holders[p].append(m)
    for p in partitions:  # revoke members beyond the desired sharing of a partition
        for m in holders[p][sharing:]:
            owned[m].remove(p)
        holders[p] = holders[p][:sharing]

    # hand out what is short: one pass over the partitions, one cursor cycling over the members
    # short of their count (Kafka's iterator runs on across partitions, so consecutive
    # partitions go to different members)
    ring = [m for m in members if len(owned[m]) < desired[m]]
    cursor = 0
    for p in partitions:
        tried = 0
        while len(holders[p]) < sharing and ring and tried < len(ring):
            cursor %= len(ring)
            m = ring[cursor]
            if m in holders[p]:
                cursor += 1
                tried += 1
                continue
            holders[p].append(m)
            owned[m].append(p)
            tried = 0
            if len(owned[m]) >= desired[m]:
                ring.pop(cursor)  # the next member moves into this slot
            else:
                cursor += 1
    return {m: set(owned[m]) for m in members}
