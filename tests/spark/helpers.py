"""Helpers for the Spark scenarios: run a query until a condition holds, read what it wrote."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from confluent_kafka import Producer


def produce_keyed(bootstrap: str, topic: str, count: int, *, partitions: int = 2, start: int = 0,
                  batch_bytes: int | None = None, value_bytes: int = 0) -> None:
    """Records with key ``k-<i>`` (unique, for coverage checks) round-robin over ``partitions``.

    ``batch_bytes`` caps the producer's log batches: Kafka acquires whole log batches, so small
    ones keep micro-batches near ``maxRecordsPerTrigger``. ``value_bytes`` pads each value to
    that size (reads of the log are sized in bytes).
    """
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if batch_bytes:
        config["batch.size"] = batch_bytes
    producer = Producer(config)
    for i in range(start, start + count):
        producer.produce(topic, value=f"v-{i}".encode().ljust(value_bytes, b"."), key=f"k-{i}".encode(),
                         partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def parquet_keys(spark, path: str) -> Counter:
    try:
        rows = spark.read.parquet(path).select("key").collect()
    except Exception as exc:  # nothing written yet
        if "PATH_NOT_FOUND" in str(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return Counter()
        raise
    return Counter(bytes(r.key).decode() for r in rows)


def wait_for(predicate: Callable[[], bool], timeout_s: float, *, every_s: float = 2.0, what: str = "condition",
             query=None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query is not None and query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        if predicate():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def expected_keys(count: int, start: int = 0) -> set[str]:
    return {f"k-{i}" for i in range(start, start + count)}
