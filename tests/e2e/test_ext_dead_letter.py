"""Dead-letter topic (kshare's extension with KIP-1191's names, docs/extensions.md) on Kafka 3.9:
confluent-kafka ShareConsumer processes reject some records and keep releasing others until the
delivery count limit; the group's dead-letter topic then holds every one of them exactly once,
with its key, value and original headers and Kafka 4.4's ``__dlq.errors.*`` headers; no
accepted record is there."""

from __future__ import annotations

import pytest

from tests.e2e.ext_support import ExtWorker, produce_records, read_all
from tests.support import create_topic, set_group_config, unique

pytestmark = pytest.mark.kafka


def test_rejected_and_limit_archived_records_reach_the_dead_letter_topic_once(sidecar, kafka_39, tmp_path):
    topic, group, dlq = unique("dlqsrc"), unique("g"), unique("dlq.t")
    create_topic(kafka_39.bootstrap, topic, 1)
    create_topic(kafka_39.bootstrap, dlq, 2)
    set_group_config(sidecar.bootstrap, group, {"errors.deadletterqueue.topic.name": dlq,
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
        assert h["h"] == str(i).encode() and "empty" in h and h["empty"] in (None, b"")
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


def test_a_failed_dead_letter_write_keeps_the_record_and_is_retried(sidecar, kafka_39, tmp_path):
    """The dead-letter topic does not exist (and may not be created): rejected records stay held —
    not archived, not redelivered — and reach the topic once it exists, each once."""
    topic, group, dlq = unique("dlqsrc"), unique("g"), unique("dlq.later")
    create_topic(kafka_39.bootstrap, topic, 1)
    set_group_config(sidecar.bootstrap, group, {"errors.deadletterqueue.topic.name": dlq})
    records = [(f"k{i}", (f"rej-{i}" if i % 2 else f"ok-{i}"), [("h", b"x")]) for i in range(20)]
    produce_records(kafka_39.bootstrap, topic, records)
    worker = ExtWorker(sidecar.bootstrap, group, topic, tmp_path / "w.jsonl", idle_s=6)
    assert worker.wait(240) == 0, worker.stderr()
    rejected = {e["o"] for e in worker.events() if e["ev"] == "ack" and e["type"] == "reject" and e["ok"]}
    assert rejected == {i for i in range(20) if i % 2}
    create_topic(kafka_39.bootstrap, dlq, 1)  # the writer retries (0.5 s doubling, at most 30 s apart)
    got = read_all(kafka_39.bootstrap, dlq, len(rejected), timeout=90)
    offsets = sorted(int(dict(m.headers())["__dlq.errors.offset"]) for m in got)
    assert offsets == sorted(rejected), sidecar.log_tail()
    deliveries = [e["o"] for e in worker.events() if e["ev"] == "rec"]
    assert sorted(deliveries) == list(range(20)), "a held record was delivered again"
    assert "does not exist" in sidecar.log_path.read_text(), "the failed write was not logged"


def test_java_share_consumer_rejects_into_the_dead_letter_topic(sidecar, kafka_39, tmp_path):
    """The one Java scenario: KafkaShareConsumer (kafka-clients 4.x) REJECTs through kshare."""
    import shutil
    import subprocess
    from pathlib import Path

    from kshare_sidecar.testing.kafka import KAFKA_VERSIONS
    from kshare_sidecar.testing.maven import resolve_artifacts

    version = KAFKA_VERSIONS["4"]
    libs = resolve_artifacts(f"kafka-clients-{version}", [("org.apache.kafka", "kafka-clients", version),
                                                           ("org.slf4j", "slf4j-nop", "1.7.36")])
    assert shutil.which("javac"), "javac (JDK 17+) is required"
    source = Path(__file__).with_name("java") / "ShareReject.java"
    subprocess.run(["javac", "-d", str(tmp_path), "-cp", f"{libs}/*", str(source)], check=True, capture_output=True)
    topic, group, dlq = unique("dlqjava"), unique("g"), unique("dlq.java")
    create_topic(kafka_39.bootstrap, topic, 1)
    create_topic(kafka_39.bootstrap, dlq, 1)
    set_group_config(sidecar.bootstrap, group, {"errors.deadletterqueue.topic.name": dlq})
    produce_records(kafka_39.bootstrap, topic, [(f"k{i}", f"rej-{i}" if i % 3 == 0 else f"ok-{i}", [("src", b"java")])
                                                for i in range(30)])
    result = subprocess.run(["java", "-cp", f"{tmp_path}:{libs}/*", "ShareReject", sidecar.bootstrap, group, topic,
                             "30", "90000"], capture_output=True, text=True, timeout=150)
    assert result.returncode == 0 and result.stdout.strip().endswith("DONE 30"), result.stdout[-2000:] + \
        result.stderr[-2000:]
    got = read_all(kafka_39.bootstrap, dlq, 10, timeout=60)
    assert sorted(int(dict(m.headers())["__dlq.errors.offset"]) for m in got) == list(range(0, 30, 3))
    for m in got:
        h = dict(m.headers())
        assert h["src"] == b"java" and m.value().decode().startswith("rej-")
        assert h["__dlq.errors.message"] == b"Offset rejected by client."
