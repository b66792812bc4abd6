"""Assignor interface, shaped like KIP-848's ``PartitionAssignor``: AssignmentSpec -> GroupAssignment.

Pure and synchronous: assignors never do I/O and never see the clock, so the group coordinator
can call them inline and tests can call them with plain data.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


class AssignorError(Exception):
    """The assignor cannot produce an assignment for this spec."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member of the group as the assignor sees it (KIP-848 ``AssignmentMemberSpec``).

    ``subscribed_topic_ids``: the topic ids the member subscribes to (names are resolved to ids
    by the coordinator; ids missing from ``AssignmentSpec.topics`` are ignored).
    ``assigned``: the member's current target assignment, topic id -> partitions; assignors
    use it for stickiness.
    """

    subscribed_topic_ids: frozenset[str]
    rack_id: str | None = None
    instance_id: str | None = None
    assigned: Mapping[str, frozenset[int]] = field(default_factory=dict)
    #: The names the member subscribed to, unknown topics included (None: derived from the ids).
    #: Kafka decides homogeneous vs heterogeneous subscriptions on these names.
    subscribed_topic_names: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """KIP-848 ``AssignmentTopicMetadata``: name and partition count of a subscribed topic.

    ``assignable``: the partitions that may be assigned — those whose share-partition state is
    initialized (Kafka's ``GroupSpec.isPartitionAssignable``); None means all. The coordinator
    drops any other partition an assignor returns."""

    name: str
    partition_count: int
    # Optional: partition -> racks of its replicas, for rack-aware assignors.
    partition_racks: Mapping[int, frozenset[str]] = field(default_factory=dict)
    assignable: frozenset[int] | None = None

    def assignable_partitions(self) -> list[int]:
        """The partitions an assignor may hand out, ascending."""
        if self.assignable is None:
            return list(range(self.partition_count))
        return [p for p in range(self.partition_count) if p in self.assignable]


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    """Members keyed by member id, topics keyed by topic id."""

    members: Mapping[str, MemberSpec]
    topics: Mapping[str, TopicMetadata]

    def subscribers(self, topic_id: str) -> list[str]:
        """Member ids subscribed to ``topic_id``, sorted (the deterministic member order)."""
        return sorted(m for m, spec in self.members.items() if topic_id in spec.subscribed_topic_ids)

    def current_members(self, topic_id: str, partition: int) -> list[str]:
        return sorted(m for m, spec in self.members.items()
                      if partition in spec.assigned.get(topic_id, ()))


@dataclass(slots=True)
class GroupAssignment:
    """KIP-848 ``GroupAssignment``: member id -> {topic id -> set of partitions}.

    Every member of the spec appears, possibly with an empty mapping. Topics with no partitions
    for a member are omitted.
    """

    members: dict[str, dict[str, set[int]]]

    def partitions_of(self, member_id: str) -> dict[str, set[int]]:
        return self.members.get(member_id, {})

    def members_of(self, topic_id: str, partition: int) -> set[str]:
        return {m for m, topics in self.members.items() if partition in topics.get(topic_id, ())}

    def frozen(self) -> dict[str, dict[str, frozenset[int]]]:
        """A comparable/hashable-friendly copy (handy for ``MemberSpec.assigned``)."""
        return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in self.members.items()}


@runtime_checkable
class Assignor(Protocol):
    """A server-side share-group assignor. ``name`` is what the ``assignor`` setting selects."""

    name: str

    def assign(self, spec: AssignmentSpec) -> GroupAssignment: ...


def assignable_topics(spec: AssignmentSpec) -> Iterator[tuple[str, int, list[str]]]:
    """Topics to assign, in a deterministic order: (topic id, partition count, sorted subscribers),
    skipping topics without partitions or subscribers. (Partitions that are not assignable are
    dropped by the coordinator; :meth:`TopicMetadata.assignable_partitions` lists the others.)"""
    for topic_id in sorted(spec.topics):
        count = spec.topics[topic_id].partition_count
        subscribers = spec.subscribers(topic_id)
        if count > 0 and subscribers:
            yield topic_id, count, subscribers


def empty_assignment(spec: AssignmentSpec) -> dict[str, dict[str, set[int]]]:
    return {member_id: {} for member_id in spec.members}


def add(result: dict[str, dict[str, set[int]]], member_id: str, topic_id: str, partition: int) -> None:
    result[member_id].setdefault(topic_id, set()).add(partition)


def next_spec(spec: AssignmentSpec, assignment: GroupAssignment) -> AssignmentSpec:
    """The same spec with ``assigned`` replaced by ``assignment`` (for recomputation / tests)."""
    frozen = assignment.frozen()
    members = {m: MemberSpec(s.subscribed_topic_ids, s.rack_id, s.instance_id, frozen.get(m, {}),
                             s.subscribed_topic_names)
               for m, s in spec.members.items()}
    return AssignmentSpec(members=members, topics=spec.topics)
