"""Fixtures of the differential harness: native Kafka 4.4 and kshare on 3.9, seeded alike."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from .dlq import seed_dead_letter_topics
from .runner import Report, seed_topics


@dataclass
class Targets:
    native: str
    kshare: str


@pytest.fixture(scope="session")
def parity_targets(native_kafka, sidecar) -> Targets:
    seed_topics(native_kafka.bootstrap)
    seed_topics(sidecar.bootstrap)
    seed_dead_letter_topics(native_kafka.bootstrap)
    seed_dead_letter_topics(sidecar.bootstrap)  # through the sidecar: it keeps the opt-in 3.9 cannot hold
    return Targets(native_kafka.bootstrap, sidecar.bootstrap)


REPORT = Report()


@pytest.fixture(scope="session")
def parity_report() -> Report:
    return REPORT


def pytest_terminal_summary(terminalreporter) -> None:
    if REPORT.sequences or REPORT.operations:
        terminalreporter.write_line(f"parity: {REPORT.sequences} sequences, {REPORT.operations} operations "
                                    f"({REPORT.dead_letters} dead-letter records) compared on native Kafka 4.4 "
                                    "and kshare")
