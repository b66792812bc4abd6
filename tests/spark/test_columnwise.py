"""The driver's and executors' column-wise code against per-record models: no broker,
no SparkSession. The models are the per-record code these functions replaced."""

from __future__ import annotations

import gc

from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from kshare_sidecar.spark import gcfreeze
from kshare_sidecar.spark import ranges as R
from kshare_sidecar.spark.acquire import _acknowledge_ranges
from kshare_sidecar.spark.arrow import arrow_schema
from kshare_sidecar.spark.read_librdkafka import _Columns


def compress_model(records):
    """The per-record compress the driver used before the column-wise code."""
    per_tp: dict[str, list[tuple[int, int]]] = {}
    for topic, partition, offset, count in records:
        per_tp.setdefault(R.tp_key(topic, partition), []).append((offset, count))
    out = {}
    for key in sorted(per_tp):
        ranges: list[list[int]] = []
        for offset, count in sorted(set(per_tp[key])):
            if ranges and ranges[-1][1] + 1 == offset and ranges[-1][2] == count:
                ranges[-1][1] = offset
            elif ranges and ranges[-1][1] >= offset:
                continue
            else:
                ranges.append([offset, offset, count])
        out[key] = ranges
    return out


records = st.lists(st.tuples(st.sampled_from(["a", "b.c", "t-1"]), st.integers(0, 12), st.integers(0, 60),
                             st.integers(1, 3)), max_size=200)


@settings(deadline=None)
@given(records)
def test_compress_columns_equals_the_per_record_model(recs):
    assert R.compress(recs) == compress_model(recs)
    if recs:
        topics, partitions, offsets, counts = map(list, zip(*recs))
        assert R.compress_columns(topics, partitions, offsets, counts) == compress_model(recs)


def test_compress_keeps_contiguous_runs_as_one_range():
    n = 20_000
    got = R.compress_columns(["t"] * n, [i % 2 for i in range(n)], [i // 2 for i in range(n)], [1] * n)
    assert got == {"t:0": [[0, 9_999, 1]], "t:1": [[0, 9_999, 1]]}


def _ranges(spans):
    """(gap, length, count) -> disjoint ascending ranges, as a broker acquires them."""
    out, position = [], 0
    for gap, length, count in spans:
        first = position + gap
        out.append([first, first + length, count])
        position = first + length + 1
    return R.merge(out)


batches = st.dictionaries(
    st.sampled_from(["a:0", "a:1", "b.c:3", "t-1:12"]),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30), st.integers(1, 3)), min_size=1, max_size=4).map(_ranges),
)


@settings(deadline=None)
@given(batches, st.integers(1, 9))
def test_split_cuts_a_batch_into_even_slices_that_cover_it_exactly(ranges, pieces):
    """The slices are the Spark tasks of a batch; together they hold every acquired
    offset once with its delivery count, in order, and their sizes differ by at most one."""
    slices = R.split(ranges, pieces)
    total = R.count(ranges)
    assert len(slices) == min(pieces, total)
    sizes = [R.count(dict(piece)) for piece in slices]
    assert not sizes or (max(sizes) - min(sizes) <= 1 and min(sizes) >= 1)
    flat = [(key, offset, count) for piece in slices for key, rs in piece for first, last, count in rs
            for offset in range(first, last + 1)]
    model = [(key, offset, count) for key in sorted(ranges) for first, last, count in ranges[key]
             for offset in range(first, last + 1)]
    assert flat == model
    for piece in slices:  # a topic-partition appears once per slice, in key order
        keys = [key for key, _ in piece]
        assert keys == sorted(set(keys))


def test_split_evens_out_a_lopsided_batch():
    got = R.split({"t:0": [[0, 14_999, 1]], "t:1": [[0, 4_999, 2]]}, 2)
    assert got == [[("t:0", [[0, 9_999, 1]])], [("t:0", [[10_000, 14_999, 1]]), ("t:1", [[0, 4_999, 2]])]]
    assert R.split({}, 4) == [] and len(R.split({"t:0": [[0, 2, 1]]}, 5)) == 3


class FakeShareConsumer:
    """acknowledge_offset that records each call and raises for offsets not in flight."""

    def __init__(self, not_in_flight: set[int]) -> None:
        self.not_in_flight = not_in_flight
        self.calls: list[tuple[str, int, int, int]] = []

    def acknowledge_offset(self, topic, partition, offset, ack_type):
        self.calls.append((topic, partition, offset, ack_type))
        if offset in self.not_in_flight:
            raise RuntimeError("not in flight")


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(0, 5)), max_size=6),
       st.sets(st.integers(0, 40)))
def test_acknowledge_ranges_calls_every_offset_once_and_counts_failures(spans, not_in_flight):
    ranges: dict[str, list[list[int]]] = {}
    for partition, first, length in spans:
        ranges.setdefault(f"t:{partition}", []).append([first, first + length, 1])
    consumer = FakeShareConsumer(not_in_flight)
    done, failed = _acknowledge_ranges(consumer, ranges, 7)
    expected = [("t", p, o, 7) for key, rs in ranges.items() for first, last, _ in rs
                for p in [int(key.split(":")[1])] for o in range(first, last + 1)]
    assert consumer.calls == expected
    assert failed == sum(1 for _, _, o, _ in expected if o in not_in_flight)
    assert done + failed == len(expected)


def columns_model(topic, partition, msgs, counts, include_headers=True):
    """The per-record column building of the executors before the column-wise code, as Python lists."""
    ts_type = {1: 0, 2: 1}
    rows = []
    for msg, count in zip(msgs, counts):
        kind, ts = msg.timestamp()
        headers = msg.headers()
        rows.append({
            "key": msg.key(), "value": msg.value(), "topic": topic, "partition": partition, "offset": msg.offset(),
            "timestamp": ts * 1000 if kind and ts >= 0 else None, "timestampType": ts_type.get(kind, -1),
            "headers": [{"key": k, "value": v} for k, v in headers] if headers else None, "deliveryCount": count,
        })
        if not include_headers:
            del rows[-1]["headers"]
    return rows


message = st.builds(
    lambda key, value, headers, kind, ts: (key, value, headers, (kind, ts if kind else -1)),
    st.none() | st.binary(max_size=5), st.none() | st.binary(max_size=5),
    st.none() | st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=3)), max_size=2),
    st.sampled_from([0, 1, 2]), st.integers(-1, 2**41))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(message, min_size=1, max_size=8), st.integers(1, 4)), min_size=1, max_size=4),
       st.integers(1, 12), st.booleans(), st.booleans())
def test_columns_equal_the_per_record_model(runs, flush_every, include_headers, with_offsets):
    """Runs of records with one delivery count each, flushed every few records: every Arrow batch
    holds what the per-record code built, with the count of each record's run (with and without
    the headers column; with and without the offsets the read loop hands over)."""
    import numpy as np

    schema = arrow_schema(include_headers)
    cols = _Columns("topic-a", 3)
    built, msgs, counts, offset = [], [], [], 0
    for run, count in runs:
        for key, value, headers, ts in run:
            msg = Message(topic="topic-a", partition=3, offset=offset, key=key, value=value, headers=headers,
                          timestamp=ts)
            cols.add_many([msg], count, np.array([offset], np.int64) if with_offsets and offset % 3 else None)
            offset += 1
            msgs.append(msg)
            counts.append(count)
            if len(cols) >= flush_every:
                built.append(cols.flush(schema))
    if len(cols):
        built.append(cols.flush(schema))
    assert all(b.schema.equals(schema) for b in built)
    assert [row for b in built for row in b.to_pylist()] == [
        {**row, "timestamp": _utc(row["timestamp"])}
        for row in columns_model("topic-a", 3, msgs, counts, include_headers)]


def _utc(micros):
    from datetime import datetime, timedelta, timezone

    return None if micros is None else datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)


def test_imports_are_frozen_out_of_the_collector():
    """PySpark collects garbage after every task; objects that exist when modules were imported
    since the last look are frozen (skipped by collections), and nothing is frozen otherwise."""
    import sys
    import types

    try:
        gcfreeze.freeze_imports()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert gcfreeze.freeze_imports() is False  # nothing imported since
        sys.modules["kshare_test_fake_module"] = types.ModuleType("kshare_test_fake_module")
        garbage = [[i] for i in range(1000)]
        assert gcfreeze.freeze_imports() is True and gc.get_freeze_count() >= frozen + 1000
        del garbage
    finally:
        sys.modules.pop("kshare_test_fake_module", None)
        gc.unfreeze()
