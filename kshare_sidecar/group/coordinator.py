"""The share-group coordinator: pure state, driven by heartbeats and an injected clock.

KIP-932 share groups reuse KIP-848's epochs without revocation: a member gets its target
assignment as soon as the group's assignment epoch moves past its member epoch, because
share-partitions may be consumed by several members at once.

- group epoch: bumped (once per heartbeat, whatever the reasons) on a membership, subscription or
  topic-metadata change, and when initialized share-partitions wait to be assigned; a new group
  starts at 1, as Kafka's (so a first member joins at epoch 2);
- assignment epoch: the group epoch the current target assignment was computed for (at most once
  per ``share.assignment.interval.ms``);
- member epoch: the assignment epoch the member last received.

Only share-partitions whose state is initialized are assigned, and a heartbeat that subscribes
the group to new partitions asks the caller to initialize them (``HeartbeatResult.initialize``),
as Kafka's GroupMetadataManager does: see group/initialization.py for why and what that does to
the epochs.

Each group may choose its assignor (kshare's ``share.assignor`` group config; the sidecar's
``assignor`` setting otherwise). The name that computed a group's target is kept with it, and a
heartbeat that finds the group's choice changed bumps the group epoch, so the next assignment
recomputes the target with the new assignor — Kafka's rule for assignment-relevant group configs
(streams groups compare the assignment configs stored with the group at heartbeat time, which also
keeps a restart from causing a spurious rebalance).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from kio.schema.errors import ErrorCode

from ..backend.types import TopicInfo
from .initialization import Partitions, ShareStateMetadata

Assignment = dict[uuid.UUID, frozenset[int]]
#: (members: member id -> subscribed topic ids, topics: topic id -> partition count, racks,
#: current target, *, names: member id -> subscribed topic names, topic_names: id -> name,
#: assignable: topic id -> the partitions that may be assigned (initialized))
#: -> member id -> topic id -> partitions. See group/assign.py for the adapter to assignor plugins.
AssignFn = Callable[..., Mapping[str, Mapping[uuid.UUID, frozenset[int]]]]


class GroupState(Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    subscribed: tuple[str, ...]
    rack_id: str | None
    client_id: str
    client_host: str
    member_epoch: int = 0
    previous_epoch: int = -1
    assignment: Assignment = field(default_factory=dict)
    sent_assignment: Assignment | None = None
    deadline_ms: int = 0
    #: the member's last record (group/persisted.py) and what it was built from, compared by
    #: identity: a heartbeat that changed nothing reuses it instead of building one to compare
    record_memo: tuple | None = field(default=None, repr=False, compare=False)


#: Kafka's ModernGroup starts a group at epoch 1 (TargetAssignmentMetadata.INITIAL likewise).
INITIAL_EPOCH = 1
NEVER = -(10**15)


@dataclass
class ShareGroup:
    """One share group. At group epoch 0 it only holds per-group configs (set before the group
    exists, as Kafka allows); a heartbeat or an offsets reset creates it, at epoch 1."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    topics_seen: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)  # name -> (id, partitions)
    configs: dict[str, object] = field(default_factory=dict)
    assignor: str | None = None  # the assignor that computed ``target`` (None: none computed yet)
    last_assignment_ms: int = NEVER
    deleted: bool = False
    share_state: ShareStateMetadata = field(default_factory=ShareStateMetadata)
    #: Derived from the members, the target and the subscribed topics, kept until one of them
    #: changes (``touch``): a heartbeat must not walk every member or the whole target of its group
    #: (at 2,000 members a group of 200 made each heartbeat O(members)).
    version: int = field(default=0, repr=False, compare=False)
    _subscribed: frozenset[str] | None = field(default=None, repr=False, compare=False)
    _pending: tuple[tuple[int, int, bool], bool] | None = field(default=None, repr=False, compare=False)

    def touch(self) -> None:
        """A member joined, left or changed its subscription, or the target or the subscribed
        topics' metadata changed: what is derived from them is computed again when next asked."""
        self.version += 1
        self._subscribed = None

    @property
    def exists(self) -> bool:
        """Whether the group exists as a share group (not just as a holder of configs)."""
        return not self.deleted and self.group_epoch > 0

    def create(self) -> None:
        """Make a config holder a share group, at Kafka's initial epochs."""
        if self.group_epoch == 0:
            self.group_epoch = self.assignment_epoch = INITIAL_EPOCH

    @property
    def state(self) -> GroupState:
        if self.deleted:
            return GroupState.DEAD
        return GroupState.STABLE if self.members else GroupState.EMPTY

    def subscribed_topics(self) -> frozenset[str]:
        if self._subscribed is None:
            self._subscribed = frozenset(t for m in self.members.values() for t in m.subscribed)
        return self._subscribed


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None = unchanged (not sent)
    #: Share-partitions the caller must initialize now (marked initializing); it reports the
    #: outcome with ``initialized`` / ``initialization_failed``.
    initialize: Partitions = field(default_factory=dict)


def _config_ms(value: object) -> int:
    """A per-group duration override: an int once validated (AdminService), the record's string
    after a restore."""
    assert isinstance(value, (int, str)), f"group config value {value!r}"
    return int(value)


def _only_assignable(assigned: Mapping[uuid.UUID, Iterable[int]], assignable: Partitions) -> Assignment:
    """An assignor's result for one member without the partitions that may not be assigned (a
    topic the assignor itself left empty stays, empty)."""
    out: Assignment = {}
    for tid, ps in assigned.items():
        ps = frozenset(ps)
        kept = ps & assignable.get(tid, frozenset())
        if kept or not ps:
            out[tid] = kept
    return out


class ShareGroupCoordinator:
    """All share groups of this sidecar. Pure: callers supply time and topic metadata."""

    def __init__(self, *, assign: AssignFn, clock: Callable[[], int], max_size: int = 200,
                 session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000,
                 assignment_interval_ms: int = 0, assignors: Mapping[str, AssignFn] | None = None,
                 default_assignor: str = "") -> None:
        """``assign`` is the sidecar-wide assignor, named ``default_assignor``; ``assignors`` maps
        the registered assignor names a group may choose with ``share.assignor`` to their
        functions (the default is added when missing)."""
        self.assign = assign
        self.assignors = dict(assignors or {})
        self.default_assignor = default_assignor
        if default_assignor:
            self.assignors.setdefault(default_assignor, assign)
        self.clock = clock
        self.max_size = max_size
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.assignment_interval_ms = assignment_interval_ms
        self.groups: dict[str, ShareGroup] = {}

    # -- heartbeats ------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None,
                  subscribed_topic_names: list[str] | None, topics: Mapping[str, TopicInfo],
                  client_id: str = "", client_host: str = "") -> HeartbeatResult:
        """Apply one ShareGroupHeartbeat. ``topics`` describes the subscribed topics that exist."""
        if not group_id or not member_id or len(member_id) > 36 or rack_id == "":
            return HeartbeatResult(ErrorCode.invalid_request, "GroupId, MemberId (<= 36 chars) and RackId "
                                   "must not be empty", member_id or None, member_epoch)
        if member_epoch < -1:
            return HeartbeatResult(ErrorCode.invalid_request, f"invalid member epoch {member_epoch}",
                                   member_id, member_epoch)
        if member_epoch == 0 and not subscribed_topic_names:
            return HeartbeatResult(ErrorCode.invalid_request, "SubscribedTopicNames must be set when joining",
                                   member_id, member_epoch)
        now = self.clock()
        group = self.groups.get(group_id)
        if member_epoch == -1:  # leaving: Kafka's shareGroupLeave looks the group and member up first
            if group is None or not group.exists:
                return HeartbeatResult(ErrorCode.group_id_not_found, f"Group {group_id} not found.",
                                       member_id, member_epoch)
            if member_id not in group.members:
                return HeartbeatResult(ErrorCode.unknown_member_id, f"member {member_id} is not in group "
                                       f"{group_id}", member_id, member_epoch)
            self._remove_member(group, member_id)
            return HeartbeatResult(member_id=member_id, member_epoch=-1,
                                   heartbeat_interval_ms=self._interval(group))
        if group is None or not group.exists:
            if member_epoch != 0:  # Kafka: getOrMaybeCreateShareGroup(createIfNotExists=false)
                return HeartbeatResult(ErrorCode.group_id_not_found, f"Share group {group_id} not found.",
                                       member_id, member_epoch)
            group = self.ensure_group(group_id)
            group.create()
        member = group.members.get(member_id)
        # Kafka asks this of the group as it was before this heartbeat, and only when no new
        # target assignment is pending anyway.
        pending = group.assignment_epoch >= group.group_epoch and self._initialized_assignment_pending(group)
        bump = False
        if member_epoch == 0:
            if member is None and len(group.members) >= self.max_size:
                return HeartbeatResult(ErrorCode.group_max_size_reached, f"group {group_id} has reached "
                                       f"group.share.max.size={self.max_size}", member_id, member_epoch)
            subscribed = tuple(sorted(set(subscribed_topic_names or ())))
            if member is None:
                member = group.members[member_id] = Member(member_id, subscribed, rack_id, client_id, client_host)
                group.touch()
                bump = True
            else:
                # A rejoin of a known member (Kafka's shareGroupHeartbeat with epoch 0): the member
                # keeps its epoch and assignment; the group epoch moves only if the subscription
                # changed (found by the differential harness: kshare started it over).
                if rack_id is not None:
                    member.rack_id = rack_id
                member.client_id, member.client_host = client_id, client_host
                if subscribed != member.subscribed:
                    member.subscribed = subscribed
                    group.touch()
                    bump = True
        elif member is None:
            return HeartbeatResult(ErrorCode.unknown_member_id, f"member {member_id} is not in group {group_id}",
                                   member_id, member_epoch)
        elif member_epoch not in (member.member_epoch, member.previous_epoch):
            return HeartbeatResult(ErrorCode.fenced_member_epoch, f"member epoch {member_epoch} is fenced "
                                   f"(current {member.member_epoch})", member_id, member_epoch)
        else:
            if subscribed_topic_names is not None:
                subscribed = tuple(sorted(set(subscribed_topic_names)))
                if subscribed != member.subscribed:
                    member.subscribed = subscribed
                    group.touch()
                    bump = True
            if rack_id is not None and rack_id != member.rack_id:
                # kshare's (rack-aware assignor plugins; Kafka's simple assignor ignores racks)
                member.rack_id = rack_id
                bump = True
        member.deadline_ms = now + self._session_timeout(group)
        topics_changed = self._observe_topics(group, topics)
        assignor_changed = self._assignor_changed(group)
        if bump or pending or topics_changed or assignor_changed:
            bump = True
            group.group_epoch += 1  # one bump per heartbeat, whatever the reasons (as Kafka)
        self._maybe_assign(group, now)
        # Kafka's maybeReconcile / ShareGroupAssignmentBuilder: move to the target epoch, and
        # re-filter the assignment by the subscription whenever the group epoch moved.
        if member.member_epoch != group.assignment_epoch:
            member.previous_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
            member.assignment = self._subscribed_part(group, member)
        elif bump:
            member.assignment = self._subscribed_part(group, member)
        full = member_epoch == 0 or subscribed_topic_names is not None
        send = None
        if full or member.sent_assignment != member.assignment:
            send = member.sent_assignment = dict(member.assignment)
        initialize = group.share_state.to_initialize(
            {tid: n for tid, n in group.topics_seen.values()})
        return HeartbeatResult(member_id=member_id, member_epoch=member.member_epoch,
                               heartbeat_interval_ms=self._interval(group), assignment=send,
                               initialize=initialize)

    def _initialized_assignment_pending(self, group: ShareGroup) -> bool:
        key = (group.version, group.share_state.version, bool(group.members))
        if group._pending is not None and group._pending[0] == key:
            return group._pending[1]
        union: dict[uuid.UUID, set[int]] = {}
        for assignment in group.target.values():
            for tid, ps in assignment.items():
                union.setdefault(tid, set()).update(ps)
        subscribed = {tid: name for name, (tid, _n) in group.topics_seen.items()}
        pending = group.share_state.assignment_pending(subscribed, union, bool(group.members))
        group._pending = (key, pending)
        return pending

    @staticmethod
    def _subscribed_part(group: ShareGroup, member: Member) -> Assignment:
        """The member's share of the target, limited to the topics it subscribes to now (Kafka's
        ShareGroupAssignmentBuilder.filterAssignedPartitions): the simple assignor leaves a topic
        that nobody subscribes to any more in a member's target, and the member must not get it
        (found by the differential harness)."""
        target = group.target.get(member.member_id, {})
        subscribed = {group.topics_seen[name][0] for name in member.subscribed if name in group.topics_seen}
        if all(t in subscribed for t in target):
            return target
        return {t: ps for t, ps in target.items() if t in subscribed}

    def _observe_topics(self, group: ShareGroup, topics: Mapping[str, TopicInfo]) -> bool:
        """Whether a subscribed topic appeared, disappeared, grew or was recreated (Kafka's
        metadata hash of the subscribed topics changed): the group epoch must move."""
        subscribed = group.subscribed_topics()
        seen = {name: (info.topic_id, info.partitions) for name, info in topics.items() if name in subscribed}
        if seen != group.topics_seen:
            group.topics_seen = seen
            group.touch()
            return True
        return False

    def assignor_for(self, group: ShareGroup) -> str:
        """The assignor the group's next assignment uses: its ``share.assignor``, else the sidecar's.

        A name no loaded plugin registers (a persisted choice whose plugin was uninstalled since)
        falls back to the sidecar's assignor, so the group keeps being served."""
        name = str(group.configs.get("share.assignor") or self.default_assignor)
        return name if name in self.assignors else self.default_assignor

    def assignor_name(self, group: ShareGroup) -> str:
        """ShareGroupDescribe's AssignorName: the assignor that computed the members' current
        assignments; for a group without members, the one its next assignment will use."""
        if group.assignor is not None and group.members:
            return group.assignor
        return self.assignor_for(group)

    def _assignor_changed(self, group: ShareGroup) -> bool:
        """Whether the group's assignor changed since its target was computed (unless a
        recomputation is pending anyway, which will use the new one): the group epoch must move."""
        return group.assignor is not None and group.assignment_epoch >= group.group_epoch \
            and group.assignor != self.assignor_for(group)

    def _maybe_assign(self, group: ShareGroup, now: int) -> None:
        if group.assignment_epoch >= group.group_epoch:
            return
        interval = self._assignment_interval(group)
        if interval and group.last_assignment_ms != NEVER and now < group.last_assignment_ms + interval:
            return  # share.assignment.interval.ms: bursts of joins, one recomputation (Kafka's rule)
        by_name = group.topics_seen
        members = {m.member_id: frozenset(by_name[t][0] for t in m.subscribed if t in by_name)
                   for m in group.members.values()}
        partitions = dict(by_name.values())
        racks = {m.member_id: m.rack_id for m in group.members.values()}
        names = {m.member_id: frozenset(m.subscribed) for m in group.members.values()}
        topic_names = {tid: name for name, (tid, _n) in by_name.items()}
        name = self.assignor_for(group)
        assign = self.assignors.get(name, self.assign)
        assignable = group.share_state.assignable(partitions)
        result = assign(members, partitions, racks, group.target, names=names,
                        topic_names=topic_names, assignable=assignable) if members else {}
        # Only initialized partitions are assigned, whatever a plugin returns (Kafka's
        # isPartitionAssignable). A topic whose partitions were all taken away stays with an
        # empty set, as in Kafka's target assignment (ShareGroupDescribe shows it).
        group.target = {mid: _only_assignable(result.get(mid, {}), assignable) for mid in members}
        group.touch()
        group.assignment_epoch = group.group_epoch
        group.assignor = name
        group.last_assignment_ms = now

    def _remove_member(self, group: ShareGroup, member_id: str) -> None:
        """Kafka's shareGroupFenceMember: one bump, with the subscribed topics recomputed without
        the member (so the next heartbeat does not bump again for them)."""
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.touch()
        still = group.subscribed_topics()
        group.topics_seen = {n: v for n, v in group.topics_seen.items() if n in still}
        group.group_epoch += 1
        if not group.members:
            # Kafka 4.4: the last member's departure writes the (empty) target assignment at the
            # new epoch with no timestamp, so the next member is assigned at once, whatever
            # share.assignment.interval.ms (4.3.1 made it wait for the interval: epoch 2, then 4)
            group.assignment_epoch = group.group_epoch
            group.last_assignment_ms = NEVER

    def _session_timeout(self, group: ShareGroup | None) -> int:
        if group is None:
            return self.session_timeout_ms
        return _config_ms(group.configs.get("share.session.timeout.ms", self.session_timeout_ms))

    def _assignment_interval(self, group: ShareGroup) -> int:
        return _config_ms(group.configs.get("share.assignment.interval.ms", self.assignment_interval_ms))

    def _interval(self, group: ShareGroup | None) -> int:
        if group is None:
            return self.heartbeat_interval_ms
        return _config_ms(group.configs.get("share.heartbeat.interval.ms", self.heartbeat_interval_ms))

    # -- time and administration --------------------------------------------------------------
    def expire_members(self) -> list[tuple[str, str]]:
        """Remove members whose session timed out; returns (group, member) pairs. Releases nothing:
        in Kafka, coordinator expiry leaves acquired records to their locks."""
        now, gone = self.clock(), []
        for group in self.groups.values():
            for member in [m for m in group.members.values() if m.deadline_ms <= now]:
                self._remove_member(group, member.member_id)
                gone.append((group.group_id, member.member_id))
        return gone

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.deadline_ms for g in self.groups.values() for m in g.members.values()]
        return min(deadlines) if deadlines else None

    def ensure_group(self, group_id: str) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None or group.deleted:
            group = self.groups[group_id] = ShareGroup(group_id)
        return group

    def restore_group(self, group_id: str, group_epoch: int, configs: Mapping[str, object], *,
                      initialized: Mapping[uuid.UUID, Iterable[int]] | None = None,
                      assignment_epoch: int | None = None, assignor: str | None = None,
                      topics_seen: Mapping[str, tuple[uuid.UUID, int]] | None = None,
                      members: Iterable[Member] = (), targets: Mapping[str, Assignment] | None = None) -> None:
        """Recreate a group as its coordinator persisted it (group/persisted.py), replacing what is
        held: epochs, configs, initialized share-partitions, the subscribed topics' metadata, the
        target assignment and the members, each with a fresh session timeout from now (Kafka's
        onLoaded). Without members (a record of an older build) they rejoin with epoch 0; without
        an assignment epoch it is the group epoch."""
        group = self.groups[group_id] = ShareGroup(group_id)
        group.group_epoch = group_epoch  # 0: a holder of configs
        group.assignment_epoch = group_epoch if assignment_epoch is None else assignment_epoch
        group.configs = dict(configs)
        group.assignor = assignor
        group.topics_seen = dict(topics_seen or {})
        group.share_state.add_initialized(initialized or {})
        deadline = self.clock() + self._session_timeout(group)
        for member in members:
            member.deadline_ms, member.sent_assignment = deadline, None  # the next answer carries it
            group.members[member.member_id] = member
        group.target = {mid: dict(a) for mid, a in (targets or {}).items() if mid in group.members}
        group.touch()

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or group.deleted:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self.groups[group_id]
        return ErrorCode.none

    # -- share-partition initialization (the caller performs it; see group/initialization.py) --
    def initialized(self, group_id: str, parts: Mapping[uuid.UUID, Iterable[int]]) -> None:
        """The share-partitions' state is initialized (Kafka's initializeShareGroupState): the
        next heartbeat assigns them, one group epoch later."""
        group = self.groups.get(group_id)
        if group is not None:
            group.share_state.add_initialized(parts)

    def initialization_failed(self, group_id: str, parts: Mapping[uuid.UUID, Iterable[int]]) -> None:
        """Initializing them failed (Kafka's uninitializeShareGroupState): a later heartbeat asks again."""
        group = self.groups.get(group_id)
        if group is not None:
            group.share_state.drop_initializing(parts)

    def forget_initialized(self, group_id: str, topic_id: uuid.UUID | None = None) -> None:
        """The group's state of ``topic_id`` (or of all topics) was deleted."""
        group = self.groups.get(group_id)
        if group is not None:
            group.share_state.forget(topic_id)

    def initialized_partitions(self, group_id: str) -> Partitions:
        group = self.groups.get(group_id)
        return dict(group.share_state.initialized) if group is not None else {}
