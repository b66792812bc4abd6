"""Core share-group scenarios with confluent-kafka's ShareConsumer: kshare on Kafka 3.9, and native Kafka 4.x
as the reference. Each scenario asserts the same behaviour on both targets."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

from tests.e2e.conftest import LOCK_MS, Worker, wait_until
from tests.support import create_topic, produce, unique

pytestmark = pytest.mark.kafka


def _consumer(target, group, **extra):
    return ShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group, "log_level": 3,
                          "share.acknowledgement.mode": "explicit", **extra})


def _poll(consumer, want: int = 1, timeout: float = 20.0) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += [m for m in consumer.poll(0.5) if m.error() is None]
    return got


def _offsets(target, group) -> list[dict]:
    """The group's share-partition offsets and lag, read with `kshare groups describe` (works
    against the sidecar and against native Kafka alike)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "groups", "describe", "--group", group,
                          "--offsets", "--bootstrap-server", target.bootstrap, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return sorted(json.loads(out.stdout)["offsets"], key=lambda o: o["partition"])


def _setup(target, partitions=1, records=10, prefix="v"):
    topic, group = unique("e2e"), unique("g")
    create_topic(target.backend, topic, partitions)
    target.prepare_group(group)
    values = produce(target.backend, topic, records, partitions=partitions, prefix=prefix) if records else []
    return topic, group, values


@pytest.mark.slow
def test_six_processes_share_100k_records(target, tmp_path):
    total = 100_000
    topic, group, values = _setup(target, partitions=3, records=total)
    started = time.monotonic()
    workers = [Worker(target, group, topic, tmp_path / f"w{i}.jsonl", idle_s=6, max_s=240,
                      mode="implicit" if i % 2 else "explicit") for i in range(6)]
    for w in workers:
        assert w.wait(300) == 0, w.stderr()
    elapsed = time.monotonic() - started
    records = [r for w in workers for r in w.records()]
    delivered = {(r["p"], r["o"]) for r in records}
    assert len(delivered) == total, f"{total - len(delivered)} records never delivered"
    pairs = Counter((r["p"], r["o"], r["dc"]) for r in records)
    assert max(pairs.values()) == 1, "a (record, delivery count) pair was delivered twice"
    lag = _offsets(target, group)
    assert [o["lag"] for o in lag] == [0, 0, 0], f"not every record was accepted: {lag}"
    per_worker = [len(w.records()) for w in workers]
    print(f"\n[{target.name}] 100k records, 3 partitions, 6 ShareConsumer processes: {elapsed:.1f} s "
          f"(incl. start-up and {6}s idle tail), {total / elapsed:,.0f} records/s; per worker {per_worker}")


def test_release_redelivers_with_count_2_and_reject_is_final(target):
    topic, group, _ = _setup(target, records=3)
    c = _consumer(target, group)
    try:
        c.subscribe([topic])
        first = _poll(c, 3)
        assert [m.delivery_count() for m in first] == [1, 1, 1]
        by_offset = {m.offset(): m for m in first}
        c.acknowledge(by_offset[0], AcknowledgeType.RELEASE)
        c.acknowledge(by_offset[1], AcknowledgeType.REJECT)
        c.acknowledge(by_offset[2], AcknowledgeType.ACCEPT)
        assert all(exc is None for exc in c.commit_sync(30).values())
        again = _poll(c, 1)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(0, 2)]
        c.acknowledge(again[0], AcknowledgeType.ACCEPT)
        c.commit_sync(30)
        assert _poll(c, 1, timeout=3) == [], "a rejected or accepted record came back"
    finally:
        c.close()


def test_record_released_every_time_is_archived_at_the_limit(target):
    topic, group, _ = _setup(target, records=1)
    c = _consumer(target, group)
    counts = []
    try:
        c.subscribe([topic])
        while True:
            got = _poll(c, 1, timeout=4 if counts else 20)
            if not got:
                break
            counts += [m.delivery_count() for m in got]
            for m in got:
                c.acknowledge(m, AcknowledgeType.RELEASE)
            c.commit_sync(30)
            assert len(counts) <= 10, "never archived"
    finally:
        c.close()
    assert counts == [1, 2, 3, 4, 5]  # group.share.delivery.count.limit = 5


def test_lock_expiry_moves_records_and_late_ack_fails(target):
    """The slow consumer's ack arrives while the records belong to the fast one. (Once the fast
    one has completed them and the SPSO moved past, Kafka 4.3 answers such a late ack with
    success; kshare keeps answering INVALID_RECORD_STATE - see docs/compatibility.md.)"""
    topic, group, _ = _setup(target, records=5)
    slow, fast = _consumer(target, group), _consumer(target, group)
    try:
        slow.subscribe([topic])
        held = _poll(slow, 5)
        assert len(held) == 5 and {m.delivery_count() for m in held} == {1}
        time.sleep(LOCK_MS / 1000 + 1.5)  # the slow consumer sleeps past its acquisition lock
        fast.subscribe([topic])
        taken = _poll(fast, 5, timeout=30)
        assert sorted(m.offset() for m in taken) == [0, 1, 2, 3, 4]
        assert {m.delivery_count() for m in taken} == {2}
        for m in held:
            slow.acknowledge(m, AcknowledgeType.ACCEPT)
        results = slow.commit_sync(30)
        errors = [exc for exc in results.values() if exc is not None]
        assert errors, "the late acknowledgement should fail"
        assert all(isinstance(e, KafkaException) and "INVALID_RECORD_STATE" in str(e) for e in errors), errors
        for m in taken:
            fast.acknowledge(m, AcknowledgeType.ACCEPT)
        assert all(exc is None for exc in fast.commit_sync(30).values())
        assert _poll(fast, 1, timeout=3) == []
    finally:
        slow.close()
        fast.close()


def test_sigkilled_consumer_releases_records_on_disconnect(target, tmp_path):
    topic, group, _ = _setup(target, records=20)
    holder = Worker(target, group, topic, tmp_path / "holder.jsonl", mode="explicit", ack="none", max_s=120)
    assert wait_until(lambda: len(holder.records()) >= 20, 30), holder.events()
    holder.proc.send_signal(signal.SIGKILL)
    holder.wait(10)
    killed_at = time.monotonic()
    taker = Worker(target, group, topic, tmp_path / "taker.jsonl", idle_s=3, max_s=60)
    assert wait_until(lambda: len({r["o"] for r in taker.records()}) >= 20, 30)
    recovered_in = time.monotonic() - killed_at
    taker.proc.send_signal(signal.SIGTERM)
    taker.wait(30)
    assert {r["dc"] for r in taker.records()} == {2}
    # released as the TCP connection dropped, not when the 6 s lock ran out (allow consumer start-up)
    print(f"\n[{target.name}] records of a SIGKILLed consumer redelivered {recovered_in:.1f} s after the kill")
    assert recovered_in < LOCK_MS / 1000 + 3


def test_one_partition_eight_consumers_all_get_work(target, tmp_path):
    topic, group, _ = _setup(target, records=0)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": target.backend, "linger.ms": 0, "batch.num.messages": 5})
    for i in range(800):
        producer.produce(topic, f"job-{i}".encode())
        producer.poll(0)
    producer.flush(30)
    workers = [Worker(target, group, topic, tmp_path / f"w{i}.jsonl", max_poll_records=5, work_ms=20, idle_s=4,
                      max_s=120) for i in range(8)]
    for w in workers:
        assert w.wait(180) == 0, w.stderr()
    per_worker = [len({r["o"] for r in w.records()}) for w in workers]
    delivered = {r["o"] for w in workers for r in w.records()}
    assert len(delivered) == 800
    assert all(n > 0 for n in per_worker), per_worker
