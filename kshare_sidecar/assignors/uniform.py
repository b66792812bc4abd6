"""UniformAssignor: exact balance, sticky, no hash collisions.

Why this second built-in: SimpleAssignor's hashing is cheap and stable but lumpy: with few
members, two can hash onto the same partition and leave another partition to round-robin,
so one consumer may get twice the partitions of another. Operators running a handful of
consumers usually want "every consumer gets the same share, and rebalances move as little as
possible". (Rack awareness was the alternative; it is deferred because racks of the
partitions' replicas are not something every backend reports, and the sidecar, not the
partition leader, serves the fetches.)

Per topic, with ``S`` subscribers and ``P`` partitions:

* ``S <= P``: every partition gets exactly one member; each member gets ``floor(P/S)`` or
  ``ceil(P/S)`` partitions of the topic;
* ``S > P``: every member gets exactly one partition of the topic (share groups allow several
  consumers per partition, so nobody idles); each partition gets ``floor(S/P)`` or
  ``ceil(S/P)`` members.

Both cases are the same problem — give each item of the larger side exactly one owner from the
smaller side, with owners' counts differing by at most one — solved stickily: current pairs
are kept while quotas allow, then the rest go to the least-loaded owner (ties: fewest
partitions over all topics, then id).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kshare_sidecar.assignors.model import (
    AssignmentSpec,
    GroupAssignment,
    add,
    assignable_topics,
    empty_assignment,
)


Item = TypeVar("Item", str, int)
Owner = TypeVar("Owner", str, int)


def _balance(items: list[Item], owners: list[Owner], current: dict[Item, list[Owner]],
             tiebreak: Callable[[Owner], int]) -> dict[Item, Owner]:
    """Map every item to one owner; owner counts differ by at most one; keep ``current`` pairs.

    ``current``: item -> list of owners it currently has (only valid owners).
    """
    n_items, n_owners = len(items), len(owners)
    low, extra = divmod(n_items, n_owners)  # `extra` owners may take low + 1
    load = dict.fromkeys(owners, 0)
    out: dict[Item, Owner] = {}
    # Pass 1: keep current pairs up to the minimum quota.
    for item in items:
        for owner in current.get(item, ()):
            if load[owner] < low:
                out[item] = owner
                load[owner] += 1
                break
    # Pass 2: keep current pairs that fit in a quota-plus-one slot.
    for item in items:
        if item in out:
            continue
        for owner in current.get(item, ()):
            if extra > 0 and load[owner] == low:
                out[item] = owner
                load[owner] += 1
                extra -= 1
                break
    # Pass 3: the rest to whoever is least loaded and still has room.
    for item in items:
        if item in out:
            continue
        candidates = [o for o in owners if load[o] < low or (load[o] == low and extra > 0)]
        owner = min(candidates, key=lambda o: (load[o], tiebreak(o), o))
        if load[owner] == low:
            extra -= 1
        out[item] = owner
        load[owner] += 1
    return out


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: AssignmentSpec) -> GroupAssignment:
        result = empty_assignment(spec)
        total: dict[str, int] = dict.fromkeys(spec.members, 0)
        for topic_id, _count, subscribers in assignable_topics(spec):
            partitions = spec.topics[topic_id].assignable_partitions()
            if not partitions:
                continue
            pairs: list[tuple[str, int]]
            if len(subscribers) <= len(partitions):
                owners = {p: [m for m in spec.current_members(topic_id, p) if m in total and m in subscribers]
                          for p in partitions}
                owner_of = _balance(partitions, subscribers, owners, lambda m: total[m])
                pairs = [(m, p) for p, m in owner_of.items()]
            else:
                held = {m: sorted(p for p in spec.members[m].assigned.get(topic_id, ()) if p in partitions)
                        for m in subscribers}
                partition_of = _balance(subscribers, partitions, held, lambda p: 0)
                pairs = list(partition_of.items())
            for member, partition in sorted(pairs):
                add(result, member, topic_id, partition)
                total[member] += 1
        return GroupAssignment(result)
