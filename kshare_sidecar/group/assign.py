"""Adapter from the coordinator's UUID-keyed view to the assignor plugins' AssignmentSpec."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from ..assignors.model import AssignmentSpec, MemberSpec, TopicMetadata
from .coordinator import AssignFn, Assignment


def assign_with(assignor) -> AssignFn:
    """Wrap an assignor plugin (``assign(AssignmentSpec) -> GroupAssignment``) for the coordinator.

    The current target assignment is passed as each member's ``assigned`` so sticky assignors
    can keep partitions where they are; ``assignable`` (the initialized share-partitions, by
    topic) becomes each topic's ``TopicMetadata.assignable``."""

    def assign(members: Mapping[str, frozenset[uuid.UUID]], partitions: Mapping[uuid.UUID, int],
               racks: Mapping[str, str | None], current: Mapping[str, Assignment], *,
               names: Mapping[str, frozenset[str]] | None = None,
               topic_names: Mapping[uuid.UUID, str] | None = None,
               assignable: Mapping[uuid.UUID, frozenset[int]] | None = None):
        names, topic_names = names or {}, topic_names or {}
        spec = AssignmentSpec(
            members={m: MemberSpec(frozenset(str(t) for t in subs), rack_id=racks.get(m),
                                   assigned={str(t): frozenset(ps) for t, ps in current.get(m, {}).items()},
                                   subscribed_topic_names=names.get(m))
                     for m, subs in members.items()},
            topics={str(t): TopicMetadata(name=topic_names.get(t, str(t)), partition_count=n,
                                          assignable=None if assignable is None
                                          else frozenset(assignable.get(t, frozenset())))
                    for t, n in partitions.items()})
        result = assignor.assign(spec)
        return {m: {uuid.UUID(t): frozenset(ps) for t, ps in topics.items()} for m, topics in result.members.items()}

    return assign
