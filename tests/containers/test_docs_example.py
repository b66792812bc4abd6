"""docs/testing.md's testcontainers example, run as a user would: the code block below its
`<!-- example: ... -->` marker is written to a file of its own and pytest runs it in a process of
its own (its own testcontainers session), against the session's engine and local images. A second
run adds a test that fails on purpose, to see `logs_on_failure` write the containers' logs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.optin("containers")

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
MARKER = "<!-- example: tests/containers/test_docs_example.py -->"

FAILING = '''

def test_fails_on_purpose(kafka_and_kshare):
    kafka, kshare = kafka_and_kshare
    assert kshare.get_bootstrap_server() == "nowhere:0", "failing on purpose: the logs must be collected"
'''


def example() -> str:
    text = DOC.read_text()
    assert MARKER in text, f"docs/testing.md lost its example marker {MARKER}"
    match = re.search(r"```python\n(.*?)```", text[text.index(MARKER):], re.DOTALL)
    assert match, "no python block after the marker"
    return match.group(1)


def run_pytest(tmp_path: Path, name: str, source: str, *args: str) -> subprocess.CompletedProcess:
    module = tmp_path / name
    module.write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "--basetemp", str(tmp_path / "basetemp"), *args, str(module)],
                          cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True, timeout=900, check=False)


def test_the_docs_example_passes(docker, tmp_path):
    result = run_pytest(tmp_path, "test_queue.py", example())
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout


def test_a_failing_test_gets_the_container_logs(docker, tmp_path):
    result = run_pytest(tmp_path, "test_queue_failing.py", example() + FAILING, "-k", "fails_on_purpose")
    assert result.returncode == 1 and "1 failed" in result.stdout, result.stdout[-4000:]
    logs = sorted((tmp_path / "basetemp").rglob("logs/*.log"))
    assert [p.name for p in logs] == ["0-kafka-3.9.2.log", "1-kshare-sidecar-dev.log"], result.stdout[-3000:]
    assert "Kafka Server started" in logs[0].read_text() or "started (kafka.server" in logs[0].read_text()
    assert "kshare sidecar serving share groups" in logs[1].read_text()
    assert "container logs in" in result.stdout
