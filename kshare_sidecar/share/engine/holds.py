"""Holds: records the sidecar itself keeps ACQUIRED, for kshare's extensions (docs/extensions.md).

Why this shape: a record that is backing off (release backoff), on its way to the dead-letter
topic, or waiting for an earlier record of its key (key ordering) must not be delivered, must
stay in the in-flight window (it is not done, so it holds the SPSO and counts against
max_record_locks) and must not be acknowledged by any consumer. The engine already has exactly
that state — ACQUIRED under an acquisition lock — with a deadline heap that wakes the caller's
timer. So a hold is an acquisition lock owned by a pseudo-member whose id is longer than any
member id a client may use (ShareFetch refuses ids over 36 characters): consumers' acks of held
records fail validation (INVALID_RECORD_STATE, as for records another member holds), a backoff
hold's deadline is the moment the records become AVAILABLE again (the engine's expiry does it),
and dead-letter and key-order holds never expire (they end explicitly).

These functions work on the engine's ranges (``InFlight._rs``, share/engine/ranges.py) like its own
methods do, so that the engine's modules do not grow; they keep its invariants: contiguous sorted ranges,
``lock.live`` = records under the lock, ``_available`` = AVAILABLE records. Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from kshare_sidecar.persist.model import PartitionState, StateBatch
from kshare_sidecar.share.engine.locks import Lock
from kshare_sidecar.share.engine.ranges import InFlight, InFlightRange
from kshare_sidecar.states import ACQUIRED, AVAILABLE, RecordState

NEVER = 2**62  # deadline of holds that end explicitly

# Pseudo-members (> 36 characters: no client can send these member ids).
BACKOFF = "kshare:release-backoff:held-by-the-sidecar"
DEAD_LETTER = "kshare:dead-letter-write:held-by-the-sidecar"
KEY_ORDER = "kshare:key-order-wait:held-by-the-sidecar"
HOLDERS = frozenset({BACKOFF, DEAD_LETTER, KEY_ORDER})

CAUSE_REJECTED = "r"
CAUSE_LIMIT = "l"


class Hold(Lock):
    """An acquisition lock the sidecar holds. ``wall_until``: a backoff's end in wall-clock ms
    (what is persisted: the engine's clock is monotonic); ``cause``: why a record is dead-lettered."""

    __slots__ = ("cause", "wall_until")

    def __init__(self, member: str, deadline: int, first: int, last: int, live: int, seq: int) -> None:
        super().__init__(member, deadline, first, last, live, seq)
        self.wall_until: int | None = None
        self.cause: str | None = None


class Decision(NamedTuple):
    """Where a range goes instead of the engine's default: the holder, its deadline (engine clock),
    wall-clock end (backoff), dead-letter cause, and a delivery-count adjustment (-1 when a
    key-order hold takes back a delivery that never reached a consumer)."""

    holder: str
    deadline: int = NEVER
    wall_until: int | None = None
    cause: str | None = None
    count_delta: int = 0


Decide = Callable[[InFlightRange], Decision | None]


def _new_hold(sp: InFlight, r: InFlightRange, d: Decision) -> None:
    size = r.last - r.first + 1
    hold = sp._locks.new(d.holder, d.deadline, r.first, r.last, size, kind=Hold)
    hold.wall_until = d.wall_until  # type: ignore[attr-defined]
    hold.cause = d.cause  # type: ignore[attr-defined]
    r.lock = hold
    r.state = ACQUIRED
    r.count += d.count_delta


def transfer(sp: InFlight, first: int, last: int, member: str, decide: Decide) -> list[tuple[int, int]]:
    """Move the records of [first, last] that ``member`` holds into holds chosen by ``decide``.

    Ranges ``decide`` leaves (None), and ranges not held by ``member`` (a GAP over log holes),
    are returned as ascending (first, last) runs for the engine to handle as acknowledged."""
    if first > last:
        return []
    i = sp._split(first)
    j = sp._split(last + 1)
    rs = sp._rs
    left: list[tuple[int, int]] = []
    for k in range(i, j):
        r = rs[k]
        d = decide(r) if r.state == ACQUIRED and r.lock is not None and r.lock.member == member else None
        if d is None:
            if left and left[-1][1] + 1 == r.first:
                left[-1] = (left[-1][0], r.last)
            else:
                left.append((r.first, r.last))
            continue
        sp._take_from_lock(r, r.last - r.first + 1)
        _new_hold(sp, r, d)
    return left


def hold_available(sp: InFlight, first: int, last: int, decide: Decide) -> int:
    """Put the AVAILABLE records of [first, last] under holds (restoring persisted holds); returns how many."""
    if first > last or first >= sp._end:
        return 0
    last = min(last, sp._end - 1)
    i = sp._split(max(first, sp._spso))
    j = sp._split(last + 1)
    held = 0
    for k in range(i, j):
        r = sp._rs[k]
        if r.state != AVAILABLE:
            continue
        d = decide(r)
        if d is None:
            continue
        size = r.last - r.first + 1
        sp._available -= size
        held += size
        _new_hold(sp, r, d)
    if held:
        sp.version += 1
    return held


def under_lock(sp: InFlight, lock: Lock) -> Iterator[InFlightRange]:
    """The ranges still held under ``lock`` (a snapshot list: callers may re-hold them)."""
    rs = sp._rs
    start = max(sp._spso, lock.first)
    i = bisect_right(sp._firsts, start) - 1
    i = max(i, 0)
    out = []
    while i < len(rs):
        r = rs[i]
        if r.first > lock.last:
            break
        if r.lock is lock:
            out.append(r)
        i += 1
    return iter(out)


def release_with(sp: InFlight, lock: Lock, decide: Decide | None) -> int:
    """End ``lock`` (expiry, member gone): ranges ``decide`` picks go to holds, the rest are
    released as the engine releases them (AVAILABLE, or ARCHIVED at the limit). Returns records changed."""
    changed = 0
    if decide is not None and not isinstance(lock, Hold):
        for r in under_lock(sp, lock):
            d = decide(r)
            if d is not None:
                size = r.last - r.first + 1
                sp._take_from_lock(r, size)
                _new_hold(sp, r, d)
                changed += size
    if lock.live > 0:
        changed += sp._release_lock(lock)
    return changed


def held(sp: InFlight, holder: str | None = None) -> Iterator[tuple[InFlightRange, Hold]]:
    """(range, hold) for every held range in the window (optionally of one holder)."""
    for r in sp._rs:
        lk = r.lock
        if r.state == ACQUIRED and isinstance(lk, Hold) and (holder is None or lk.member == holder):
            yield r, lk


def hold_extras(holder: str, wall_until: int | None, cause: str | None) -> tuple[int | None, str | None]:
    """What a hold adds to its records' persisted form, (available_at, dead_letter): held records
    persist as AVAILABLE with their delivery count (not count - 1 as for a consumer's acquisition:
    no delivery is in progress), plus the backoff end or dead-letter cause (key-order holds persist
    as plain AVAILABLE: the order is recomputed after a restart)."""
    return (wall_until if holder == BACKOFF else None, cause if holder == DEAD_LETTER else None)


def overlay(state: PartitionState, pieces: Iterable[StateBatch]) -> PartitionState:
    """``state`` with the offsets of ``pieces`` replaced by them (ascending, non-overlapping).

    AVAILABLE pieces with count 0 and no extension are implied, so they only cut; equal
    contiguous neighbours are merged. SPSO is unchanged (pieces are never terminal)."""
    pieces = sorted(pieces, key=lambda b: b.first_offset)
    if not pieces:
        return state
    out: list[StateBatch] = []
    pi = 0
    for b in state.state_batches:
        first = b.first_offset
        while first <= b.last_offset:
            while pi < len(pieces) and pieces[pi].last_offset < first:
                out.append(pieces[pi])
                pi += 1
            if pi < len(pieces) and pieces[pi].first_offset <= b.last_offset:
                p = pieces[pi]
                if p.first_offset > first:
                    out.append(_part(b, first, p.first_offset - 1))
                first = max(first, p.last_offset + 1)
                continue
            out.append(_part(b, first, b.last_offset))
            break
    out.extend(pieces[pi:])
    merged: list[StateBatch] = []
    for b in sorted(out, key=lambda x: x.first_offset):
        if b.delivery_state == RecordState.AVAILABLE and b.delivery_count <= 0 and b.available_at is None \
                and b.dead_letter is None:
            continue
        if merged:
            p = merged[-1]
            if p.last_offset + 1 == b.first_offset and (p.delivery_state, p.delivery_count, p.available_at,
                                                        p.dead_letter) == (b.delivery_state, b.delivery_count,
                                                                           b.available_at, b.dead_letter):
                merged[-1] = _part(p, p.first_offset, b.last_offset)
                continue
        merged.append(b)
    return PartitionState(state.state_epoch, state.leader_epoch, state.start_offset, tuple(merged))


def _part(b: StateBatch, first: int, last: int) -> StateBatch:
    return StateBatch(first, last, b.delivery_state, b.delivery_count, b.available_at, b.dead_letter)
