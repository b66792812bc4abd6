"""Release backoff (kshare's share.release.backoff.*, docs/extensions.md) on Kafka 3.9 with
confluent-kafka ShareConsumer processes: a released record is not delivered again before its
delay (exponential per delivery), and a sidecar restart in the middle of a backoff keeps it.

Timing: an acknowledgement reaches the sidecar after the worker took its timestamp (``t`` of the
ack event), and a redelivery reaches the worker after the sidecar sent it, so
``t(receipt of delivery n+1) - t(release of delivery n) >= delay`` must hold exactly — no margin
is needed on that side; the upper bounds are generous (a loaded machine)."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import SidecarProcess
from tests.e2e.ext_support import ExtWorker, produce_records
from tests.support import create_topic, set_group_config, unique

pytestmark = pytest.mark.kafka


def _gaps(events: list[dict]) -> dict[int, list[tuple[int, float]]]:
    """offset -> [(delivery count n+1, receipt(n+1) - release(n))]."""
    recs = {(e["o"], e["dc"]): e["t"] for e in events if e["ev"] == "rec"}
    rels = {(e["o"], e["dc"]): e["t"] for e in events if e["ev"] == "ack" and e["type"] == "release" and e["ok"]}
    out: dict[int, list[tuple[int, float]]] = {}
    for (o, dc), t in rels.items():
        if (o, dc + 1) in recs:
            out.setdefault(o, []).append((dc + 1, recs[(o, dc + 1)] - t))
    return out


def test_released_records_wait_for_their_backoff(sidecar, kafka_39, tmp_path):
    topic, group = unique("backoff"), unique("g")
    create_topic(kafka_39.bootstrap, topic, 1)
    set_group_config(sidecar.bootstrap, group, {"share.release.backoff.ms": "1500",
                                                "share.release.backoff.multiplier": "2",
                                                "share.release.backoff.max.ms": "5000",
                                                "share.delivery.count.limit": "4"})
    records = [(f"k{i}", ("rel-" if i % 4 == 0 else "ok-") + str(i), []) for i in range(40)]
    produce_records(kafka_39.bootstrap, topic, records)
    workers = [ExtWorker(sidecar.bootstrap, group, topic, tmp_path / f"w{i}.jsonl", idle_s=12) for i in range(2)]
    for w in workers:
        assert w.wait(240) == 0, w.stderr()
    events = [e for w in workers for e in w.events()]
    gaps = _gaps(events)
    released = {i for i in range(40) if i % 4 == 0}
    assert set(gaps) == released, sidecar.log_tail()
    expected = {2: 1.5, 3: 3.0, 4: 5.0}  # 1500 ms, x2, capped at 5000 ms
    for o, seq in gaps.items():
        assert sorted(dc for dc, _ in seq) == [2, 3, 4], (o, seq)
        for dc, gap in seq:
            assert gap >= expected[dc], f"offset {o} delivery {dc} came back {gap:.3f} s after its release " \
                                        f"(backoff {expected[dc]} s)"
            assert gap < expected[dc] + 15, f"offset {o} delivery {dc} took {gap:.1f} s"
    worst = {dc: min(g for s in gaps.values() for d, g in s if d == dc) for dc in expected}
    print(f"\n[kshare] shortest release-to-redelivery gaps by delivery: {worst} (backoff {expected})")


@pytest.mark.optin("faults")  # a sidecar restart: `make test-faults`
def test_a_restart_keeps_the_backoff(kafka_39, tmp_path):
    """A first consumer releases every record and leaves (nothing held by it: the records are in
    their backoff); the sidecar restarts; a second consumer gets them only after the backoff. Two
    consumer processes, so the check does not depend on librdkafka reconnecting across a restart."""
    sc = SidecarProcess(kafka_39.bootstrap, tmp_path / "sidecar.log").start()
    try:
        topic, group = unique("backoff-restart"), unique("g")
        create_topic(kafka_39.bootstrap, topic, 1)
        set_group_config(sc.bootstrap, group, {"share.release.backoff.ms": "20000"})
        produce_records(kafka_39.bootstrap, topic, [(f"k{i}", f"relonce-{i}", []) for i in range(10)])
        first = ExtWorker(sc.bootstrap, group, topic, tmp_path / "w1.jsonl", idle_s=3, max_s=90)
        assert first.wait(120) == 0, first.stderr()
        released = [e for e in first.events() if e["ev"] == "ack" and e["type"] == "release" and e["ok"]]
        assert len(released) == 10, sc.log_tail()
        assert sc.stop() == 0
        time.sleep(1)
        sc.start()
        restarted = time.time()
        assert restarted < min(e["t"] for e in released) + 20, "the restart came after the backoff: proves nothing"
        second = ExtWorker(sc.bootstrap, group, topic, tmp_path / "w2.jsonl", idle_s=10, grace_s=60, max_s=150)
        assert second.wait(200) == 0, second.stderr()
    finally:
        sc.stop()
    gaps = _gaps(first.events() + second.events())
    assert sorted(gaps) == list(range(10)), sc.log_tail(60)
    shortest = min(g for s in gaps.values() for _, g in s)
    assert shortest >= 20.0, f"a record came back {shortest:.2f} s after its release across a restart (backoff 20 s)"
    assert max(g for s in gaps.values() for _, g in s) < 60
    print(f"\n[kshare] backoff 20 s across a sidecar restart: redelivered after {shortest:.1f} s at the earliest")
