"""The backend disappears under pass-through traffic and comes back: clients bootstrapped only to
the sidecar see retriable errors (never UNKNOWN_SERVER_ERROR), nothing acknowledged is lost, and
the sidecar serves again without a restart. confluent-kafka producer and consumer, Kafka 3.9."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from kshare_sidecar.testing.kafka import KafkaBroker
from tests.e2e.conftest import SidecarProcess
from tests.support import assert_quiet_log, create_topic, unique

# a broker restarted under load: the opt-in fault suite, `make test-faults` (about a minute)
pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400), pytest.mark.optin("faults")]


def test_produce_and_consume_through_a_backend_restart(tmp_path):
    with KafkaBroker("3.9") as broker:
        topic = unique("pt-outage")
        create_topic(broker.bootstrap, topic, 2)
        sc = SidecarProcess(broker.bootstrap, tmp_path / "sidecar.log").start()
        try:
            errors: list[KafkaError] = []
            delivered: list[bytes] = []

            def on_delivery(err, msg) -> None:
                (errors.append(err) if err else delivered.append(msg.value()))

            producer = Producer({"bootstrap.servers": sc.bootstrap, "message.timeout.ms": 120000,
                                 "enable.idempotence": True, "error_cb": errors.append})
            for i in range(500):
                producer.produce(topic, b"before-%d" % i, on_delivery=on_delivery)
            assert producer.flush(60) == 0
            mark = sc.log_path.stat().st_size

            broker.kill()
            for i in range(500):  # queued while the backend is down
                producer.produce(topic, b"during-%d" % i, on_delivery=on_delivery)
            producer.poll(5)
            broker.restart(down_s=6)
            assert producer.flush(120) == 0, "records were not delivered after the backend came back"
            assert sc.proc.poll() is None, "the sidecar died"

            fatal = [e for e in errors if e.fatal() or e.code() == KafkaError.UNKNOWN]
            assert not fatal, fatal
            assert not [e for e in errors if "UNKNOWN_SERVER_ERROR" in e.str()], errors
            assert len(delivered) == 1000

            consumer = Consumer({"bootstrap.servers": sc.bootstrap, "group.id": unique("g"),
                                 "auto.offset.reset": "earliest"})
            consumer.subscribe([topic])
            seen: set[bytes] = set()
            deadline = time.monotonic() + 90
            while len(seen) < 1000 and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    seen.add(m.value())
            consumer.close()
            assert seen == set(delivered)
            outage_log = sc.log_path.read_text(errors="replace")[mark:]
        finally:
            sc.stop()
    assert_quiet_log(outage_log, levels="WARNING|ERROR|CRITICAL")
