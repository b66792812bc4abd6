"""The executors' reader against a real Kafka 3.9 (no SparkSession): exactly the records of the
ranges, through transaction markers, and with a reader kept assigned between tasks (its queue
reads ahead; an end-of-partition event from that read-ahead must not end a later range)."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from kshare_sidecar.spark import read as RD
from kshare_sidecar.spark.options import parse_options
from kshare_sidecar.spark.read import read_ranges
from tests.support import create_topic, unique


def _rows(opts, topic, ranges):
    return [(row["offset"], row["deliveryCount"]) for batch in read_ranges(opts, topic, 0, ranges)
            for row in batch.to_pylist()]


def _produce(bootstrap, topic, keys, transactional=False):
    p = Producer({"bootstrap.servers": bootstrap, **({"transactional.id": unique("tx")} if transactional else {})})
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    for k in keys:
        p.produce(topic, key=str(k).encode(), value=b"v", partition=0)
    if transactional:
        p.commit_transaction(30)
    p.flush(30)


def test_reader_reads_exactly_the_ranges_and_keeps_its_queue_between_tasks(kafka_39):
    topic = unique("spark-read")
    create_topic(kafka_39.bootstrap, topic, 1)
    _produce(kafka_39.bootstrap, topic, range(10), transactional=True)      # 0-9, marker 10
    _produce(kafka_39.bootstrap, topic, range(10, 20), transactional=True)  # 11-20, marker 21
    _produce(kafka_39.bootstrap, topic, range(20, 25))                      # 22-26
    opts = parse_options({"kafka.bootstrap.servers": kafka_39.bootstrap, "group": "g", "subscribe": topic})
    RD._close_all()
    try:
        assert _rows(opts, topic, [[0, 4, 1]]) == [(o, 1) for o in range(5)]
        (reader,) = RD._READERS.values()
        assert reader.next_offset == 5  # read through: the next task at 5 takes the queue as it is
        assert _rows(opts, topic, [[5, 10, 2], [11, 13, 1]]) == [(o, 2) for o in range(5, 10)] + [(11, 1), (12, 1),
                                                                                                   (13, 1)]
        assert _rows(opts, topic, [[14, 21, 1]]) == [(o, 1) for o in range(14, 21)]  # 21: a marker
        assert _rows(opts, topic, [[3, 3, 3], [22, 26, 1]]) == [(3, 3)] + [(o, 1) for o in range(22, 27)]
        assert reader.next_offset == 27 and len(RD._READERS) == 1
        time.sleep(1.5)  # the reader's read-ahead reaches the log end: an end-of-partition event is queued
        _produce(kafka_39.bootstrap, topic, range(25, 30))  # 27-31, written after that event
        assert _rows(opts, topic, [[27, 31, 1]]) == [(o, 1) for o in range(27, 32)]
    finally:
        RD._close_all()


def test_headers_are_read_only_with_include_headers(kafka_39):
    """includeHeaders=true: each row's headers as (key, value) structs, null for a record without;
    by default (as Spark's Kafka source) the rows have no headers column at all."""
    topic = unique("spark-read-headers")
    create_topic(kafka_39.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": kafka_39.bootstrap})
    p.produce(topic, value=b"a", partition=0, headers=[("h1", b"x"), ("h2", None)])
    p.produce(topic, value=b"b", partition=0)
    p.flush(30)
    base = {"kafka.bootstrap.servers": kafka_39.bootstrap, "group": "g", "subscribe": topic}
    RD._close_all()
    try:
        rows = [r for b in read_ranges(parse_options({**base, "includeHeaders": "true"}), topic, 0, [[0, 1, 1]])
                for r in b.to_pylist()]
        assert [r["headers"] for r in rows] == [[{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}], None]
        rows = [r for b in read_ranges(parse_options(base), topic, 0, [[0, 1, 1]]) for r in b.to_pylist()]
        assert [r["value"] for r in rows] == [b"a", b"b"] and "headers" not in rows[0]
    finally:
        RD._close_all()
