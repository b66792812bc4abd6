"""``extended.window_pieces`` passes over the ranges that persist as nothing: the snapshot it
gives is the one every range's piece gives (the naive walk), for any window, whole or cut around
an acknowledgement's pieces, so the SPSO and every written batch stay the same."""

from __future__ import annotations

from itertools import chain

from hypothesis import given, settings
from hypothesis import strategies as st

from kshare_sidecar.share.engine.extended import window_pieces
from kshare_sidecar.share.engine.holds import BACKOFF, DEAD_LETTER, KEY_ORDER, Hold, hold_extras
from kshare_sidecar.share.engine.locks import Lock
from kshare_sidecar.share.engine.persisted import to_partition_state
from kshare_sidecar.share.engine.ranges import InFlightRange
from kshare_sidecar.states import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE


def naive(ranges):
    """Every range's piece, as the walk did before (a held range persists as AVAILABLE)."""
    for r in ranges:
        if r.state == ACQUIRED and isinstance(r.lock, Hold):
            lk = r.lock
            yield (r.first, r.last, AVAILABLE, r.count) + hold_extras(lk.member, lk.wall_until, lk.cause)
        else:
            yield r.first, r.last, r.state, r.count, None, None


@st.composite
def windows(draw, start: int = 0):
    ranges, first = [], start
    for _ in range(draw(st.integers(0, 30))):
        size = draw(st.integers(1, 4))
        state = draw(st.sampled_from([AVAILABLE, ACQUIRED, ACQUIRED, ACKNOWLEDGED, ARCHIVED]))
        count = draw(st.integers(0, 3))
        lock = None
        if state == ACQUIRED:
            holder = draw(st.sampled_from(["consumer", KEY_ORDER, KEY_ORDER, BACKOFF, DEAD_LETTER]))
            if holder == "consumer":
                lock = Lock("member-1", 0, first, first + size - 1, size, 0)
            else:
                lock = Hold(holder, 0, first, first + size - 1, size, 0)
                lock.wall_until = draw(st.sampled_from([None, 1_700_000_000_000]))
                lock.cause = draw(st.sampled_from([None, "rejected"]))
        ranges.append(InFlightRange(first, first + size - 1, state, count, lock))
        first += size
    return ranges


def snapshot(pieces, end: int):
    return to_partition_state(pieces, end, 3, 7)


@settings(max_examples=400)
@given(windows())
def test_the_whole_window_persists_the_same(ranges) -> None:
    end = ranges[-1].last + 1 if ranges else 0
    assert snapshot(window_pieces(ranges), end) == snapshot(naive(ranges), end)


@settings(max_examples=400)
@given(windows(), st.data())
def test_a_window_cut_around_an_acknowledgements_pieces_persists_the_same(ranges, data) -> None:
    """pieces_after's shape: untouched ranges before and after, the acknowledged ones between
    (here any pieces: an acknowledgement may make the first open records done, so the SPSO
    moves into what follows)."""
    n = len(ranges)
    lo = data.draw(st.integers(0, n))
    hi = data.draw(st.integers(lo, n))
    middle = [(r.first, r.last, data.draw(st.sampled_from([ACKNOWLEDGED, ARCHIVED, AVAILABLE, ACQUIRED])),
               data.draw(st.integers(0, 3)), None, None) for r in ranges[lo:hi]]
    end = ranges[-1].last + 1 if ranges else 0
    fast = chain(window_pieces(ranges[:lo]), middle, window_pieces(ranges[hi:]))
    slow = chain(naive(ranges[:lo]), middle, naive(ranges[hi:]))
    assert snapshot(fast, end) == snapshot(slow, end)


def test_held_records_waiting_for_their_keys_yield_nothing_once_the_spso_is_found() -> None:
    ranges = [InFlightRange(0, 0, ACQUIRED, 1, Lock("m", 0, 0, 0, 1, 0))]
    for o in range(1, 200):
        ranges.append(InFlightRange(o, o, ACQUIRED, 0, Hold(KEY_ORDER, 0, o, o, 1, 0)))
    assert len(list(window_pieces(ranges))) == 1
