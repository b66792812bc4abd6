"""Fixtures of the differential harness: native Kafka 4.3 and kshare on 3.9, seeded alike."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from .runner import Report, seed_topics


@dataclass
class Targets:
    native: str
    kshare: str


@pytest.fixture(scope="session")
def parity_targets(native_kafka, sidecar) -> Targets:
    seed_topics(native_kafka.bootstrap)
    seed_topics(sidecar.bootstrap)
    return Targets(native_kafka.bootstrap, sidecar.bootstrap)


@pytest.fixture(scope="session")
def parity_report(request) -> Report:
    report = Report()
    yield report
    line = f"parity: {report.sequences} sequences, {report.operations} operations compared on both targets"
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.write_line(line)
    else:
        print(line)
