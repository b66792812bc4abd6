"""`kshare demo` end to end: Kafka 3.9 from the harness, the sidecar in-process, real share consumers."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SUMMARY = re.compile(r"^summary: (\d+)/(\d+) records consumed by (\d+) share consumers through kshare "
                     r"on Kafka 3\.9 in [\d.]+ s \([\d,]+ records/s\), (\d+) redelivered: every record consumed$",
                     re.MULTILINE)


def test_demo_consumes_every_record_through_the_sidecar() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kshare_sidecar.cli", "demo", "--records", "2000", "--consumers", "3"],
        capture_output=True, text=True, timeout=420,
    )
    detail = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr (tail):\n{result.stderr[-3000:]}"
    assert result.returncode == 0, detail
    match = SUMMARY.search(result.stdout)
    assert match, detail
    consumed, produced, consumers, _redelivered = map(int, match.groups())
    assert (consumed, produced, consumers) == (2000, 2000, 3), detail
    # the live display's final frame names every consumer (rich prints it once when not a terminal)
    for name in ("consumer-1", "consumer-2", "consumer-3"):
        assert name in result.stderr, detail
    assert "Traceback" not in result.stderr, detail


def test_demo_rejects_nonsense_counts() -> None:
    result = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "demo", "--records", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "must be at least 1" in result.stderr
