"""The executors' readers against a real Kafka 3.9 (no SparkSession): exactly the records of the
ranges, through transaction markers, aborted transactions, compaction gaps, every compression
codec, log-append time and ranges spanning many batches and Fetches. The raw Fetch reader
(``readClient=kshare``, the default) is compared row for row with librdkafka's plain consumer
(``readClient=librdkafka``, the reader before it), each reading from the backend itself
(``kafka.backend.servers``) and through the kshare sidecar, which passes Fetch through (what the
readers use when ``kafka.backend.servers`` is not set)."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kshare_sidecar.spark import read as RD
from kshare_sidecar.spark import read_librdkafka as RL
from kshare_sidecar.spark.fetch import Fetcher
from kshare_sidecar.spark.options import parse_options
from kshare_sidecar.spark.read import read_ranges
from tests.support import create_topic, unique

READERS = ["kshare", "librdkafka"]


def _opts(bootstrap, topic, reader="kshare", **extra):
    return parse_options({"kafka.bootstrap.servers": bootstrap, "group": "g", "subscribe": topic,
                          "readClient": reader, **extra})


def _rows(opts, topic, ranges, partition=0):
    return [row for batch in read_ranges(opts, topic, partition, ranges) for row in batch.to_pylist()]


def _offsets(opts, topic, ranges):
    return [(row["offset"], row["deliveryCount"]) for row in _rows(opts, topic, ranges)]


def _produce(bootstrap, topic, keys, transactional=False, abort=False, **config):
    p = Producer({"bootstrap.servers": bootstrap, **config,
                  **({"transactional.id": unique("tx")} if transactional else {})})
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    for k in keys:
        p.produce(topic, key=str(k).encode(), value=f"v{k}".encode(), partition=0)
    if transactional:
        p.flush(30)
        (p.abort_transaction if abort else p.commit_transaction)(30)
    p.flush(30)


@pytest.fixture(params=["backend", "sidecar"])
def via(request, kafka_39) -> str:
    """Where the readers send their requests: the backend, or the kshare sidecar on it."""
    if request.param == "backend":
        return kafka_39.bootstrap
    return request.getfixturevalue("kshare_sidecar").bootstrap


def _batches(bootstrap, topic) -> list[tuple[int, int, int, bool, int]]:
    """(base offset, last offset, codec, control, records) of every batch of partition 0, as stored."""
    fetcher, out, position = Fetcher(bootstrap, isolation=0), [], 0
    try:
        while position < _end(bootstrap, topic):
            view = fetcher.fetch(topic, 0, position, 1 << 22, time.monotonic() + 30).records
            pos = 0
            while len(view) - pos >= 61:
                base, length = struct.unpack_from(">qi", view, pos)
                if pos + 12 + length > len(view):
                    break
                (attrs, last_delta) = struct.unpack_from(">hi", view, pos + 21)
                (count,) = struct.unpack_from(">i", view, pos + 57)
                out.append((base, base + last_delta, attrs & 7, bool(attrs & 0x20), count))
                position, pos = base + last_delta + 1, pos + 12 + length
    finally:
        fetcher.close()
    return out


@pytest.fixture(autouse=True)
def _fresh_readers():
    RD._close_all()
    RL._close_all()
    yield
    RD._close_all()
    RL._close_all()


@pytest.mark.parametrize("reader", READERS)
def test_reader_reads_exactly_the_ranges(kafka_39, via, reader):
    """Ranges with their delivery counts, across transaction markers (offsets without a record),
    the same worker reading one range after another; a range written after the reader last
    fetched is read too."""
    topic = unique("spark-read")
    create_topic(kafka_39.bootstrap, topic, 1)
    _produce(kafka_39.bootstrap, topic, range(10), transactional=True)      # 0-9, marker 10
    _produce(kafka_39.bootstrap, topic, range(10, 20), transactional=True)  # 11-20, marker 21
    _produce(kafka_39.bootstrap, topic, range(20, 25))                      # 22-26
    opts = _opts(via, topic, reader)
    assert _offsets(opts, topic, [[0, 4, 1]]) == [(o, 1) for o in range(5)]
    assert _offsets(opts, topic, [[5, 10, 2], [11, 13, 1]]) == [(o, 2) for o in range(5, 10)] + [(11, 1), (12, 1),
                                                                                               (13, 1)]
    assert _offsets(opts, topic, [[14, 21, 1]]) == [(o, 1) for o in range(14, 21)]  # 21: a marker
    assert _offsets(opts, topic, [[3, 3, 3], [22, 26, 1]]) == [(3, 3)] + [(o, 1) for o in range(22, 27)]
    assert _offsets(opts, topic, [[0, 1, 1], [25, 26, 4]]) == [(0, 1), (1, 1), (25, 4), (26, 4)]  # far apart
    time.sleep(1.5)  # librdkafka's read-ahead reaches the log end: an end-of-partition event is queued
    _produce(kafka_39.bootstrap, topic, range(25, 30))  # 27-31, written after that
    assert _offsets(opts, topic, [[27, 31, 1]]) == [(o, 1) for o in range(27, 32)]


def test_librdkafka_reader_keeps_its_queue_between_tasks(kafka_39):
    """readClient=librdkafka: the consumer stays assigned, so the next range is read from its queue."""
    topic = unique("spark-read")
    create_topic(kafka_39.bootstrap, topic, 1)
    _produce(kafka_39.bootstrap, topic, range(10))
    opts = _opts(kafka_39.bootstrap, topic, "librdkafka")
    assert _offsets(opts, topic, [[0, 4, 1]]) == [(o, 1) for o in range(5)]
    (reader,) = RL._READERS.values()
    assert reader.next_offset == 5 and not RD._FETCHERS
    assert _offsets(opts, topic, [[5, 9, 1]]) == [(o, 1) for o in range(5, 10)]
    assert reader.next_offset == 10 and len(RL._READERS) == 1


@pytest.mark.parametrize("reader", READERS)
def test_headers_are_read_only_with_include_headers(kafka_39, via, reader):
    """includeHeaders=true: each row's headers as (key, value) structs, null for a record without;
    by default (as Spark's Kafka source) the rows have no headers column at all."""
    topic = unique("spark-read-headers")
    create_topic(kafka_39.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": kafka_39.bootstrap})
    p.produce(topic, value=b"a", partition=0, headers=[("h1", b"x"), ("h2", None)])
    p.produce(topic, value=b"b", partition=0)
    p.flush(30)
    rows = _rows(_opts(via, topic, reader, includeHeaders="true"), topic, [[0, 1, 1]])
    assert [r["headers"] for r in rows] == [[{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}], None]
    rows = _rows(_opts(via, topic, reader), topic, [[0, 1, 1]])
    assert [r["value"] for r in rows] == [b"a", b"b"] and "headers" not in rows[0]


@pytest.fixture(scope="module")
def codec_log(kafka_39):
    """One partition written by producers with each compression codec (nulls, empty values,
    headers with null values), then an aborted (lz4) and a committed transaction and plain
    records: (topic, the keys read_committed must give, ranges covering it all)."""
    topic = unique("spark-read-codecs")
    create_topic(kafka_39.bootstrap, topic, 1)
    expected_committed = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": kafka_39.bootstrap, "compression.type": codec, "linger.ms": 50})
        for i in range(300):
            key = None if i % 7 == 0 else f"{codec}-{i}".encode()
            value = None if i % 11 == 0 else (b"" if i % 13 == 0 else f"{codec}-{i}".encode() * (i % 5))
            headers = [("h", None), ("codec", codec.encode())] if i % 3 == 0 else None
            p.produce(topic, key=key, value=value, partition=0, headers=headers)
            expected_committed.append(key)
        p.flush(30)
    _produce(kafka_39.bootstrap, topic, range(100), transactional=True, abort=True, **{"compression.type": "lz4"})
    _produce(kafka_39.bootstrap, topic, range(100, 150), transactional=True)
    _produce(kafka_39.bootstrap, topic, range(150, 160))
    expected_committed += [str(k).encode() for k in range(100, 160)]
    batches = _batches(kafka_39.bootstrap, topic)
    # the log holds what the test claims: every codec as written (the broker keeps the
    # producer's), and transaction markers
    assert {codec for _, _, codec, _, _ in batches} == {0, 1, 2, 3, 4}
    assert sum(control for _, _, _, control, _ in batches) == 2
    return topic, expected_committed, [[0, 400, 1], [401, 999, 2], [1000, _end(kafka_39.bootstrap, topic) - 1, 3]]


def test_both_readers_give_the_same_rows_for_every_codec_and_transactions(codec_log, via):
    """With read_committed (the readers' default) the aborted records are absent and with
    read_uncommitted present, and the raw reader's rows equal librdkafka's, from the backend and
    through the sidecar."""
    topic, expected_committed, ranges = codec_log
    for isolation in ("read_committed", "read_uncommitted"):
        extra = {"includeHeaders": "true", "kafka.read.isolation.level": isolation}
        raw = _rows(_opts(via, topic, "kshare", **extra), topic, ranges)
        assert raw == _rows(_opts(via, topic, "librdkafka", **extra), topic, ranges)
        keys = [r["key"] for r in raw]
        if isolation == "read_committed":
            assert keys == expected_committed
        else:
            assert len(keys) == len(expected_committed) + 100 and b"99" in keys


def test_log_append_time(kafka_39, via):
    """A LogAppendTime topic: the broker's time for every record, timestampType 1."""
    stamped = unique("spark-read-logtime")
    admin = AdminClient({"bootstrap.servers": kafka_39.bootstrap})
    admin.create_topics([NewTopic(stamped, 1, 1, config={"message.timestamp.type": "LogAppendTime"})])[stamped].result(30)
    _produce(kafka_39.bootstrap, stamped, range(20))
    raw = _rows(_opts(via, stamped, "kshare"), stamped, [[0, 19, 1]])
    assert raw == _rows(_opts(via, stamped, "librdkafka"), stamped, [[0, 19, 1]])
    assert {r["timestampType"] for r in raw} == {1} and len(raw) == 20


@pytest.mark.parametrize("reader", READERS)
def test_ranges_spanning_many_batches_and_fetches(kafka_39, via, reader):
    """2,000 records in batches of ~14 (lz4 and uncompressed halves); two ranges that start and
    end inside batches, the second beginning in the batch the first ends in; the first Fetch
    limited to 4 KiB (max.partition.fetch.bytes), so the raw reader goes on from the batch after
    the last complete one, over several requests. Exactly the ranges' records, in order, with
    their values and delivery counts."""
    topic = unique("spark-read-span")
    create_topic(kafka_39.bootstrap, topic, 1)
    for codec, keys in (("none", range(1000)), ("lz4", range(1000, 2000))):
        p = Producer({"bootstrap.servers": kafka_39.bootstrap, "compression.type": codec, "linger.ms": 20,
                      "batch.size": 2048})
        for k in keys:
            p.produce(topic, key=str(k).encode(), value=f"{k:05d}".encode() * 20, partition=0)
        p.flush(30)
    batches = _batches(kafka_39.bootstrap, topic)
    assert sum(1 for base, last, *_ in batches if last >= 7 and base <= 1990) > 50
    base, last = next((base, last) for base, last, *_ in batches if base >= 1480)
    assert last - base >= 3, "a batch of at least 4 records to split inside"
    split = base + 1  # the first range ends here; base + 2 is no one's; the second starts at base + 3
    ranges = [[7, split, 1], [split + 2, 1990, 2]]
    opts = _opts(via, topic, reader, **{"kafka.read.max.partition.fetch.bytes": "4096"})
    rows = _rows(opts, topic, ranges)
    expected = [(o, 1) for o in range(7, split + 1)] + [(o, 2) for o in range(split + 2, 1991)]
    assert [(r["offset"], r["deliveryCount"]) for r in rows] == expected
    assert all(r["key"] == str(r["offset"]).encode() and r["value"] == f"{r['offset']:05d}".encode() * 20
               for r in rows)
    if reader == "kshare":
        (fetcher,) = RD._FETCHERS.values()
        assert fetcher.fetches >= 2


@pytest.fixture(scope="module")
def compacted(kafka_39):
    """A compacted topic after the log cleaner ran: 3,000 records over 50 keys, < 1,000 left."""
    topic = unique("spark-read-compacted")
    admin = AdminClient({"bootstrap.servers": kafka_39.bootstrap})
    configs = {"cleanup.policy": "compact", "segment.ms": "200", "min.cleanable.dirty.ratio": "0.01",
               "delete.retention.ms": "100", "segment.bytes": "16384"}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    p = Producer({"bootstrap.servers": kafka_39.bootstrap, "linger.ms": 5, "batch.size": 2000})
    for i in range(3000):
        p.produce(topic, key=f"k{i % 50}".encode(), value=f"v{i}".encode(), partition=0)
    p.flush(30)
    time.sleep(0.5)
    p.produce(topic, key=b"roll", value=b"x", partition=0)  # rolls the segment: the rest becomes cleanable
    p.flush(30)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _count(kafka_39.bootstrap, topic) > 1000:
        time.sleep(2)
    # gaps between batches and inside them: the cleaner keeps a batch's offsets, drops records
    assert any(count < last - base + 1 for base, last, _, control, count in _batches(kafka_39.bootstrap, topic)
               if not control)
    return topic


def test_compacted_topic_gaps(compacted, via):
    """After the log cleaner ran, offsets inside a range have no record, also inside batches
    (the cleaner keeps a batch's offsets and drops records from it): the raw reader yields the
    surviving records (the last of each key), as librdkafka does."""
    ranges = [[0, 1499, 1], [1500, 3000, 2]]
    raw = _rows(_opts(via, compacted, "kshare"), compacted, ranges)
    assert raw == _rows(_opts(via, compacted, "librdkafka"), compacted, ranges)
    offsets = [r["offset"] for r in raw]
    assert len(raw) < 1000 and offsets == sorted(offsets) and offsets[-1] == 3000
    assert {r["value"] for r in raw if r["key"] == b"k49"} >= {b"v2999"}


def _end(bootstrap, topic) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("hwm")})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), 10)[1]
    finally:
        c.close()


def _count(bootstrap, topic) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("count"), "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    n = 0
    try:
        while True:
            msgs = c.consume(1000, 5)
            n += sum(1 for m in msgs if m.error() is None)
            if not msgs or any(m.error() is not None for m in msgs):
                return n
    finally:
        c.close()


def test_records_deleted_before_they_are_read_are_skipped(kafka_39, via):
    """Retention (here DeleteRecords) moved the log start past the start of a range: the raw
    reader logs it and reads the rest of the range from the log start."""
    topic = unique("spark-read-deleted")
    create_topic(kafka_39.bootstrap, topic, 1)
    _produce(kafka_39.bootstrap, topic, range(20))
    admin = AdminClient({"bootstrap.servers": kafka_39.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 12)]).values():
        f.result(30)
    assert _offsets(_opts(via, topic), topic, [[5, 15, 1], [18, 19, 2]]) == (
        [(o, 1) for o in range(12, 16)] + [(18, 2), (19, 2)])
