"""From in-memory ranges to the persisted `PartitionState` (the snapshot a persister stores)."""

from __future__ import annotations

from collections.abc import Iterable

from kshare_sidecar.persist.model import PartitionState, StateBatch
from kshare_sidecar.states import ACKNOWLEDGED, ACQUIRED, AVAILABLE, RecordState

_STATES = {s.value: s for s in RecordState}  # int -> enum member without an enum call per batch


def to_partition_state(
    pieces: Iterable[tuple[int, int, int, int]],
    end: int,
    state_epoch: int,
    leader_epoch: int,
) -> PartitionState:
    """Build the persisted form from ascending, contiguous (first, last, state, count) pieces.

    SPSO is the first non-terminal offset (or `end` when everything is terminal). ACQUIRED is
    written as AVAILABLE with count - 1, the count before the current attempt (seed 000 and
    Kafka: acquisition is never persisted); AVAILABLE with count 0 is implied and left out;
    equal neighbours are merged.
    """
    batches: list[StateBatch] = []
    spso: int | None = None
    # the piece being merged, written out when the next one differs (p_first < 0: none yet)
    p_first = p_last = p_state = p_count = -1
    for first, last, state, count in pieces:
        if spso is None:
            if state >= ACKNOWLEDGED:
                continue
            spso = first
        if state == ACQUIRED:
            state = AVAILABLE
            count -= 1
        if state == AVAILABLE and count <= 0:
            continue
        if p_first >= 0:
            if p_last + 1 == first and p_state == state and p_count == count:
                p_last = last
                continue
            batches.append(StateBatch(p_first, p_last, _STATES[p_state], p_count))
        p_first, p_last, p_state, p_count = first, last, state, count
    if p_first >= 0:
        batches.append(StateBatch(p_first, p_last, _STATES[p_state], p_count))
    return PartitionState(
        state_epoch=state_epoch,
        leader_epoch=leader_epoch,
        start_offset=end if spso is None else spso,
        state_batches=tuple(batches),
    )
