"""Dead-letter queues (KIP-1191, as Kafka 4.4 does them; docs/extensions.md) on Kafka 3.9:
confluent-kafka ShareConsumer processes reject some records and keep releasing others until the
delivery count limit; the group's dead-letter topic then holds every one of them exactly once,
with its key and value (copy.record.enable=true), Kafka 4.4's ``__dlq.errors.*`` headers and no
original header; no accepted record is there. The comparison with native Kafka 4.4 is
test_dlq_parity.py; kshare's opt-in ``deadletter.hold.until.written`` is tested here."""

from __future__ import annotations

import pytest

from tests.e2e.ext_support import ExtWorker, create_dlq_topic, produce_records, read_all
from tests.support import create_topic, set_group_config, unique

pytestmark = pytest.mark.kafka


def test_rejected_and_limit_archived_records_reach_the_dead_letter_topic_once(sidecar, kafka_39, tmp_path):
    topic, group, dlq = unique("dlqsrc"), unique("g"), unique("dlq.t")
    create_topic(kafka_39.bootstrap, topic, 1)
    create_dlq_topic(sidecar.bootstrap, dlq, 2)
    set_group_config(sidecar.bootstrap, group, {"errors.deadletterqueue.topic.name": dlq,
                                                "errors.deadletterqueue.copy.record.enable": "true",
                                                "share.delivery.count.limit": "2"})
    total = 120
    kinds = {0: "rej", 1: "rel"}
    records = [(f"k{i}", f"{kinds.get(i % 6, 'ok')}-{i}", [("h", str(i).encode()), ("empty", None)])
               for i in range(total)]
    produce_records(kafka_39.bootstrap, topic, records)
    workers = [ExtWorker(sidecar.bootstrap, group, topic, tmp_path / f"w{i}.jsonl", max_poll_records=20)
               for i in range(2)]
    for w in workers:
        assert w.wait(240) == 0, w.stderr()
    expected = {i for i in range(total) if i % 6 in kinds}
    got = read_all(kafka_39.bootstrap, dlq, len(expected), timeout=60)
    offsets = [int(dict(m.headers())["__dlq.errors.offset"]) for m in got]
    assert sorted(offsets) == sorted(expected), (
        f"missing {sorted(expected - set(offsets))[:10]}, duplicates "
        f"{sorted({o for o in offsets if offsets.count(o) > 1})[:10]}, unexpected {sorted(set(offsets) - expected)[:10]}"
        f"\n{sidecar.log_tail()}")
    for m in got:
        h = dict(m.headers())
        i = int(h["__dlq.errors.offset"])
        assert m.key() == f"k{i}".encode() and m.value() == records[i][1].encode()
        assert "h" not in h and "empty" not in h, "Kafka 4.4 copies no original header"
        assert h["__dlq.errors.topic"] == topic.encode()
        assert h["__dlq.errors.partition"] == b"0" and m.partition() == 0  # source partition % 2
        assert h["__dlq.errors.group"] == group.encode()
        if i % 6 == 0:
            assert h["__dlq.errors.delivery.count"] == b"1"
            assert h["__dlq.errors.message"] == b"Offset rejected by client."
        else:
            assert h["__dlq.errors.delivery.count"] == b"2"
            assert h["__dlq.errors.message"] == b"Offset delivery count exceeded the threshold."
    events = [e for w in workers for e in w.events()]
    accepted = {e["o"] for e in events if e["ev"] == "ack" and e["type"] == "accept" and e["ok"]}
    assert accepted == set(range(total)) - expected
    print(f"\n[kshare] dead-letter topic: {len(got)} records ({len(expected)} expected), each once")


def test_hold_until_written_keeps_the_record_until_the_topic_exists(kafka_39, tmp_path):
    """kshare's opt-in deadletter.hold.until.written: the dead-letter topic does not exist (and may
    not be created) — rejected records stay held, not archived, not redelivered — and reach the
    topic once it exists, each once. (Kafka 4.4, and kshare by default, archive them at once.)"""
    from tests.e2e.conftest import SidecarProcess

    sidecar = SidecarProcess(kafka_39.bootstrap, tmp_path / "sidecar.log",
                             env={"KSHARE_DEADLETTER_HOLD_UNTIL_WRITTEN": "true"}).start()
    try:
        topic, group, dlq = unique("dlqsrc"), unique("g"), unique("dlq.later")
        create_topic(kafka_39.bootstrap, topic, 1)
        set_group_config(sidecar.bootstrap, group, {"errors.deadletterqueue.topic.name": dlq})
        records = [(f"k{i}", (f"rej-{i}" if i % 2 else f"ok-{i}"), [("h", b"x")]) for i in range(20)]
        produce_records(kafka_39.bootstrap, topic, records)
        worker = ExtWorker(sidecar.bootstrap, group, topic, tmp_path / "w.jsonl", idle_s=6)
        assert worker.wait(240) == 0, worker.stderr()
        rejected = {e["o"] for e in worker.events() if e["ev"] == "ack" and e["type"] == "reject" and e["ok"]}
        assert rejected == {i for i in range(20) if i % 2}
        create_dlq_topic(sidecar.bootstrap, dlq, 1)  # the writer retries (1 s doubling, at most 30 s apart)
        got = read_all(kafka_39.bootstrap, dlq, len(rejected), timeout=90)
        offsets = sorted(int(dict(m.headers())["__dlq.errors.offset"]) for m in got)
        assert offsets == sorted(rejected), sidecar.log_tail()
        assert all(m.key() is None and m.value() is None for m in got), "copy.record.enable is false by default"
        deliveries = [e["o"] for e in worker.events() if e["ev"] == "rec"]
        assert sorted(deliveries) == list(range(20)), "a held record was delivered again"
        assert "does not exist" in sidecar.log_path.read_text(), "the failed write was not logged"
    finally:
        sidecar.stop()
