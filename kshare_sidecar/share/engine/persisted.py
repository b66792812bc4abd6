"""From in-memory ranges to the persisted `PartitionState` (the snapshot a persister stores)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain

from kshare_sidecar.persist.model import PartitionState, StateBatch
from kshare_sidecar.share.engine.ranges import InFlightRange
from kshare_sidecar.share.engine.types import Run
from kshare_sidecar.states import ACKNOWLEDGED, ACQUIRED, AVAILABLE, RecordState

_STATES = {s.value: s for s in RecordState}  # int -> enum member without an enum call per batch


#: (first, last, state, delivery count, available_at, dead_letter): one run of the window as
#: persisted; the last two are the extensions' (docs/extensions.md), None for plain records
Piece = tuple[int, int, int, int, "int | None", "str | None"]


def pieces_after(
    ranges: list[InFlightRange],
    firsts: Sequence[int],
    runs: Sequence[Run],
    as_is: Callable[[list[InFlightRange]], Iterator[Piece]],
    unchanged: Callable[[InFlightRange, int, int], Piece],
    acked: Callable[[InFlightRange, int, int, int], Piece],
) -> Iterator[Piece]:
    """The window's pieces after ``runs`` (ascending, validated) are applied, for
    :func:`to_partition_state`: the ranges the runs touch (found by bisection of ``firsts``, the
    ranges' first offsets) are split at the runs' edges — ``acked(range, a, b, type)`` inside a
    run, ``unchanged(range, a, b)`` between runs — and the ranges before and after go through
    ``as_is`` whole. Every acknowledgement asks this of the whole window, so the untouched ranges
    take the engine's cheapest path."""
    if not runs:
        return as_is(ranges)
    lo = max(bisect_right(firsts, runs[0][0]) - 1, 0)
    hi = bisect_right(firsts, runs[-1][1])
    return chain(as_is(ranges[:lo]), _split_at_runs(ranges[lo:hi], runs, unchanged, acked), as_is(ranges[hi:]))


def _split_at_runs(ranges: list[InFlightRange], runs: Sequence[Run],
                   unchanged: Callable[[InFlightRange, int, int], Piece],
                   acked: Callable[[InFlightRange, int, int, int], Piece]) -> Iterator[Piece]:
    ri, nr = 0, len(runs)
    for r in ranges:
        f, lst = r.first, r.last
        while ri < nr:  # skip runs that end before this range
            if runs[ri][1] >= f:
                break
            ri += 1
        pos, k = f, ri
        while k < nr:
            a, b, t = runs[k]
            if a > lst:
                break
            if a > pos:
                yield unchanged(r, pos, a - 1)
                pos = a
            hi = b if b < lst else lst
            yield acked(r, pos, hi, t)
            pos = hi + 1
            if b > lst:
                break
            k += 1
        if pos <= lst:
            yield unchanged(r, pos, lst)


def to_partition_state(
    pieces: Iterable[Piece],
    end: int,
    state_epoch: int,
    leader_epoch: int,
) -> PartitionState:
    """Build the persisted form from ascending, contiguous pieces.

    SPSO is the first non-terminal offset (or `end` when everything is terminal). ACQUIRED is
    written as AVAILABLE with count - 1, the count before the current attempt (seed 000 and
    Kafka: acquisition is never persisted); AVAILABLE with count 0 and no extension is implied
    and left out; equal neighbours are merged. Pieces are plain tuples and the batch being merged
    lives in locals: this runs over the whole window for every acknowledgement, and a
    ``StateBatch`` per range (frozen: six ``object.__setattr__`` each) was most of its cost.
    """
    batches: list[StateBatch] = []
    spso: int | None = None
    # the piece being merged, written out when the next one differs (p_first < 0: none yet)
    p_first = p_last = p_state = p_count = -1
    p_at: int | None = None
    p_dlq: str | None = None
    for first, last, state, count, at, dlq in pieces:
        if spso is None:
            if state >= ACKNOWLEDGED:
                continue
            spso = first
        if state == ACQUIRED:
            state = AVAILABLE
            count -= 1
        if state == AVAILABLE and count <= 0 and at is None and dlq is None:
            continue
        if p_first >= 0:
            if p_last + 1 == first and p_state == state and p_count == count and p_at == at and p_dlq == dlq:
                p_last = last
                continue
            batches.append(StateBatch(p_first, p_last, _STATES[p_state], p_count, p_at, p_dlq))
        p_first, p_last, p_state, p_count, p_at, p_dlq = first, last, state, count, at, dlq
    if p_first >= 0:
        batches.append(StateBatch(p_first, p_last, _STATES[p_state], p_count, p_at, p_dlq))
    return PartitionState(
        state_epoch=state_epoch,
        leader_epoch=leader_epoch,
        start_offset=end if spso is None else spso,
        state_batches=tuple(batches),
    )


def with_count_floor(durable: PartitionState, floor: PartitionState) -> tuple[PartitionState, int]:
    """``durable`` with every record it has not done counted at least as often as ``floor`` says.

    ``floor`` is the snapshot of a share-partition dropped from memory because its durable state
    differed (a state write whose outcome was unknown): deliveries counted in memory but never
    written must not be counted again from lower — a poison record would dodge the delivery
    limit, and a consumer would see a record's count go down. Done records (ACKNOWLEDGED,
    ARCHIVED) and the SPSO are the durable state's; a reset (another state epoch) voids the floor.
    Returns the state and the number of records whose count was raised."""
    if floor.state_epoch != durable.state_epoch:
        return durable, 0
    start = durable.start_offset
    floors = [(max(b.first_offset, start), b.last_offset, b.delivery_count) for b in floor.state_batches
              if b.last_offset >= start and b.delivery_count > 0]
    if not floors:
        return durable, 0
    # the durable window as contiguous segments; None: AVAILABLE with count 0 (not written)
    segments: list[tuple[int, int, StateBatch | None]] = []
    pos = start
    for d in durable.state_batches:
        if d.first_offset > pos:
            segments.append((pos, d.first_offset - 1, None))
        segments.append((d.first_offset, d.last_offset, d))
        pos = d.last_offset + 1
    if floors[-1][1] >= pos:
        segments.append((pos, floors[-1][1], None))
    out: list[StateBatch] = []
    raised = 0
    i = 0
    for first, last, b in segments:
        if b is not None and b.delivery_state != AVAILABLE:  # done durably: as written
            _append(out, b)
            continue
        count = b.delivery_count if b is not None else 0
        at = first
        while at <= last:
            while i < len(floors) and floors[i][1] < at:
                i += 1
            if i == len(floors) or floors[i][0] > last:
                piece_last, c = last, count
            elif floors[i][0] > at:
                piece_last, c = floors[i][0] - 1, count
            else:
                piece_last, c = min(last, floors[i][1]), max(count, floors[i][2])
                if c > count:
                    raised += piece_last - at + 1
            if c > 0:
                _append(out, StateBatch(at, piece_last, _STATES[AVAILABLE], c,
                                        b.available_at if b is not None else None,
                                        b.dead_letter if b is not None else None))
            at = piece_last + 1
    return PartitionState(durable.state_epoch, durable.leader_epoch, start, tuple(out)), raised


def _append(out: list[StateBatch], b: StateBatch) -> None:
    """Append ``b``, merged into the last batch when it continues it with the same fields."""
    if out:
        p = out[-1]
        if p.last_offset + 1 == b.first_offset and (p.delivery_state, p.delivery_count, p.available_at,
                                                      p.dead_letter) == (b.delivery_state, b.delivery_count,
                                                                         b.available_at, b.dead_letter):
            out[-1] = StateBatch(p.first_offset, b.last_offset, p.delivery_state, p.delivery_count,
                                 p.available_at, p.dead_letter)
            return
    out.append(b)
