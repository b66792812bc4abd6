"""`kshare dev broker`: one JSON line when ready, a usable broker, nothing left after Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import create_topic, produce, unique

pytestmark = pytest.mark.kafka


def _workdirs(pids: set[int]) -> set[Path]:
    """This broker's directory, read from its JVM's command line (other brokers may be running)."""
    found = set()
    for pid in pids:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        found |= {Path(a.decode()).parent for a in args if a.endswith(b"server.properties")}
    return found


def _children(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,pgid="], capture_output=True, text=True).stdout
    rows = [tuple(map(int, line.split())) for line in out.splitlines() if line.strip()]
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp, _ in rows if pp in frontier} - found
        found |= frontier
    return found


@pytest.mark.parametrize("line", ["3.9", "4"])
def test_broker_prints_json_and_cleans_up_on_sigint(line):
    proc = subprocess.Popen([sys.executable, "-m", "kshare_sidecar.cli", "dev", "broker", "--kafka", line],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        info = json.loads(first)
        assert set(info) == {"bootstrap", "version", "metadata", "brokers", "share_groups"}
        assert (info["metadata"], info["brokers"], info["share_groups"]) == ("kraft", 1, line == "4")
        assert info["version"].startswith("3.9" if line == "3.9" else "4.")
        assert info["bootstrap"].startswith("127.0.0.1:")
        descendants = _children(proc.pid)
        assert descendants, "the broker JVM should run as a child of the CLI"
        workdirs = _workdirs(descendants)
        assert len(workdirs) == 1, workdirs
        topic = unique("cli")
        create_topic(info["bootstrap"], topic)
        produce(info["bootstrap"], topic, 10)
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": info["bootstrap"], "group.id": unique("g"),
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert len(got) == 10
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    assert rc == 0
    assert proc.stdout.read() == "", "exactly one line on stdout"
    alive = [pid for pid in descendants if os.path.exists(f"/proc/{pid}")]
    assert alive == []
    assert workdirs and not any(p.exists() for p in workdirs)


def _run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_unknown_version_is_one_clear_line():
    result = _run_cli("dev", "broker", "--kafka", "2.7")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown Kafka version '2.7'" in lines[0] and "2.8" in lines[0] and "3.9" in lines[0]
    assert "Traceback" not in result.stderr


def test_missing_java_is_one_clear_line(tmp_path):
    result = _run_cli("dev", "broker", "--kafka", "3.9", env={"PATH": str(tmp_path)})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "kshare dev broker: java was not found on PATH: install a Java 17+ runtime "
        "(for example `apt-get install openjdk-17-jre`)"
    )


def test_missing_maven_is_one_clear_line(tmp_path):
    (tmp_path / "java").symlink_to("/usr/bin/java")
    result = _run_cli("dev", "broker", "--kafka", "3.9",
                      env={"PATH": str(tmp_path), "KSHARE_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 2
    assert "mvn was not found on PATH: install Apache Maven" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_maven_resolution_failure_is_one_clear_line(tmp_path, monkeypatch):
    from kshare_sidecar.testing import HarnessError
    from kshare_sidecar.testing.maven import resolve_artifacts

    monkeypatch.setenv("KSHARE_CACHE_DIR", str(tmp_path))
    with pytest.raises(HarnessError) as err:
        resolve_artifacts("nope", [("org.apache.kafka", "kafka-no-such-artifact", "0.0.1")])
    message = str(err.value)
    assert "Maven could not resolve nope" in message and "kafka-no-such-artifact" in message
    assert "\n" not in message
    assert not (tmp_path / "nope" / ".complete").exists()


def test_unreachable_bootstrap_is_one_clear_line(monkeypatch):
    from kshare_sidecar.testing import HarnessError, kafka_cluster
    from kshare_sidecar.testing.kafka import free_port

    monkeypatch.setenv("KSHARE_TEST_BOOTSTRAP", f"127.0.0.1:{free_port()}")
    with pytest.raises(HarnessError, match=r"KSHARE_TEST_BOOTSTRAP=127\.0\.0\.1:\d+ does not answer Kafka Metadata"):
        with kafka_cluster("3.9"):
            pass


def test_existing_cluster_is_used_from_env(kafka_39, monkeypatch):
    from kshare_sidecar.testing import kafka_cluster

    monkeypatch.setenv("KSHARE_TEST_BOOTSTRAP", kafka_39.bootstrap)
    with kafka_cluster("3.9") as cluster:
        assert cluster.kind == "external" and cluster.bootstrap == kafka_39.bootstrap
