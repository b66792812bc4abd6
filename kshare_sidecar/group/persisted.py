"""A share group as its coordinator persists it, and back (pure).

Kafka's group coordinator writes a share group's members to ``__consumer_offsets``
(ShareGroupMemberMetadata, ShareGroupCurrentMemberAssignment, ShareGroupTargetAssignmentMember /
Metadata, ShareGroupMetadata) and replays them when it loads the partition, re-arming every
member's session timer (GroupMetadataManager.onLoaded): a member keeps its id, epoch and
assignment across a coordinator failover or a broker restart. kshare does the same with the
group record and one member record per member (persist/records.py); this module converts between
them and the coordinator's :class:`~kshare_sidecar.group.coordinator.ShareGroup`, so the
coordinator stays free of persistence and the service layer only compares and writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from ..persist.records import GroupRecord, MemberRecord
from .coordinator import Assignment, Member, ShareGroup, ShareGroupCoordinator


def _by_text(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[str, tuple[int, ...]]:
    return {str(t): tuple(sorted(ps)) for t, ps in assignment.items()}


def _by_id(assignment: Mapping[str, Iterable[int]]) -> Assignment:
    return {uuid.UUID(t): frozenset(ps) for t, ps in assignment.items()}


def group_record(coordinator: ShareGroupCoordinator, group: ShareGroup) -> GroupRecord:
    """The group's record: epochs, initialized share-partitions, configs, subscribed topics'
    metadata and the assignor that computed the target."""
    initialized = coordinator.initialized_partitions(group.group_id)
    return GroupRecord(
        group.group_id, group_epoch=group.group_epoch,
        initialized={str(t): tuple(sorted(ps)) for t, ps in sorted(initialized.items(), key=lambda kv: str(kv[0]))},
        configs={k: str(v) for k, v in group.configs.items()},
        assignment_epoch=group.assignment_epoch, assignor=group.assignor,
        topic_metadata={name: (str(tid), n) for name, (tid, n) in group.topics_seen.items()})


def member_record(group: ShareGroup, member: Member) -> MemberRecord:
    """One member's record: subscription, client, epochs, current and target assignment.

    Built again only when one of them changed (the coordinator replaces assignments, never
    changes them in place, so they are compared by identity): the group service asks at every
    heartbeat whether the stored record is still the member's."""
    target = group.target.get(member.member_id)
    memo = member.record_memo
    if memo is not None:
        (subscribed, rack, client_id, host, epoch, previous, assignment, old_target), record = memo
        if (assignment is member.assignment and old_target is target and epoch == member.member_epoch
                and previous == member.previous_epoch and subscribed == member.subscribed and rack == member.rack_id
                and client_id == member.client_id and host == member.client_host):
            return record
    record = _member_record(group, member, target)
    member.record_memo = ((member.subscribed, member.rack_id, member.client_id, member.client_host,
                           member.member_epoch, member.previous_epoch, member.assignment, target), record)
    return record


def _member_record(group: ShareGroup, member: Member, target: Assignment | None) -> MemberRecord:
    return MemberRecord(
        group.group_id, member.member_id, subscribed=member.subscribed, rack_id=member.rack_id,
        client_id=member.client_id, client_host=member.client_host, member_epoch=member.member_epoch,
        previous_epoch=member.previous_epoch, assignment=_by_text(member.assignment),
        target=None if target is None else _by_text(target))


def restore(coordinator: ShareGroupCoordinator, record: GroupRecord,
            members: Iterable[MemberRecord] = ()) -> None:
    """Recreate a group from its record and its members' records (Kafka's replay + onLoaded: the
    members keep their ids, epochs and assignments, each with a fresh session timeout). A group
    record of an older build has no members beside it: they rejoin with epoch 0."""
    restored = [Member(m.member_id, tuple(m.subscribed), m.rack_id, m.client_id, m.client_host,
                       member_epoch=m.member_epoch, previous_epoch=m.previous_epoch,
                       assignment=_by_id(m.assignment)) for m in members]
    targets = {m.member_id: _by_id(m.target) for m in members if m.target is not None}
    coordinator.restore_group(
        record.group_id, record.group_epoch, dict(record.configs),
        initialized={uuid.UUID(t): ps for t, ps in record.initialized.items()},
        assignment_epoch=record.assignment_epoch, assignor=record.assignor,
        topics_seen={name: (uuid.UUID(tid), n) for name, (tid, n) in record.topic_metadata.items()},
        members=restored, targets=targets)
