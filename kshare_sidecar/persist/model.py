"""The persisted form of share-group state.

One `PartitionState` per share-partition is the unit a persister stores: a complete, small
snapshot (KIP-932's ShareSnapshot, minus Kafka's delta chain), so a compacted topic keyed by
share-partition needs nothing but its latest value. ACQUIRED is never persisted: an acquired
record is written as AVAILABLE with the delivery count it had when it was acquired.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kshare_sidecar.states import RecordState

# The persisted field's name (Kafka's share-group state records call it DeliveryState) for the one
# enum of record states, kshare_sidecar/states.py: same numbers, same members, one definition.
DeliveryState = RecordState

PERSISTED_STATES = frozenset({DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED})


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets [first_offset, last_offset] sharing one state and delivery count.

    kshare's extensions (docs/extensions.md), both unset for a group that uses none, so such a
    group's records are byte for byte what they were before: ``available_at`` (wall-clock ms) —
    the AVAILABLE records are backing off after a failed delivery and may be delivered again only
    from then on (share.release.backoff.ms); ``dead_letter`` — the records are on their way to the
    group's dead-letter topic (``"r"`` rejected, ``"l"`` delivery count limit): they are written
    there and then archived, so a restart finishes the job instead of redelivering them.
    """

    first_offset: int
    last_offset: int
    delivery_state: DeliveryState
    delivery_count: int
    available_at: int | None = None
    dead_letter: str | None = None


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    """Identifies a share-partition: (group, topic id, partition)."""

    group_id: str
    topic_id: str  # canonical UUID string
    partition: int


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Complete persisted state of one share-partition.

    `start_offset` is the SPSO. `state_batches` holds only the non-trivial ranges inside the
    window, ascending and non-overlapping: AVAILABLE with a delivery count > 0, ACKNOWLEDGED and
    ARCHIVED. Offsets in the window not covered are AVAILABLE with delivery count 0.
    `state_epoch` changes when the state is reset (admin alter/delete), fencing older writers;
    `leader_epoch` is the owner (writer) epoch.
    """

    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = field(default=())
