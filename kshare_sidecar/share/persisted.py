"""From in-memory ranges to the persisted `PartitionState` (the snapshot a persister stores)."""

from __future__ import annotations

from collections.abc import Iterable

from kshare_sidecar.persist.model import DeliveryState, PartitionState, StateBatch

_STATES = {0: DeliveryState.AVAILABLE, 2: DeliveryState.ACKNOWLEDGED, 4: DeliveryState.ARCHIVED}


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
    out: list[list[int]] = []
    spso: int | None = None
    for first, last, state, count in pieces:
        if spso is None:
            if state >= 2:
                continue
            spso = first
        if state == 1:
            state = 0
            count -= 1
        if state == 0 and count <= 0:
            continue
        if out:
            prev = out[-1]
            if prev[1] + 1 == first and prev[2] == state and prev[3] == count:
                prev[1] = last
                continue
        out.append([first, last, state, count])
    return PartitionState(
        state_epoch=state_epoch,
        leader_epoch=leader_epoch,
        start_offset=end if spso is None else spso,
        state_batches=tuple(StateBatch(f, lst, _STATES[s], c) for f, lst, s, c in out),
    )
