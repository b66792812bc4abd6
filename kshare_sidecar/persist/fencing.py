"""The persister's decision logic: pure functions shared by every built-in persister.

Each function takes the currently stored entity (or ``None``) and a request, and returns
``(result, new_entity)`` where ``new_entity`` is ``UNCHANGED`` when nothing must be written,
``None`` for a tombstone, or the new :class:`StoredPartition`. Errors are raised as
:class:`~kshare_sidecar.persist.errors.PersistError` subclasses.

Fencing rules (KIP-932 share coordinator + seed 004):

* state epoch: a write must name exactly the stored state epoch, otherwise FENCED_STATE_EPOCH.
  ``initialize`` with a higher state epoch resets the state (admin alter offsets); with the
  same epoch it is an idempotent no-op; with a lower one it is fenced.
* owner epoch: ``claim(e)`` (a read with a leader epoch) by a new owner sets
  ``assignment_epoch = current = e`` when ``e >= current``, and is fenced when ``e < current``;
  ``advance(e)`` raises only the current epoch (same owner, bumped epoch). A write from epoch
  ``w`` is accepted when ``assignment_epoch <= w <= current``; a share-partition nobody has
  claimed yet (current = -1) is claimed by its first write.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from kshare_sidecar.persist.errors import (
    FencedLeaderEpochError,
    FencedStateEpochError,
    InvalidStateError,
    UnknownSharePartitionError,
)
from kshare_sidecar.persist.model import PERSISTED_STATES, PartitionState, SharePartitionKey, StateBatch
from kshare_sidecar.persist.records import NO_EPOCH, UNSET_OFFSET, StoredPartition


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()


def _require(key: SharePartitionKey, stored: StoredPartition | None) -> StoredPartition:
    if stored is None:
        raise UnknownSharePartitionError(
            f"no state for share-partition {key.group_id}/{key.topic_id}/{key.partition}")
    return stored


def initialize(key: SharePartitionKey, stored: StoredPartition | None, state_epoch: int, start_offset: int):
    if start_offset < UNSET_OFFSET:
        raise InvalidStateError(f"start offset {start_offset} is invalid (use -1 for 'not set')")
    if stored is not None:
        current = stored.state.state_epoch
        if state_epoch < current:
            raise FencedStateEpochError(
                f"initialize with state epoch {state_epoch} < stored state epoch {current}")
        if state_epoch == current:
            return stored.state, UNCHANGED
    fresh = StoredPartition(PartitionState(state_epoch=state_epoch, leader_epoch=NO_EPOCH,
                                           start_offset=start_offset), NO_EPOCH)
    return fresh.state, fresh


def claim(key: SharePartitionKey, stored: StoredPartition | None, epoch: int):
    """A new owner loads the share-partition at ``epoch`` (ReadShareGroupState's LeaderEpoch)."""
    stored = _require(key, stored)
    current = stored.state.leader_epoch
    if epoch < current:
        raise FencedLeaderEpochError(f"leader epoch {epoch} < current leader epoch {current}")
    if epoch == current and stored.assignment_epoch == epoch:
        return stored.state, UNCHANGED
    new = StoredPartition(replace(stored.state, leader_epoch=epoch), assignment_epoch=epoch)
    return new.state, new


def advance(key: SharePartitionKey, stored: StoredPartition | None, epoch: int):
    """The current owner's epoch was bumped without a change of owner."""
    stored = _require(key, stored)
    current = stored.state.leader_epoch
    if epoch < stored.assignment_epoch:
        raise FencedLeaderEpochError(f"epoch {epoch} < assignment epoch {stored.assignment_epoch}")
    if epoch <= current:
        return stored.state, UNCHANGED
    new = StoredPartition(replace(stored.state, leader_epoch=epoch), stored.assignment_epoch)
    return new.state, new


def validate_batches(state: PartitionState) -> tuple[StateBatch, ...]:
    """Check ordering and states; drop ranges wholly before the SPSO and clip a straddling one."""
    out: list[StateBatch] = []
    previous_last = None
    for b in state.state_batches:
        if b.first_offset > b.last_offset or b.first_offset < 0:
            raise InvalidStateError(f"bad state batch range [{b.first_offset}, {b.last_offset}]")
        if b.delivery_state not in PERSISTED_STATES:
            raise InvalidStateError(f"delivery state {b.delivery_state!r} is never persisted")
        if b.delivery_count < 0:
            raise InvalidStateError(f"negative delivery count {b.delivery_count}")
        if previous_last is not None and b.first_offset <= previous_last:
            raise InvalidStateError("state batches must be ascending and non-overlapping")
        previous_last = b.last_offset
        if state.start_offset >= 0 and b.last_offset < state.start_offset:
            continue
        if state.start_offset >= 0 and b.first_offset < state.start_offset:
            b = replace(b, first_offset=state.start_offset)
        out.append(b)
    return tuple(out)


def write(key: SharePartitionKey, stored: StoredPartition | None, state: PartitionState, writer_epoch: int):
    stored = _require(key, stored)
    current = stored.state
    if state.state_epoch != current.state_epoch:
        raise FencedStateEpochError(
            f"write with state epoch {state.state_epoch}, stored state epoch is {current.state_epoch}")
    assignment_epoch, current_epoch = stored.assignment_epoch, current.leader_epoch
    if current_epoch == NO_EPOCH and writer_epoch >= 0:
        assignment_epoch = current_epoch = writer_epoch  # first owner claims by writing
    if not (assignment_epoch <= writer_epoch <= current_epoch):
        raise FencedLeaderEpochError(
            f"writer epoch {writer_epoch} outside [assignment epoch {assignment_epoch}, "
            f"current epoch {current_epoch}]")
    start_offset = state.start_offset if state.start_offset != UNSET_OFFSET else current.start_offset
    merged = PartitionState(state_epoch=current.state_epoch, leader_epoch=current_epoch,
                            start_offset=start_offset, state_batches=())
    merged = replace(merged, state_batches=validate_batches(replace(state, start_offset=start_offset)))
    return None, StoredPartition(merged, assignment_epoch)


def delete(key: SharePartitionKey, stored: StoredPartition | None):
    """Idempotent: deleting absent state is not an error."""
    if stored is None:
        return None, UNCHANGED
    return None, None
