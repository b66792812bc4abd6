"""The cut of a read's batches at a ShareFetch's remaining MaxBytes (share/delayed_fetch.py),
against the batch-by-batch walk it replaced."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.backend.types import BatchInfo
from kshare_sidecar.share.delayed_fetch import _within_bytes


def _walk(batches: list[BatchInfo], room: int, first: bool) -> list[BatchInfo]:
    out: list[BatchInfo] = []
    used = 0
    for b in batches:
        size = b.end - b.start
        if used + size > room and (out or not first):
            break
        out.append(b)
        used += size
    return out


def _read(sizes: list[int], gaps: list[int] | None = None) -> list[BatchInfo]:
    out, pos, offset = [], 7, 100
    for i, size in enumerate(sizes):
        pos += gaps[i] if gaps else 0
        out.append(BatchInfo(offset, offset + 4, -1, False, False, pos, pos + size))
        pos, offset = pos + size, offset + 5
    return out


@given(st.lists(st.integers(61, 5000), max_size=40), st.integers(0, 60_000), st.booleans())
def test_end_to_end_batches_are_cut_as_the_walk_cuts_them(sizes: list[int], room: int, first: bool) -> None:
    batches = _read(sizes)
    assert list(_within_bytes(tuple(batches), room, first=first)) == _walk(batches, room, first)


@given(st.lists(st.tuples(st.integers(61, 5000), st.integers(0, 300)), max_size=40), st.integers(0, 60_000),
       st.booleans())
def test_with_gaps_the_cut_is_never_later_than_the_sizes_allow(shape: list[tuple[int, int]], room: int,
                                                               first: bool) -> None:
    batches = _read([s for s, _ in shape], [g for _, g in shape])
    cut, walked = list(_within_bytes(tuple(batches), room, first=first)), _walk(batches, room, first)
    assert cut == walked[:len(cut)]
    assert bool(cut) == bool(walked)  # the first batch still goes where the walk sends it


def test_the_first_batch_of_a_response_goes_even_when_larger_than_the_room() -> None:
    batches = tuple(_read([5000, 10]))
    assert list(_within_bytes(batches, 100, first=True)) == [batches[0]]
    assert list(_within_bytes(batches, 100, first=False)) == []
    assert _within_bytes((), 100, first=True) == ()
