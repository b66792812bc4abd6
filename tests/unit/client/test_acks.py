"""Acknowledgement bookkeeping and AcknowledgementBatch packing of the asyncio client."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kshare_sidecar.client.acks import AckBatch, PartitionInFlight, RangesInFlight, ack_batches
from kshare_sidecar.client.acks import AcknowledgeType as T
from kshare_sidecar.client.errors import AckStateError


def test_contiguous_uniform_run_is_one_batch_with_one_type():
    assert ack_batches({5: T.ACCEPT, 6: T.ACCEPT, 7: T.ACCEPT}) == [AckBatch(5, 7, (1,))]


def test_a_missing_offset_splits_batches():
    assert ack_batches({1: 1, 2: 1, 4: 1, 5: 1}) == [AckBatch(1, 2, (1,)), AckBatch(4, 5, (1,))]


def test_mixed_types_in_a_run_get_one_type_per_offset():
    assert ack_batches({10: T.ACCEPT, 11: T.RELEASE, 12: T.GAP, 13: T.REJECT}) == [AckBatch(10, 13, (1, 2, 0, 3))]


def test_unsorted_input_and_empty():
    assert ack_batches({3: 2, 1: 2, 2: 2}) == [AckBatch(1, 3, (2,))]
    assert ack_batches({}) == []


def test_acquired_offsets_without_a_record_are_gap_acked():
    inf = PartitionInFlight(node=1)
    kept = inf.add_acquired([(0, 4, 1)], record_offsets=[0, 1, 3, 9])  # 2 and 4: control/compacted
    assert kept == [0, 1, 3]  # 9 is outside every acquired range: someone else's
    assert inf.acquired == {0: 1, 1: 1, 3: 1}
    assert inf.pending == {2: T.GAP, 4: T.GAP}
    inf.acknowledge(0, T.ACCEPT)
    inf.acknowledge(1, T.ACCEPT)
    inf.acknowledge(3, T.RELEASE)
    assert inf.take_pending() == [AckBatch(0, 4, (1, 1, 0, 2, 0))]
    assert inf.empty


def test_delivery_count_per_range():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 1, 1), (2, 3, 3)], record_offsets=range(4))
    assert inf.acquired == {0: 1, 1: 1, 2: 3, 3: 3}


def test_implicit_mode_accepts_delivered_records_but_keeps_explicit_acks():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 3, 1)], record_offsets=range(4))
    for o in (0, 1, 2):
        inf.deliver(o)
    inf.acknowledge(1, T.REJECT)
    inf.accept_delivered()
    assert inf.pending == {0: T.ACCEPT, 1: T.REJECT, 2: T.ACCEPT}
    assert inf.take_pending() == [AckBatch(0, 2, (1, 3, 1))]
    assert inf.acquired == {3: 1} and not inf.empty  # 3 was never handed out


def test_only_acquired_records_can_be_acknowledged_and_only_with_final_types():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 0, 1)], record_offsets=[0])
    with pytest.raises(AckStateError):
        inf.acknowledge(7, T.ACCEPT)
    with pytest.raises(ValueError):
        inf.acknowledge(0, T.GAP)
    with pytest.raises(ValueError):
        inf.acknowledge(0, T.RENEW)
    inf.acknowledge(0, T.RELEASE)
    inf.acknowledge(0, T.ACCEPT)  # the later ack before sending wins
    assert inf.take_pending() == [AckBatch(0, 0, (1,))]
    with pytest.raises(AckStateError):
        inf.acknowledge(0, T.ACCEPT)  # sent: settled


def test_drop_forgets_everything_and_counts_lost_acks():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 2, 1)], record_offsets=[0, 1, 2])
    inf.acknowledge(0, T.ACCEPT)
    assert inf.drop() == 1 and inf.empty


def test_reacquired_offset_clears_stale_state():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 0, 1)], record_offsets=[0])
    inf.deliver(0)
    inf.add_acquired([(0, 0, 2)], record_offsets=[0])
    assert inf.acquired == {0: 2} and not inf.delivered


def test_implicit_accept_skips_records_not_seen_yet():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 2, 1)], record_offsets=range(3))
    for o in range(3):
        inf.deliver(o)
    inf.accept_delivered(skip={2})
    assert inf.pending == {0: T.ACCEPT, 1: T.ACCEPT} and inf.delivered == {2}


# -- offsets-only books (RangesInFlight) -------------------------------------------------------------

def test_ranges_are_acknowledged_by_range_and_split_where_a_part_is_left():
    inf = RangesInFlight(node=1)
    assert inf.add_acquired([(10, 19, 1), (0, 4, 2)]) == [(10, 19, 1), (0, 4, 2)]
    inf.acknowledge(12, 14, T.ACCEPT)
    assert inf.acquired == [[0, 4, 2], [10, 11, 1], [15, 19, 1]]
    inf.acknowledge(0, 4, T.RELEASE)
    inf.acknowledge(10, 11, T.ACCEPT)
    assert inf.take_pending() == [AckBatch(0, 4, (2,)), AckBatch(10, 14, (1,))]  # adjacent ACCEPTs merged
    assert inf.acquired == [[15, 19, 1]] and not inf.empty
    assert inf.drop() == 0 and inf.empty


def test_a_range_spanning_adjacent_acquired_ranges_is_one_ack_but_not_across_a_hole():
    inf = RangesInFlight(node=1)
    inf.add_acquired([(0, 4, 1), (5, 9, 2), (11, 12, 1)])
    inf.acknowledge(3, 6, T.ACCEPT)  # the driver merged (0-4) and (5-9) when their counts matched
    assert inf.acquired == [[0, 2, 1], [7, 9, 2], [11, 12, 1]]
    for first, last in ((8, 11), (12, 13), (20, 20), (5, 4)):
        with pytest.raises(AckStateError):
            inf.acknowledge(first, last, T.ACCEPT)
    with pytest.raises(ValueError):
        inf.acknowledge(0, 0, T.GAP)


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 6)), max_size=12),
       st.lists(st.tuples(st.integers(0, 70), st.integers(0, 8), st.sampled_from([1, 2, 3])), max_size=20))
def test_ranges_in_flight_agree_with_a_set_of_offsets(acquire, acks):
    """Against a naive model (a dict offset -> count, acks per offset): what is acquired, what an
    ack may cover, and which offsets the batches send."""
    inf, model, sent = RangesInFlight(node=1), {}, {}
    ranges = []
    for start, length in acquire:
        if any(o in model for o in range(start, start + length + 1)):
            continue  # the broker never hands out an offset this member already holds
        ranges.append((start, start + length, 1 + length % 3))
        model.update(dict.fromkeys(range(start, start + length + 1), 1 + length % 3))
    inf.add_acquired(ranges)
    for first, length, kind in acks:
        last = first + length
        wanted = range(first, last + 1)
        if all(o in model for o in wanted):
            inf.acknowledge(first, last, kind)
            for o in wanted:
                del model[o]
                sent[o] = kind
        else:
            with pytest.raises(AckStateError):
                inf.acknowledge(first, last, kind)
    assert {o: c for a, b, c in inf.acquired for o in range(a, b + 1)} == model
    batches = inf.take_pending()
    assert {o: b.types[0] for b in batches for o in range(b.first_offset, b.last_offset + 1)} == sent
    assert all(x.last_offset < y.first_offset for x, y in zip(batches, batches[1:]))


def test_an_ack_replaced_by_a_new_acquisition_of_its_record_is_counted_as_superseded():
    """The application acknowledged a record whose lock had run out; the record came back to this
    member (delivery count 2) before the ack was sent. The ack is not sent (it would settle the new
    delivery), and the fetcher reports it failed: the nemesis saw such acks reported as accepted,
    and the same record accepted again on its next delivery."""
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 1, 1)], record_offsets=[0, 1])
    inf.acknowledge(0, T.ACCEPT)
    inf.acknowledge(1, T.ACCEPT)
    inf.add_acquired([(0, 0, 2)], record_offsets=[0])
    assert inf.pending == {1: T.ACCEPT} and inf.acquired == {0: 2, 1: 1} and inf.superseded == 1


class _NaiveInFlight:
    """PartitionInFlight's rules one offset at a time (the model of the property test below)."""

    def __init__(self) -> None:
        self.acquired: dict[int, int] = {}
        self.delivered: set[int] = set()
        self.pending: dict[int, int] = {}
        self.superseded = 0

    def add_acquired(self, ranges, record_offsets) -> list[int]:
        kept = []
        for first, last, count in ranges:
            for offset in range(first, last + 1):
                if offset in record_offsets:
                    self.acquired[offset] = count
                    self.delivered.discard(offset)
                    if self.pending.pop(offset, None) is not None:
                        self.superseded += 1
                    kept.append(offset)
                else:
                    self.pending[offset] = T.GAP
        return sorted(kept)

    def snapshot_acquired(self) -> dict[int, int]:
        return self.acquired

    def take_pending(self) -> dict[int, int]:
        sent = dict(self.pending)
        for offset in sent:
            self.acquired.pop(offset, None)
        self.pending.clear()
        return sent


_OFFSET = st.integers(0, 40)
# fresh records above everything held (the usual case: the books keep them as a block), with
# holes (compaction, transaction markers) and some outside the range (someone else's)
_FRESH = st.tuples(st.just("fresh"), st.integers(1, 3), st.integers(0, 8), st.sampled_from([1, 1, 2]),
                   st.frozensets(st.integers(0, 8), max_size=2), st.booleans())
_HAND = st.tuples(st.just("hand"), st.integers(1, 6))
_ACCEPT_TAIL = st.tuples(st.just("accept_tail"), st.integers(0, 3))
_TAKE = st.tuples(st.just("take"))
_STEP = st.one_of(
    st.tuples(st.just("acquire"), st.integers(0, 30), st.integers(0, 6), st.integers(1, 4),
              st.frozensets(_OFFSET, min_size=2)),
    _FRESH, _HAND,
    st.tuples(st.just("deliver"), _OFFSET),
    st.tuples(st.just("ack"), _OFFSET, st.sampled_from([1, 2, 3])),
    st.tuples(st.just("accept"), st.frozensets(_OFFSET, max_size=3)),
    _ACCEPT_TAIL,
    st.tuples(st.just("release"), st.integers(0, 30), st.integers(0, 6)),
    _TAKE)
_OPS = st.lists(_STEP, max_size=40)
#: implicit mode's steps only (what keeps the books in blocks)
_IMPLICIT_OPS = st.lists(st.one_of(_FRESH, _HAND, _ACCEPT_TAIL, _TAKE), max_size=40)


@settings(max_examples=600)
@given(_OPS)
def test_partition_in_flight_agrees_with_a_model_that_walks_every_offset(ops):
    """The books keep fresh acquisitions as blocks and the rest with set and dict operations on
    whole runs; a model that takes every offset one at a time must end every step in the same
    state, send the same acks and count the same superseded ones. Records are handed out as the
    fetcher does: its chunks in order, a few at a time."""
    _agree(ops)


@settings(max_examples=600)
@given(_IMPLICIT_OPS, st.lists(_STEP, max_size=3), st.integers(0, 40))
def test_implicit_mode_books_agree_with_the_model_and_any_other_step_between(ops, others, at):
    """The same with implicit mode's steps (fresh records, handed out, accepted but the tail
    not yet seen, taken), where the blocks live long, and up to three other steps in between."""
    _agree(ops[:at] + others + ops[at:])


def _agree(ops) -> None:
    inf, model = PartitionInFlight(node=1), _NaiveInFlight()
    chunks: list[list] = []  # [offsets, block, handed so far], as the fetcher's _Chunk
    handed: list[int] = []  # every offset handed out, in order
    high = -1
    for op in ops:
        if op[0] in ("acquire", "fresh"):
            if op[0] == "acquire":
                _, first, length, count, records = op
            else:
                _, gap, length, count, holes, outside = op
                first = high + gap
                records = frozenset(range(first, first + length + 1)) - {first + h for h in holes}
                records |= {first + length + 2} if outside else set()
            ranges = [(first, first + length, count)]
            high = max(high, first + length)
            ascending = op[0] == "fresh" or count % 2 == 0  # the record walk's sorted list, or any iterable
            got = inf.add_acquired(ranges, sorted(records) if ascending else records, ascending=ascending)
            assert got == model.add_acquired(ranges, records)
            if got:
                chunks.append([got, inf.last_block, 0])
        elif op[0] == "hand":  # the fetcher's drain
            k = op[1]
            while k and chunks:
                offsets, block, start = chunks[0]
                take = offsets[start:start + k]
                chunks[0][2] += len(take)
                if chunks[0][2] == len(offsets):
                    chunks.pop(0)
                k -= len(take)
                inf.hand_out(block, take)
                model.delivered.update(take)
                handed += take
        elif op[0] == "release":  # records that could not be decoded
            _, first, length = op
            inf.release([(first, first + length, 1)])
            model.pending.update(dict.fromkeys(range(first, first + length + 1), int(T.RELEASE)))
            high = max(high, first + length)
        elif op[0] == "deliver":
            inf.deliver(op[1])
            if op[1] in model.acquired:
                model.delivered.add(op[1])
        elif op[0] == "ack":
            _, offset, kind = op
            if offset in model.snapshot_acquired():
                inf.acknowledge(offset, kind)
                model.pending[offset] = kind
                model.delivered.discard(offset)
            else:
                with pytest.raises(AckStateError):
                    inf.acknowledge(offset, kind)
        elif op[0] in ("accept", "accept_tail"):
            skip = op[1] if op[0] == "accept" else frozenset(handed[len(handed) - op[1]:] if op[1] else ())
            inf.accept_delivered(skip)
            keep = model.delivered & skip
            for offset in model.delivered - keep:
                model.pending.setdefault(offset, int(T.ACCEPT))
            model.delivered = keep
        else:
            batches = inf.take_pending()
            sent = model.take_pending()
            assert batches == ack_batches(sent)
        assert (*inf.snapshot(), inf.superseded) == \
            (model.acquired, model.delivered, model.pending, model.superseded)
        assert inf.has_pending == bool(model.pending) and inf.empty == (not (model.acquired or model.pending))
    assert (inf.acquired, inf.delivered, inf.pending) == (model.acquired, model.delivered, model.pending)
