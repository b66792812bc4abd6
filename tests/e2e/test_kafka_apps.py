"""Apache Kafka's own applications with the sidecar as their only bootstrap, beside native
Kafka 4.4.0, the reference (opt-in: ``make test-kafka-apps``; a few minutes, mostly JVM start-ups).

Applications written for Kafka 4.x use one bootstrap for everything. These are Kafka's own,
unmodified, from Maven Central: Kafka Streams' ``WordCountDemo`` (kafka-streams-examples 4.3.1: no
4.4.0 of that artifact is published, so the applications stay 4.3.1 clients against 4.4 brokers)
with ``processing.guarantee=exactly_once_v2``, SIGKILLed mid-run and restarted; the system tests'
``VerifiableProducer`` / ``VerifiableConsumer`` (idempotent acks=all producer, a classic consumer
group); and ``TransactionalMessageCopier`` with random aborts (the read-process-write loop of
Kafka's EOS system tests). Each must give the same, exact outcome through kshare on Kafka 3.9 and
through kshare on Kafka 4.4.0 (whose transaction.version 2 the clients see through the sidecar) as
against native Kafka 4.4.0.
"""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kshare_sidecar.testing.maven import require_tool, resolve_artifacts

from tests.e2e.conftest import SidecarProcess, Target, target_named, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.optin("kafka-apps")]

VERSION = "4.3.1"  # the applications' jars (see the module docstring); the brokers are the harness's "4"
WORDS = 50


@pytest.fixture(scope="module")
def sidecar_on_4(native_kafka, tmp_path_factory):
    """kshare in front of Kafka 4.4: the backend's transaction.version 2 reaches the clients through
    the sidecar's ApiVersions, so the Java clients run KIP-890's transactions through it."""
    sc = SidecarProcess(native_kafka.bootstrap, tmp_path_factory.mktemp("sidecar-4") / "sidecar.log").start()
    yield sc
    sc.stop()


@pytest.fixture(params=["kshare", "kshare-on-4.4", "native"])
def target(request) -> Target:
    """The conftest's two targets and a third: kshare on Kafka 4.4."""
    target = target_named(request, "sidecar_on_4" if request.param == "kshare-on-4.4" else request.param)
    return Target(request.param, target.bootstrap, target.backend)


@pytest.fixture(scope="module")
def kafka_apps() -> Path:
    return resolve_artifacts(f"kafka-apps-{VERSION}", [
        ("org.apache.kafka", "kafka-streams-examples", VERSION),
        ("org.apache.kafka", "kafka-tools", VERSION),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3"),
        ("org.apache.logging.log4j", "log4j-core", "2.24.3"),
    ])


def _java(libs: Path, main: str, args: list[str], log: Path) -> subprocess.Popen:
    java = require_tool("java", "install a JDK 17+")
    return subprocess.Popen([java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Dlog4j2.level=WARN", "-cp", f"{libs}/*",
                             main, *args], stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def _topics(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()]).values():
        future.result(60)
    assert wait_until(lambda: set(partitions) <= set(admin.list_topics(timeout=10).topics), 30)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(60) == 0


def _read_committed(bootstrap: str, topic: str, settle_s: float = 3.0, timeout_s: float = 60):
    """Every committed record of ``topic`` (key, value, partition, offset), read until quiet."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    out, quiet, deadline = [], time.monotonic() + settle_s, time.monotonic() + timeout_s
    try:
        while time.monotonic() < min(quiet, deadline) or not out and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                out.append((m.key(), m.value(), m.partition(), m.offset()))
                quiet = time.monotonic() + settle_s
    finally:
        consumer.close()
    return out


def _counts(bootstrap: str, topic: str) -> dict[str, int]:
    """A word-count output topic as {word: latest count}."""
    return {k.decode(): struct.unpack(">q", v)[0] for k, v, _, _ in _read_committed(bootstrap, topic, settle_s=2)}


def test_kafka_streams_exactly_once_word_count_survives_a_sigkill(target, kafka_apps, tmp_path):
    app = f"wc-{target.name}-{uuid.uuid4().hex[:6]}"
    source, sink = "streams-plaintext-input", "streams-wordcount-output"  # WordCountDemo's topics
    if source not in AdminClient({"bootstrap.servers": target.bootstrap}).list_topics(timeout=10).topics:
        _topics(target.bootstrap, {source: 2, sink: 2})
    props = tmp_path / "wc.properties"
    props.write_text(f"bootstrap.servers={target.bootstrap}\napplication.id={app}\n"
                     f"processing.guarantee=exactly_once_v2\nreplication.factor=1\nstate.dir={tmp_path / 'state'}\n"
                     "commit.interval.ms=200\n")
    run = uuid.uuid4().hex[:6]  # words of this run only: the demo's topics are shared between runs
    lines = [f"{run}w{i % WORDS}".encode() for i in range(20_000)]
    expected = {f"{run}w{i}": len(lines) // WORDS for i in range(WORDS)}
    main = "org.apache.kafka.streams.examples.wordcount.WordCountDemo"

    streams = _java(kafka_apps, main, [str(props)], tmp_path / "streams-1.log")
    try:
        _produce(target.bootstrap, source, lines[:10_000])
        assert wait_until(lambda: sum(v for k, v in _counts(target.bootstrap, sink).items() if k in expected) > 2_000,
                          120), (tmp_path / "streams-1.log").read_text()[-3000:]
        streams.send_signal(signal.SIGKILL)  # mid-transaction, as likely as not
        streams.wait(30)
        streams = _java(kafka_apps, main, [str(props)], tmp_path / "streams-2.log")
        _produce(target.bootstrap, source, lines[10_000:])
        final: dict[str, int] = {}

        def done() -> bool:
            final.update({k: v for k, v in _counts(target.bootstrap, sink).items() if k in expected})
            return final == expected
        assert wait_until(done, 180), f"{target.name}: counts {sorted(final.items())[:5]}... expected {len(lines) // WORDS} each"
    finally:
        streams.send_signal(signal.SIGTERM)
        try:
            streams.wait(30)
        except subprocess.TimeoutExpired:
            streams.kill()
    print(f"\n[kafka-apps] {target.name}: Kafka Streams EOS word count exact after a SIGKILL "
          f"({len(lines)} lines, {WORDS} words)")


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]


def test_verifiable_producer_and_consumer(target, kafka_apps, tmp_path):
    topic, group, n = f"verifiable-{uuid.uuid4().hex[:8]}", f"vc-{uuid.uuid4().hex[:8]}", 20_000
    _topics(target.bootstrap, {topic: 3})
    producer = _java(kafka_apps, "org.apache.kafka.tools.VerifiableProducer",
                     ["--bootstrap-server", target.bootstrap, "--topic", topic, "--max-messages", str(n), "--acks", "-1"],
                     tmp_path / "producer.log")
    assert producer.wait(180) == 0, (tmp_path / "producer.log").read_text()[-3000:]
    sent = [e for e in _events(tmp_path / "producer.log") if e.get("name") == "producer_send_success"]
    assert len(sent) == n, f"{target.name}: {len(sent)} of {n} acknowledged"

    consumer = _java(kafka_apps, "org.apache.kafka.tools.VerifiableConsumer",
                     ["--bootstrap-server", target.bootstrap, "--topic", topic, "--group-id", group,
                      "--group-protocol", "classic", "--max-messages", str(n), "--reset-policy", "earliest",
                      "--verbose"], tmp_path / "consumer.log")
    try:
        assert consumer.wait(180) == 0, (tmp_path / "consumer.log").read_text()[-3000:]
    finally:
        if consumer.poll() is None:
            consumer.kill()
    events = _events(tmp_path / "consumer.log")
    records = Counter((e["partition"], e["offset"]) for e in events if e.get("name") == "record_data")
    assert len(records) == n and max(records.values()) == 1, f"{target.name}: {len(records)} distinct of {n}"
    commits = [e for e in events if e.get("name") == "offsets_committed"]
    assert commits and all(e["success"] for e in commits), commits[-3:]
    print(f"\n[kafka-apps] {target.name}: VerifiableProducer {n} acknowledged, VerifiableConsumer {n} consumed once, "
          f"{len(commits)} commits")


def test_transactional_message_copier_with_random_aborts(target, kafka_apps, tmp_path):
    source, sink, n = f"copier-in-{uuid.uuid4().hex[:8]}", f"copier-out-{uuid.uuid4().hex[:8]}", 10_000
    _topics(target.bootstrap, {source: 1, sink: 1})
    values = [f"v{i}".encode() for i in range(n)]
    _produce(target.bootstrap, source, values)
    copier = _java(kafka_apps, "org.apache.kafka.tools.TransactionalMessageCopier",
                   ["--broker-list", target.bootstrap, "--input-topic", source, "--input-partition", "0",
                    "--output-topic", sink, "--consumer-group", f"copier-{uuid.uuid4().hex[:8]}",
                    "--transactional-id", f"copier-{uuid.uuid4().hex[:8]}", "--transaction-size", "200",
                    "--max-messages", str(n), "--enable-random-aborts"], tmp_path / "copier.log")
    try:
        assert copier.wait(240) == 0, (tmp_path / "copier.log").read_text()[-3000:]
    finally:
        if copier.poll() is None:
            copier.kill()
    copied = [v for _, v, _, _ in _read_committed(target.bootstrap, sink)]
    assert copied == values, f"{target.name}: {len(copied)} committed copies of {n}, in order: {copied[:3]}"
    print(f"\n[kafka-apps] {target.name}: TransactionalMessageCopier with random aborts: {n} copied exactly once, in order")
