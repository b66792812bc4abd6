"""Backend outage lines (pure: injected clock): one line down, a reminder every 10 s (then 60 s),
one line up; aiokafka's repeated lines deduplicated and counted, never silently dropped."""

from __future__ import annotations

import logging

from kshare_sidecar.backend.health import AiokafkaLogGate, BackendHealth


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def lines(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_an_outage_is_a_handful_of_lines(caplog) -> None:
    clock = Clock()
    gate = AiokafkaLogGate(clock=clock)
    health = BackendHealth(gate=gate, clock=clock)
    aiokafka = logging.getLogger("aiokafka.test-outage")
    aiokafka.addHandler(gate)
    aiokafka.propagate = False
    try:
        with caplog.at_level(logging.INFO):
            health.succeeded()  # up and staying up: silent
            for step in range(180):  # 18 s of probes every 100 ms, each with aiokafka noise
                clock.now = step / 10
                for _ in range(30):
                    aiokafka.error("Unable to update metadata from [%s]", 1)
                    aiokafka.warning("Unable connect to node with id %s: %s", 1, "refused")
                health.failed("broker 1: KafkaConnectionError")
            clock.now = 18.4
            health.succeeded()
    finally:
        aiokafka.removeHandler(gate)
    ours = lines(caplog, "kshare.backend")
    assert ours[0] == "backend unreachable (broker 1: KafkaConnectionError), retrying"
    assert ours[1].startswith("backend unreachable for 10 s, retrying")
    assert ours[-1].startswith("backend reachable again after 18 s (")
    assert len(ours) == 3
    passed = lines(caplog, "aiokafka.test-outage")
    assert len(passed) == 2  # the first line of each kind, then the outage budget is spent
    assert gate.suppressed == 180 * 60 - 2
    # counted from the moment the outage was detected (the first 60 lines came before the probe failed)
    assert f"({gate.suppressed - 58} aiokafka log lines suppressed during the outage)" in ours[-1]
    assert health.up and health.outages == 1


def test_long_outage_reminds_every_minute_after_the_first() -> None:
    clock = Clock()
    health = BackendHealth(clock=clock)
    reminders = []
    health_log = logging.getLogger("kshare.backend")

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            reminders.append(record.getMessage())

    handler = Catch()
    health_log.addHandler(handler)
    try:
        for second in range(0, 301):
            clock.now = second
            health.failed("timeout")
    finally:
        health_log.removeHandler(handler)
    # down at 0; reminders at 10..50 (every 10 s), then 60 s apart while it lasts
    assert len(reminders) == 1 + 5 + 4  # 110, 170, 230, 290
    assert not health.up


def test_gate_dedupes_repeats_outside_outages_too(caplog) -> None:
    clock = Clock()
    gate = AiokafkaLogGate(window_s=300, clock=clock)
    logger = logging.getLogger("aiokafka.test-dedupe")
    logger.addHandler(gate)
    logger.propagate = False
    try:
        with caplog.at_level(logging.INFO):
            for i in range(10):
                logger.warning("Heartbeat failed for group %s", i)
                logger.info("Discovered coordinator %s", i)  # below WARNING: untouched
            clock.now = 301
            logger.warning("Heartbeat failed for group %s", 99)
    finally:
        logger.removeHandler(gate)
    got = lines(caplog, "aiokafka.test-dedupe")
    assert got.count("Heartbeat failed for group 0") == 1 and "Heartbeat failed for group 99" in got
    assert sum(m.startswith("Discovered") for m in got) == 10
    assert gate.suppressed == 9
