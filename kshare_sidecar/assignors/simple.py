"""Kafka's share-group ``SimpleAssignor`` (4.3), step for step: the same input gives the same output.

Read from Kafka 4.3.1's ``SimpleHomogeneousAssignmentBuilder`` and ``SimpleHeterogeneousAssignment
Builder``. For a pool of P partitions and M members:

- desired sharing S = ceil(M / P): how many members each partition gets (1 unless M > P);
- member i's desired count = ceil(S·P/M·(i+1)) − ceil(S·P/M·i);
- keep what members have (stickiness), but revoke partitions of topics no longer subscribed,
  partitions beyond a member's desired count, and members beyond S on a partition;
- hand the partitions short of S members to the members short of their count, cycling.

When every member subscribes to the same topic *names* (unknown topics included, as Kafka's
``SubscriptionType``) there is one pool; otherwise each topic is its own pool.

*Which* partitions an overfilled member gives up, which member index gets the larger count and
which member a free partition goes to follow the iteration order of the Java hash collections
Kafka's code walks; :mod:`.javaorder` reproduces that order, so that behaviour under churn is
the same as a Kafka 4.3 broker's (verified against Kafka's own class in
``tests/integration/assignors/test_simple_assignor_oracle.py`` and end to end by ``tests/e2e/parity``).
Quirks are kept: an unsubscribed topic that no member subscribes to any more stays assigned in
the heterogeneous case, and a topic whose partitions were all revoked stays with an empty set.
Only a topic's ``assignable`` partitions (initialized share-partitions) are targets, as Kafka's
``isPartitionAssignable``; the pool size and desired counts are computed over those.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from kshare_sidecar.assignors.javaorder import (
    JavaHashMap,
    JavaHashSet,
    expected_size_capacity,
    int_hash,
    string_hash,
    topic_partition_hash,
    uuid_hash,
)
from kshare_sidecar.assignors.model import AssignmentSpec, GroupAssignment

TP = tuple[str, int]
MemberMap = JavaHashMap[str, JavaHashSet[int]]  # topic id -> partitions
P = TypeVar("P", int, TP)  # a pool's partition key: a partition (one topic) or (topic id, partition)


def _tp_hash(tp: TP) -> int:
    return topic_partition_hash(tp[0], tp[1])


def _int_set(items: Iterable[int] = ()) -> JavaHashSet[int]:
    return JavaHashSet(int_hash, None, items)


def _assignment_map(assigned: Mapping[str, Iterable[int]], counts: dict[str, int]) -> MemberMap:
    """A member's current assignment as Kafka holds it (a HashMap built from its record).

    Partitions at or above a topic's count are dropped: Kafka topics never shrink, so its code
    never sees them (a topic re-created smaller has a new id)."""
    out: MemberMap = JavaHashMap(uuid_hash)
    for topic_id in sorted(assigned):
        limit = counts.get(topic_id)
        out.put(topic_id, JavaHashSet.of(int_hash, sorted(p for p in assigned[topic_id]
                                                          if limit is None or p < limit)))
    return out


def _deep_copy(old: MemberMap) -> MemberMap:
    """``AssignorHelpers.deepCopyAssignment``: new HashMap<>(size) of new HashSet<>(partitions)."""
    copy: MemberMap = JavaHashMap(uuid_hash, len(old))
    for topic_id, parts in old.items():
        copy.put(topic_id, parts.copy())
    return copy


class _LiveIterator:
    """A Java iterator over a HashSet that is only changed through the iterator itself."""

    def __init__(self, items: JavaHashSet[int]) -> None:
        self._set, self._order, self._pos = items, list(items), 0

    def has_next(self) -> bool:
        return self._pos < len(self._order)

    def next(self) -> int:
        self._pos += 1
        return self._order[self._pos - 1]

    def remove(self) -> None:
        self._set.remove(self._order[self._pos - 1])


class SimpleAssignor:
    name = "simple"

    def assign(self, spec: AssignmentSpec) -> GroupAssignment:
        # TargetAssignmentBuilder's memberSpecs: new HashMap<>()
        order: JavaHashMap[str, None] = JavaHashMap(string_hash)
        for member_id in spec.members:
            order.put(member_id, None)
        member_ids = order.keys()
        if not member_ids:
            return GroupAssignment({})
        by_name = {meta.name: topic_id for topic_id, meta in spec.topics.items()}
        names = {m: _names(spec, m) for m in member_ids}

        def topic_ids(member: str) -> list[str]:  # TopicIds: the names set's order, resolved
            return [by_name[n] for n in JavaHashSet.of(string_hash, names[member]) if n in by_name]

        homogeneous = len({frozenset(v) for v in names.values()}) <= 1
        counts = {t: meta.partition_count for t, meta in spec.topics.items()}
        targets = {t: meta.assignable_partitions() for t, meta in spec.topics.items()}
        old = {i: _assignment_map(spec.members[m].assigned, counts) for i, m in enumerate(member_ids)}
        if homogeneous:
            new = _Homogeneous(len(member_ids), topic_ids(member_ids[0]), targets, old).build()
        else:
            new = _Heterogeneous(member_ids, topic_ids, targets, old).build()
        if new is None:
            return GroupAssignment({m: {} for m in member_ids})
        return GroupAssignment({m: {t: set(ps) for t, ps in new.get(i, old[i]).items()}
                                for i, m in enumerate(member_ids)})


def _names(spec: AssignmentSpec, member: str) -> list[str]:
    ms = spec.members[member]
    if ms.subscribed_topic_names is not None:
        return sorted(ms.subscribed_topic_names)
    return sorted(spec.topics[t].name if t in spec.topics else t for t in ms.subscribed_topic_ids)


def _desired_counts(sharing: int, n_partitions: int, n_members: int) -> list[int]:
    precise = sharing * n_partitions / n_members
    return [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(n_members)]


def _assign_remaining(by_partition: JavaHashMap[P, JavaHashSet[int]], unfilled: JavaHashSet[int],
                      sharing: int, place: Callable[[int, P], None], full: Callable[[int], bool]) -> None:
    """Kafka's assignRemainingPartitions: one pass over the partitions, one iterator over the
    unfilled members that runs on across partitions and restarts only after a useful round."""
    if not len(unfilled):
        return
    it = _LiveIterator(unfilled)
    assigned_this_round = False
    for key, holders in by_partition.items():
        if len(holders) < sharing:
            to_make = sharing - len(holders)
            while to_make > 0:
                if not it.has_next():
                    if not assigned_this_round:
                        break
                    it = _LiveIterator(unfilled)
                    assigned_this_round = False
                    if not it.has_next():
                        break
                member = it.next()
                if member not in holders:  # (Kafka does not add the member to holders here)
                    place(member, key)
                    to_make -= 1
                    assigned_this_round = True
                    if full(member):
                        it.remove()
        if not len(unfilled):
            break


class _Homogeneous:
    def __init__(self, n_members: int, subscribed: list[str], targets: dict[str, list[int]],
                 old: dict[int, MemberMap]) -> None:
        self.subscribed, self.subscribed_set = subscribed, set(subscribed)
        self.targets = [(t, p) for t in subscribed for p in targets[t]]  # assignable ones only
        n_parts = len(self.targets)
        self.sharing = 0 if n_parts == 0 else (n_members + n_parts - 1) // n_parts
        self.desired = _desired_counts(self.sharing, n_parts, n_members) if n_parts else [0] * n_members
        self.old = old
        self.new: dict[int, MemberMap] = {}
        self.by_partition: JavaHashMap[TP, JavaHashSet[int]] = JavaHashMap(
            _tp_hash, expected_size_capacity(n_parts))
        self.by_member: JavaHashMap[int, JavaHashSet[TP]] = JavaHashMap(
            int_hash, expected_size_capacity(n_members))
        self.unfilled = JavaHashSet(int_hash, expected_size_capacity(n_members))
        self.overfilled = JavaHashSet(int_hash, expected_size_capacity(n_members))

    def build(self) -> dict[int, MemberMap] | None:
        if not self.subscribed_set:
            return None
        self._revoke_unassignable()
        self._revoke_overfilled()
        self._revoke_overshared()
        for tp in self.targets:
            self.by_partition.compute_if_absent(tp, _int_set)
        _assign_remaining(self.by_partition, self.unfilled, self.sharing, self._place,
                          lambda i: len(self.by_member[i]) >= self.desired[i])
        return self.new

    def _copy_of(self, i: int) -> MemberMap:
        if i not in self.new:
            self.new[i] = _deep_copy(self.old[i])
        return self.new[i]

    def _place(self, i: int, tp: TP) -> None:
        self._copy_of(i).compute_if_absent(tp[0], _int_set).add(tp[1])
        self.by_member.compute_if_absent(i, lambda: JavaHashSet(_tp_hash)).add(tp)

    def _revoke_unassignable(self) -> None:
        for i in sorted(self.old):  # oldGroupAssignment: newHashMap(n) keyed by index, ascending
            old_map, count, desired = self.old[i], 0, self.desired[i]
            new_map: MemberMap | None = None
            for topic_id, parts in old_map.items():
                if topic_id in self.subscribed_set:
                    for p in parts:
                        count += 1
                        self.by_partition.compute_if_absent((topic_id, p), _int_set).add(i)
                        self.by_member.compute_if_absent(i, lambda: JavaHashSet(_tp_hash)).add((topic_id, p))
                        if count >= desired and new_map is None:
                            new_map = _deep_copy(old_map)
                else:
                    if new_map is None:
                        new_map = _deep_copy(old_map)
                    new_map.remove(topic_id)
            if new_map is not None:
                self.new[i] = new_map
            if count < desired:
                self.unfilled.add(i)
            elif count > desired:
                self.overfilled.add(i)

    def _revoke_overfilled(self) -> None:
        for i in self.overfilled:
            desired, owned = self.desired[i], self.by_member[i]
            if len(owned) > desired:
                for tp in list(owned):
                    self.new[i][tp[0]].remove(tp[1])
                    self.by_partition[tp].remove(i)
                    owned.remove(tp)
                    if len(owned) == desired:
                        break

    def _revoke_overshared(self) -> None:
        for tp, holders in self.by_partition.items():
            count = len(holders)
            if count > self.sharing:
                for i in list(holders):
                    parts = self._copy_of(i).get(tp[0])
                    if parts is not None and parts.remove(tp[1]):
                        count -= 1
                        holders.remove(i)
                        self.by_member[i].remove(tp)
                        self.unfilled.add(i)
                    if count <= self.sharing:
                        break


class _Heterogeneous:
    def __init__(self, member_ids: list[str], topic_ids: Callable[[str], list[str]],
                 targets: dict[str, list[int]], old: dict[int, MemberMap]) -> None:
        self.n_members = len(member_ids)
        self.subscribed: JavaHashSet[str] = JavaHashSet(uuid_hash)  # new HashSet<>() + addAll per member
        subscriptions = [topic_ids(m) for m in member_ids]
        for ids in subscriptions:
            for t in ids:
                self.subscribed.add(t)
        self.members_by_topic: dict[str, list[int]] = {}
        for i, ids in enumerate(subscriptions):
            for t in ids:
                self.members_by_topic.setdefault(t, []).append(i)
        self.targets, self.old = targets, old
        self.new: dict[int, MemberMap] = {}

    def build(self) -> dict[int, MemberMap] | None:
        if not len(self.subscribed):
            return None
        for topic_id in self.subscribed:
            _TopicPool(self, topic_id).build()
        return self.new

    def copy_of(self, i: int) -> MemberMap:
        if i not in self.new:
            self.new[i] = _deep_copy(self.old[i])
        return self.new[i]


class _TopicPool:
    """Kafka's TopicAssignmentPartialBuilder: one topic and its subscribers."""

    def __init__(self, outer: _Heterogeneous, topic_id: str) -> None:
        self.outer, self.topic_id = outer, topic_id
        self.targets = outer.targets[topic_id]  # assignable partitions only
        self.subscribers = outer.members_by_topic[topic_id]
        self.by_partition: JavaHashMap[int, JavaHashSet[int]] = JavaHashMap(
            int_hash, expected_size_capacity(len(self.targets)))
        self.by_member: JavaHashMap[int, JavaHashSet[int]] = JavaHashMap(
            int_hash, expected_size_capacity(len(self.subscribers)))
        n_parts, n_subs = len(self.targets), len(self.subscribers)
        self.sharing = 0 if n_parts == 0 else (n_subs + n_parts - 1) // n_parts
        self.desired = [0] * outer.n_members
        if n_parts:
            for k, count in enumerate(_desired_counts(self.sharing, n_parts, n_subs)):
                self.desired[self.subscribers[k]] = count

    def build(self) -> None:
        self._revoke_unassignable()
        self._revoke_overfilled()
        self._revoke_overshared()
        for p in self.targets:
            self.by_partition.compute_if_absent(
                p, lambda: JavaHashSet(int_hash, expected_size_capacity(len(self.subscribers))))
        unfilled = JavaHashSet(int_hash, expected_size_capacity(self.outer.n_members))
        for i in self.subscribers:
            owned = self.by_member.get(i)
            if (0 if owned is None else len(owned)) < self.desired[i]:
                unfilled.add(i)
        _assign_remaining(self.by_partition, unfilled, self.sharing, self._place,
                          lambda i: len(self.by_member[i]) >= self.desired[i])

    def _place(self, i: int, p: int) -> None:
        self.outer.copy_of(i).compute_if_absent(self.topic_id, _int_set).add(p)
        self.by_member.compute_if_absent(i, _int_set).add(p)

    def _revoke_unassignable(self) -> None:
        for i in sorted(self.outer.old):
            old_map = self.outer.old[i]
            if not len(old_map):
                continue
            parts = old_map.get(self.topic_id)
            if parts is not None:  # the topic is subscribed by someone (it is this pool's)
                for p in parts:
                    self.by_partition.compute_if_absent(p, _int_set).add(i)
                    self.by_member.compute_if_absent(i, _int_set).add(p)

    def _revoke_overfilled(self) -> None:
        for i, owned in self.by_member.items():
            desired = self.desired[i]
            if len(owned) > desired:
                new_map = self.outer.new.get(i)
                for p in list(owned):
                    if len(owned) <= desired:
                        break
                    self.by_partition[p].remove(i)
                    owned.remove(p)
                    if new_map is None:
                        new_map = self.outer.copy_of(i)
                    new_map[self.topic_id].remove(p)

    def _revoke_overshared(self) -> None:
        for p, holders in self.by_partition.items():
            count = len(holders)
            if count > self.sharing:
                for i in list(holders):
                    parts = self.outer.copy_of(i).get(self.topic_id)
                    if parts is not None and parts.remove(p):
                        count -= 1
                        holders.remove(i)
                        self.by_member[i].remove(p)
                    if count <= self.sharing:
                        break
