"""Query lifecycle: a stopped query leaves its share group at once (SIGTERM closes the share session),
and Trigger.AvailableNow drains what is there, acknowledging every batch, then ends."""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter

import pytest
from confluent_kafka import ShareConsumer

from .helpers import expected_keys, parquet_keys, produce_keyed, wait_for

pytestmark = pytest.mark.kafka


def _stream(spark, options: dict[str, str]):
    reader = spark.readStream.format("kshare")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


class _Member:
    """A plain member of ``group``; librdkafka's statistics tell its join state and assignment."""

    def __init__(self, target, group: str, topic: str) -> None:
        self.state: dict = {}
        self.consumer = ShareConsumer({"bootstrap.servers": target.share, "group.id": group,
                                       "statistics.interval.ms": 200,
                                       "stats_cb": lambda s: self.state.update(json.loads(s).get("cgrp") or {})})
        self.consumer.subscribe([topic])
        self.keys: Counter = Counter()

    def poll(self) -> None:
        for msg in self.consumer.poll(0.2):
            if msg.error() is None:
                self.keys[msg.key().decode()] += 1

    def assigned(self) -> int:
        return int(self.state.get("assignment_size") or 0) if self.state.get("join_state") == "steady" else 0


def test_stopped_query_leaves_the_group_at_once(spark, target, record_property):
    """query.stop() makes Spark SIGTERM the source's Python process, whose default action used to
    kill it before PySpark's ``finally: reader.stop()``: the member never left the group, and
    with as many partitions as members the other member only got the stopped query's partition
    after the session timed out (~45 s). The source's SIGTERM handler now runs stop(), which
    closes the share session: records on that partition flow to the other member within a
    heartbeat or two."""
    topic, group = target.topic(2), target.group()
    produce_keyed(target.backend, topic, 100)
    out = tempfile.mkdtemp(prefix="kshare-spark-stop-")
    # pollTimeoutMs: the first poll also waits for the group join (Kafka assigns within ~5 s).
    df = _stream(spark, target.source_options(group, topic, maxRecordsPerTrigger="5000", pollTimeoutMs="20000"))
    query = (df.writeStream.format("parquet").option("path", f"{out}/data")
             .option("checkpointLocation", f"{out}/ck").trigger(processingTime="2 seconds").start())
    member = None
    try:
        wait_for(lambda: len(parquet_keys(spark, f"{out}/data")) > 0, timeout_s=120, every_s=0.5,
                 what="a first batch", query=query)
        member = _Member(target, group, topic)
        deadline = time.monotonic() + 60
        while member.assigned() != 1 or time.monotonic() < deadline - 50:  # settled, one partition each
            assert time.monotonic() < deadline, f"expected one partition each, plain member has {member.state}"
            member.poll()
        stopped = time.monotonic()
        query.stop()
        total = 1_000
        produce_keyed(target.backend, topic, total, start=100)
        fresh = expected_keys(total, start=100)
        while not set(member.keys) >= fresh and time.monotonic() - stopped < 120:
            member.poll()
        handover = time.monotonic() - stopped
    finally:
        query.stop()
        if member is not None:
            member.consumer.close()
    record_property("handover_s", round(handover, 2))
    print(f"[{target.name}] after query.stop() the other member had both partitions' new records in "
          f"{handover:.1f} s")
    assert set(member.keys) >= fresh
    assert handover < 15, f"the stopped query's partition reached the other member only after {handover:.1f} s"


def test_available_now_drains_and_acknowledges_each_run(spark, target, record_property):
    """Six Trigger.AvailableNow runs on one checkpoint while 5,000 records arrive between them:
    every run ends by itself, writes what was there when it started, and acknowledges it, so the
    output holds exactly 5,000 distinct keys, each once, all at delivery count 1."""
    total, runs = 5_000, 6
    topic, group = target.topic(2), target.group()
    out = tempfile.mkdtemp(prefix="kshare-spark-an-")
    chunks = [1_000, 1_500, 0, 2_500, 0, 0]  # what arrives before each run
    produced = 0
    took = []
    for run, chunk in enumerate(chunks):
        if chunk:
            produce_keyed(target.backend, topic, chunk, start=produced)
            produced += chunk
        df = _stream(spark, target.source_options(group, topic, maxRecordsPerTrigger="600"))
        query = (df.writeStream.format("parquet").option("path", f"{out}/data")
                 .option("checkpointLocation", f"{out}/ck").trigger(availableNow=True).start())
        started = time.monotonic()
        try:
            assert query.awaitTermination(180), f"run {run} did not end by itself"
        finally:
            query.stop()
        assert query.exception() is None, query.exception()
        took.append(round(time.monotonic() - started, 1))
        seen = parquet_keys(spark, f"{out}/data")
        assert set(seen) == expected_keys(produced), (run, len(seen), produced)
    assert produced == total and len(chunks) == runs
    seen = parquet_keys(spark, f"{out}/data")
    counts = Counter(r.deliveryCount for r in spark.read.parquet(f"{out}/data").select("deliveryCount").collect())
    record_property("run_seconds", took)
    print(f"[{target.name}] {runs} AvailableNow runs took {took} s; {len(seen)} distinct, "
          f"{sum(seen.values())} rows, delivery counts {dict(counts)}")
    assert len(seen) == total and sum(seen.values()) == total
    assert counts == {1: total}
