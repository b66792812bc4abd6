"""``kshare dlq list|show|redrive`` against Kafka 3.9: dead letters as Kafka 4.4 writes them
(headers-only and copied), a redrive that reads headers-only records back from the source topic,
stops with one clear line at a source record gone from the log, passes over other groups'
records, and — run again — copies each record once (its position is committed with the copies)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.e2e.console_support import read_topic
from tests.support import create_topic, unique

pytestmark = [pytest.mark.kafka, pytest.mark.optin("console")]


def _context(topic: str, offset: int, group: str, message: str = "Offset rejected by client.") -> list:
    return [("__dlq.errors.topic", topic.encode()), ("__dlq.errors.partition", b"0"),
            ("__dlq.errors.offset", str(offset).encode()), ("__dlq.errors.group", group.encode()),
            ("__dlq.errors.delivery.count", b"1"), ("__dlq.errors.message", message.encode())]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "dlq", *args], capture_output=True, text=True,
                          timeout=120)


def test_list_show_and_a_resumable_redrive_each_record_once(kafka_39):
    backend = kafka_39.bootstrap
    source, dlq, group = unique("src"), unique("dlq.src"), unique("g")
    create_topic(backend, source, 1)
    create_topic(backend, dlq, 1)
    producer = Producer({"bootstrap.servers": backend})
    for i in range(6):
        producer.produce(source, key=f"k{i}".encode(), value=b"\xff\x00" if i == 3 else f"v{i}".encode(),
                         partition=0, headers=[("trace", f"t{i}".encode())])
    producer.flush(30)
    admin = AdminClient({"bootstrap.servers": backend})  # kept: the client must outlive its futures
    for future in admin.delete_records([TopicPartition(source, 0, 2)]).values():
        future.result(30)  # offsets 0 and 1 are gone from the log
    # dead letters: headers-only (copy off) for 2, 3, 0, 4; another group's for 5; a copied one for 5
    for offset in (2, 3, 0, 4):
        producer.produce(dlq, key=None, value=None, partition=0, headers=_context(source, offset, group))
    producer.produce(dlq, key=None, value=None, partition=0, headers=_context(source, 5, "other"))
    producer.produce(dlq, key=b"k5", value=b"copied-5", partition=0,
                     headers=[("trace", b"t5"), *_context(source, 5, group, "Offset delivery count exceeded the "
                                                                            "threshold.")])
    producer.flush(30)

    listed = _cli("list", dlq, "-b", backend, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["records"]
    assert [(r["group"], r["source"]["offset"], r["headers_only"]) for r in rows] == [
        (group, 2, True), (group, 3, True), (group, 0, True), (group, 4, True), ("other", 5, True), (group, 5, False)]
    shown = _cli("show", dlq, "0", "5", "-b", backend)
    assert shown.returncode == 0 and "value: copied-5" in shown.stdout and "header trace: t5" in shown.stdout

    first = _cli("redrive", "--group", group, "--topic", dlq, "-b", backend, "--rate", "1000")
    assert first.returncode == 1
    assert "is no longer in the log" in first.stdout and "skip_missing" in first.stdout, first.stdout + first.stderr
    second = _cli("redrive", "--group", group, "--topic", dlq, "-b", backend, "--skip-missing", "--json")
    assert second.returncode == 0, second.stdout + second.stderr
    result = json.loads(second.stdout)
    assert (result["state"], result["redriven"], result["missing"], result["passed_over"]) == ("done", 2, 1, 1)

    copies = [m for m in read_topic(backend, source, idle_s=3) if dict(m.headers() or []).get("kshare.redrive.source")]
    got = sorted((m.key(), m.value(), dict(m.headers())["trace"]) for m in copies)
    assert got == [(b"k2", b"v2", b"t2"), (b"k3", b"\xff\x00", b"t3"), (b"k4", b"v4", b"t4"),
                   (b"k5", b"copied-5", b"t5")]  # read back from the source, or from the copy; each once
    assert all(not k.startswith("__dlq.errors.") for m in copies for k, _ in m.headers())
    status = _cli("redrive", "--group", group, "--topic", dlq, "-b", backend, "--status")
    assert status.returncode == 0 and "finished" in status.stdout
    again = _cli("redrive", "--group", group, "--topic", dlq, "-b", backend, "--json")
    assert json.loads(again.stdout)["redriven"] == 0  # nothing new: each record went once
