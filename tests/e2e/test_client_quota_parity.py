"""A consumer_byte_rate quota throttling a share consumer, side by side: native Kafka 4.4 and kshare
over Kafka 3.9 (quota/client_quotas.py).

The quota is set for a client id with ``kafka-configs.sh --entity-type clients`` — through the
sidecar for kshare (AlterClientQuotas passes through to the backend, where the sidecar reads it
back with DescribeClientQuotas), at the broker for native. A confluent-kafka ShareConsumer with
that client id then consumes 2.5 MB: librdkafka's throttle callback must fire on both, and the
consumption rate must be near the quota on both (Kafka lets a client take the quota's whole window,
quota × 10 s, at once, so 2.5 MB at 100 kB/s take about 15 s, not 25).
Without the quota (another client id) the same consumer is not throttled.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer, ShareConsumer

from kshare_sidecar.testing.kafka import KafkaBroker
from kshare_sidecar.testing.tools import run_configs
from tests.e2e.conftest import LOCK_MS, Target
from tests.support import create_topic, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300), pytest.mark.optin("parity-debts")]

QUOTA = 100_000  # bytes per second
RECORD = 1000
RECORDS = 2500


@pytest.fixture(scope="module")
def native44():
    with KafkaBroker("4.4", heap="768m", extra_config={
            "group.share.record.lock.duration.ms": str(LOCK_MS), "group.share.min.record.lock.duration.ms": "1000",
            "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000"}) as b:
        yield b


@pytest.fixture(scope="module")
def targets(native44, sidecar) -> list[Target]:
    return [Target("kshare", sidecar.bootstrap, sidecar.backend),
            Target("native", native44.bootstrap, native44.bootstrap)]


def _fill(target: Target) -> str:
    topic = unique("quota")
    create_topic(target.backend, topic, 1)
    producer = Producer({"bootstrap.servers": target.backend, "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce(topic, b"%06d" % i + b"q" * (RECORD - 6))
    assert producer.flush(30) == 0
    return topic


def _consume(target: Target, topic: str, client_id: str, timeout_s: float = 90) -> dict[str, float]:
    """Consume every record; the throttle callbacks seen, the byte rate from the first record to the
    last, and when each 250 kB had arrived."""
    group = unique("quota-g")
    set_group_config(target.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    throttles: list[int] = []
    consumer = ShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group, "client.id": client_id,
                              "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000))})
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    consumed = 0
    timeline: list[tuple[float, int]] = []
    start = time.monotonic()
    try:
        while len(seen) < RECORDS and time.monotonic() - start < timeout_s:
            for msg in consumer.poll(0.5):
                if msg.error() or msg.value()[:6] in seen:
                    continue
                seen.add(msg.value()[:6])
                consumed += len(msg.value())
                if consumed % 250_000 < RECORD or len(seen) in (1, RECORDS):
                    timeline.append((round(time.monotonic() - start, 2), consumed // 1000))
    finally:
        consumer.close()
    # the rate from the first record to the last (the window's allowance, quota × 10 s, included)
    rate = consumed / (timeline[-1][0] - timeline[0][0]) if len(timeline) > 1 and timeline[-1][0] > timeline[0][0] \
        else float("inf")
    return {"records": len(seen), "throttled": sum(1 for t in throttles if t > 0), "rate": rate,
            "seconds": time.monotonic() - start, "throttles ms": [t for t in throttles if t > 0],
            "timeline s, kB": timeline}


def test_consumer_byte_rate_throttles_a_share_consumer_as_natively(targets):
    topics = {t.name: _fill(t) for t in targets}
    client = unique("quota-app")
    for t in targets:  # kshare: through the sidecar, which passes AlterClientQuotas to the backend
        result = run_configs(t.bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client,
                             "--add-config", f"consumer_byte_rate={QUOTA}")
        assert result.returncode == 0, result.output
    time.sleep(6)  # the sidecar reads the backend's quotas every client.quota.refresh.ms (5 s)
    results: dict[str, dict[str, float]] = {}

    def run(t: Target) -> None:
        results[t.name] = _consume(t, topics[t.name], client)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(f"\nquota {QUOTA} B/s, client id {client}: {results}")
    for name, r in results.items():
        assert r["records"] == RECORDS, (name, r)
        assert r["throttled"] > 0, (name, r)  # librdkafka's throttle callback fired
        # consumption near the quota: 2.5 MB take 15 s or more (10 s of allowance spent at once)
        assert 0.5 * QUOTA <= r["rate"] <= 1.7 * QUOTA, (name, r)
    # another client id has no quota: not throttled
    unthrottled = {t.name: _consume(t, topics[t.name], unique("free-app")) for t in targets}
    print(f"no quota: {unthrottled}")
    for name, r in unthrottled.items():
        assert r["records"] == RECORDS and r["throttled"] == 0, (name, r)
