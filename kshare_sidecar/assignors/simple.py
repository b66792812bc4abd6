"""KIP-932's SimpleAssignor, written from the KIP's description.

Per subscribed topic (topics in id order, partitions ascending, members in id order):

1. every subscriber is hashed onto one partition: ``hash(member_id) % partition_count``;
2. a partition nobody hashed to keeps the members it currently has (if they are still
   subscribed); if it has none, it gets one member round-robin (the subscriber with the fewest
   partitions of this topic so far, ties by fewest overall, then member id);
3. a partition that hashing covers gets exactly its hashed members, so members placed there by
   step 2 in an earlier round are dropped.

The result is stable: feeding an assignment back as the current assignment reproduces it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from kshare_sidecar.assignors.model import (
    AssignmentSpec,
    GroupAssignment,
    add,
    assignable_topics,
    empty_assignment,
)

HashFn = Callable[[str], int]


def stable_member_hash(member_id: str) -> int:
    """A process-independent 64-bit hash (Python's ``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(member_id.encode(), digest_size=8).digest(), "big")


class SimpleAssignor:
    name = "simple"

    def __init__(self, hash_fn: HashFn | None = None):
        self._hash = hash_fn or stable_member_hash

    def assign(self, spec: AssignmentSpec) -> GroupAssignment:
        result = empty_assignment(spec)
        total: dict[str, int] = dict.fromkeys(spec.members, 0)
        for topic_id, count, subscribers in assignable_topics(spec):
            subscribed = set(subscribers)
            hashed: dict[int, list[str]] = {}
            for member in subscribers:
                hashed.setdefault(self._hash(member) % count, []).append(member)
            topic_load = dict.fromkeys(subscribers, 0)
            target: dict[int, list[str]] = {}
            for partition, members in hashed.items():
                target[partition] = members
                for m in members:
                    topic_load[m] += 1
            unhashed = [p for p in range(count) if p not in hashed]
            needs_round_robin = []
            for partition in unhashed:
                kept = [m for m in spec.current_members(topic_id, partition) if m in subscribed]
                if kept:
                    target[partition] = kept
                    for m in kept:
                        topic_load[m] += 1
                else:
                    needs_round_robin.append(partition)
            for partition in needs_round_robin:
                member = min(subscribers, key=lambda m: (topic_load[m], total[m], m))
                target[partition] = [member]
                topic_load[member] += 1
            for partition in sorted(target):
                for m in target[partition]:
                    add(result, m, topic_id, partition)
                    total[m] += 1
        return GroupAssignment(result)
