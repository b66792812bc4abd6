"""Value types the persisters store and return, besides :mod:`kshare_sidecar.persist.model`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kshare_sidecar.persist.model import DeliveryState, PartitionState, SharePartitionKey

UNSET_OFFSET = -1  # start offset not known yet: resolved by the caller via share.auto.offset.reset
NO_EPOCH = -1  # leader/assignment epoch of a share-partition no owner has claimed yet


@dataclass(frozen=True, slots=True)
class StoredPartition:
    """What a persister keeps per share-partition.

    ``state.leader_epoch`` is the *current* owner epoch; ``assignment_epoch`` is the epoch at
    which the current owner took the share-partition over. A write from epoch ``w`` is accepted
    when ``assignment_epoch <= w <= state.leader_epoch`` (KIP-1251-style relaxed fencing, seed
    004): the owner's in-flight writes survive an epoch bump, a previous owner's do not.
    """

    state: PartitionState
    assignment_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class StateSummary:
    """ReadShareGroupStateSummary plus what lag needs.

    Lag of a share-partition = ``high_watermark - start_offset - completed_count`` when
    ``start_offset >= 0``: records at or past the SPSO that are already ACKNOWLEDGED or
    ARCHIVED are done and must not count.
    """

    state_epoch: int
    leader_epoch: int
    start_offset: int
    completed_count: int  # ACKNOWLEDGED + ARCHIVED offsets at or after start_offset
    redelivering_count: int  # AVAILABLE offsets with delivery count > 0 (released / timed out)

    def lag(self, high_watermark: int) -> int | None:
        if self.start_offset < 0:
            return None
        return max(0, high_watermark - self.start_offset - self.completed_count)


def summarize(state: PartitionState) -> StateSummary:
    completed = redelivering = 0
    for b in state.state_batches:
        first = max(b.first_offset, state.start_offset)
        if b.last_offset < first:
            continue
        size = b.last_offset - first + 1
        if b.delivery_state in (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED):
            completed += size
        elif b.delivery_state == DeliveryState.AVAILABLE and b.delivery_count > 0:
            redelivering += size
    return StateSummary(state.state_epoch, state.leader_epoch, state.start_offset, completed, redelivering)


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A share group's durable metadata (kind ``g`` in the state topic): what a restarted (or
    taking-over) coordinator restores (group/service.py, group/persisted.py).

    ``group_epoch``: the group's epoch, so members rejoining see it move on, never back.
    ``initialized``: topic id -> partitions whose share-partition state has been initialized
    (KIP-932's ShareGroupStatePartitionMetadata). ``configs``: per-group config overrides.
    ``assignment_epoch`` (None: the group epoch, as records of older builds mean), ``assignor``
    (the assignor that computed the target) and ``topic_metadata`` (subscribed topic name ->
    (topic id, partitions): what Kafka keeps as the group's metadata hash) are Kafka's
    ShareGroupMetadata / ShareGroupTargetAssignmentMetadata: with the members' records they let a
    new coordinator go on without an epoch bump. Subscriptions are the members' (records written
    by older builds carry ``type`` and ``topics``, which decoding ignores).
    """

    group_id: str
    group_epoch: int = 0
    initialized: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    configs: Mapping[str, str] = field(default_factory=dict)
    assignment_epoch: int | None = None
    assignor: str | None = None
    topic_metadata: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    #: the owner epoch of the sidecar that wrote it (stamped by the persister; NO_EPOCH in records
    #: of older builds): replay's owner rule ignores a superseded owner's late write. Not part of
    #: what the record says, so not compared.
    owner_epoch: int = field(default=NO_EPOCH, compare=False)


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One share group member as its coordinator persists it (kind ``m``, placed with its group's
    record): Kafka's ShareGroupMemberMetadata (subscription, rack, client id and host),
    ShareGroupCurrentMemberAssignment (member epoch, previous epoch, assigned partitions) and
    ShareGroupTargetAssignmentMember (``target``; None: not in the target assignment yet) in one
    value. Written when one of them changes, never per heartbeat; a tombstone when the member
    leaves or its session expires. Partitions are by topic id (text)."""

    group_id: str
    member_id: str
    subscribed: tuple[str, ...] = ()
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_epoch: int = -1
    assignment: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    target: Mapping[str, tuple[int, ...]] | None = None
    owner_epoch: int = field(default=NO_EPOCH, compare=False)  # as GroupRecord's


@dataclass(frozen=True, slots=True)
class InitializeItem:
    key: SharePartitionKey
    state_epoch: int
    start_offset: int = UNSET_OFFSET


@dataclass(frozen=True, slots=True)
class WriteItem:
    key: SharePartitionKey
    state: PartitionState
    writer_epoch: int


@dataclass(slots=True)
class RecoveryStats:
    """What the last recovery replayed. ``skipped`` lists (partition, offset, reason), capped.

    ``stale_ignored`` counts share-partition records older than one already replayed for the
    same key (a lower state epoch, or the same state epoch with a lower owner epoch): a zombie
    writer's late commit, ignored so the newest owner's state wins. ``owner_epoch`` is the
    highest owner epoch seen (owner records and share-partition owner epochs).
    """

    records: int = 0
    stale_ignored: int = 0
    owner_epoch: int = -1
    share_partitions: int = 0
    groups: int = 0
    members: int = 0
    topic_ids: int = 0
    tombstones: int = 0
    skipped_count: int = 0
    skipped: list[tuple[int, int, str]] = field(default_factory=list)
    seconds: float = 0.0
    #: entity keys whose newest record was ignored as stale (the replay kept an older one):
    #: rewritten by the new owner under the owner-epoch rule so compaction cannot keep the stale one
    stale_keys: set = field(default_factory=set)
    #: share-partition records on a state partition other than their home (another layout, read by
    #: a placement-aware replay): key -> (state partition, newest record there); persist/layout.py
    misplaced: dict = field(default_factory=dict)
    #: state partition -> the layout its layout record names (persist/layout.py)
    layouts: dict = field(default_factory=dict)

    def skip(self, partition: int, offset: int, reason: str, cap: int = 100) -> None:
        self.skipped_count += 1
        if len(self.skipped) < cap:
            self.skipped.append((partition, offset, reason))
