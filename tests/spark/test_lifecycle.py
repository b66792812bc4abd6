"""Issue 19: a stopped query hands its records over at once (SIGTERM closes the share session),
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


def _joined_consumer(target, group: str, topic: str) -> ShareConsumer:
    """A plain member of ``group`` that has its assignment (librdkafka statistics say so)."""
    state = {}
    consumer = ShareConsumer({"bootstrap.servers": target.share, "group.id": group,
                              "statistics.interval.ms": 200,
                              "stats_cb": lambda s: state.update(json.loads(s).get("cgrp") or {})})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    quiet_until = None
    while quiet_until is None or time.monotonic() < quiet_until:
        assert time.monotonic() < deadline, f"the plain member never got an assignment: {state}"
        got = [m for m in consumer.poll(0.2) if m.error() is None]
        assert not got, "the Spark query should hold every record"
        if quiet_until is None and state.get("join_state") == "steady" and state.get("assignment_size"):
            quiet_until = time.monotonic() + 2  # fetches have been answered: nothing for this member
    return consumer


def test_stopped_query_hands_its_records_to_another_member_at_once(spark, target, record_property):
    """query.stop() makes Spark SIGTERM the source's Python process; the source's handler runs its
    stop(): what it holds is released and the session closed, so another member gets the records
    within seconds, not after the session timeout (~45 s) or the lock (60 s here)."""
    total = 300
    # One partition: a share consumer's poll returns what one fetch brought, and Kafka 4.3 answers
    # the first fetch with one partition's records; here batch 0 must hold every record.
    topic, group = target.topic(1), target.group()
    produce_keyed(target.backend, topic, total, partitions=1)
    out = tempfile.mkdtemp(prefix="kshare-spark-stop-")
    # pollTimeoutMs: the first poll also waits for the group join (Kafka assigns within ~5 s).
    df = _stream(spark, target.source_options(group, topic, maxRecordsPerTrigger="5000", pollTimeoutMs="20000"))
    # A long trigger: batch 0 takes every record, and they stay acquired until the next trigger.
    query = (df.writeStream.format("parquet").option("path", f"{out}/data")
             .option("checkpointLocation", f"{out}/ck").trigger(processingTime="10 minutes").start())
    consumer = None
    try:
        wait_for(lambda: len(parquet_keys(spark, f"{out}/data")) >= total, timeout_s=120, every_s=0.5,
                 what="batch 0 in Parquet", query=query)
        consumer = _joined_consumer(target, group, topic)
        stopped = time.monotonic()
        query.stop()
        got: Counter = Counter()
        counts = set()
        while len(got) < total and time.monotonic() - stopped < 90:
            for msg in consumer.poll(0.2):
                if msg.error() is None:
                    got[msg.key().decode()] += 1
                    counts.add(msg.delivery_count())
        handover = time.monotonic() - stopped
    finally:
        query.stop()
        if consumer is not None:
            consumer.close()
    record_property("handover_s", round(handover, 2))
    print(f"[{target.name}] after query.stop() the other member had all {len(got)} records in {handover:.1f} s, "
          f"delivery counts {sorted(counts)}")
    assert set(got) == expected_keys(total)
    assert counts == {2}, "released by the stopped query, then delivered to the other member"
    assert handover < 10, f"records reached the other member {handover:.1f} s after stop (session not closed?)"


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
