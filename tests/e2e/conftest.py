"""End-to-end fixtures: the same scenarios against kshare on Kafka 3.9 and native Kafka 4.x.

Third-party clients only (confluent-kafka's ShareConsumer in separate processes, Java's
KafkaShareConsumer); the sidecar runs as `kshare sidecar run`, exactly as users start it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kshare_sidecar.testing import kafka_cluster
from kshare_sidecar.testing.kafka import free_port
from kshare_sidecar.testing.probe import broker_ready
from tests.support import set_group_config

#: Short locks keep the lock-expiry scenarios quick; both targets use the same settings.
LOCK_MS = 6000
WORKER = str(Path(__file__).with_name("share_worker.py"))


class SidecarProcess:
    """`kshare sidecar run` as a child process on a fixed loopback port (so it can be restarted)."""

    def __init__(self, backend: str, log_path: Path, port: int | None = None,
                 env: dict[str, str] | None = None, listeners: str | None = None,
                 args: list[str] | None = None, faults: list[str] | None = None) -> None:
        self.backend = backend
        self.port = port or free_port()  # with `listeners`: its PLAINTEXT port (the readiness probe's)
        self.env = dict(env or {})  # extra KSHARE_* settings
        # Its own state topic unless told otherwise: two sidecars on one backend and one state topic
        # are a takeover — a test's extra sidecar would supersede the session's.
        self.env.setdefault("KSHARE_STATE_TOPIC", f"__kshare_state_t{uuid.uuid4().hex[:10]}")
        self.listeners = listeners
        self.args = list(args or [])  # extra command-line arguments (--log-level DEBUG)
        #: faults put in from the outside (tests/e2e/faulty_sidecar.py's options), e.g.
        #: ["--hold-state-writes-ms", "200"]; None: the plain CLI
        self.faults = faults
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60) -> SidecarProcess:
        env = {**os.environ, "KSHARE_SHARE_AUTO_OFFSET_RESET": "earliest",
               "KSHARE_STATE_TOPIC_REPLICATION_FACTOR": "1", "KSHARE_STATE_TOPIC_PARTITIONS": "4",
               "KSHARE_GROUP_SHARE_RECORD_LOCK_DURATION_MS": str(LOCK_MS),
               "KSHARE_GROUP_SHARE_MIN_RECORD_LOCK_DURATION_MS": "1000",
               "KSHARE_GROUP_SHARE_HEARTBEAT_INTERVAL_MS": "1000", **self.env}
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.command(), "sidecar", "run", "--bootstrap-server", self.backend,
             *(["--listeners", self.listeners] if self.listeners else ["--listen", self.bootstrap]), *self.args],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sidecar exited with {self.proc.returncode}: {self.log_tail()}")
            if broker_ready("127.0.0.1", self.port, timeout=1):
                return self
            time.sleep(0.2)
        raise RuntimeError(f"sidecar did not answer Metadata in {timeout_s} s: {self.log_tail()}")

    def command(self) -> list[str]:
        if self.faults is None:
            return [sys.executable, "-m", "kshare_sidecar.cli"]
        return [sys.executable, str(Path(__file__).with_name("faulty_sidecar.py")), *self.faults, "--"]

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        rc, self.proc = self.proc.returncode, None
        return rc

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


@dataclass
class Target:
    """Where share consumers connect (`bootstrap`) and where producers write (`backend`)."""

    name: str
    bootstrap: str
    backend: str

    def prepare_group(self, group: str) -> None:
        """Make the group start from the earliest offset (the sidecar's test default)."""
        if self.name == "native":
            set_group_config(self.backend, group, {"share.auto.offset.reset": "earliest"})


@pytest.fixture(scope="session")
def native_kafka() -> Iterator:
    """Kafka 4.x with share groups and the same short lock as the test sidecar."""
    with kafka_cluster("4", extra_config={"group.share.record.lock.duration.ms": str(LOCK_MS),
                                          "group.share.min.record.lock.duration.ms": "1000",
                                          "group.share.heartbeat.interval.ms": "1000",
                                          "group.share.min.heartbeat.interval.ms": "1000"}) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def sidecar(kafka_39, tmp_path_factory) -> Iterator[SidecarProcess]:
    sc = SidecarProcess(kafka_39.bootstrap, tmp_path_factory.mktemp("sidecar") / "sidecar.log",
                        env={"KSHARE_STATE_TOPIC": "__kshare_state"}).start()
    yield sc
    sc.stop()


#: kshare on tansu (docs/compatibility.md, "Tansu"): `fenced` state writes (tansu has no
#: EndTxn, and refuses a batch at an older producer epoch) without the hourly writer refresh
#: (tansu expires no producer state, and its libSQL engine panics on the conditional InitProducerId).
TANSU_SIDECAR_ENV = {"KSHARE_STATE_WRITE_MODE": "fenced", "KSHARE_STATE_WRITE_REFRESH_MS": "0"}


@pytest.fixture(scope="session")
def tansu_sidecar(tansu, tmp_path_factory) -> Iterator[SidecarProcess]:
    """A sidecar in front of the harness's tansu (`tansu` fixture: skipped without its binary)."""
    sc = SidecarProcess(tansu.bootstrap, tmp_path_factory.mktemp("tansu-sidecar") / "sidecar.log",
                        env=dict(TANSU_SIDECAR_ENV)).start()
    yield sc
    sc.stop()


@pytest.fixture(params=["kshare", "native"])
def target(request) -> Target:
    return target_named(request, request.param)


def target_named(request, name: str) -> Target:
    """``name`` is "native" or the name of a sidecar fixture ("kshare": the ``sidecar`` fixture)."""
    if name == "native":
        native = request.getfixturevalue("native_kafka")
        return Target("native", native.bootstrap, native.bootstrap)
    sc = request.getfixturevalue("sidecar" if name == "kshare" else name)
    return Target(name, sc.bootstrap, sc.backend)


class Worker:
    """One share_worker.py process and its event log."""

    def __init__(self, target: Target, group: str, topic: str, out: Path, **opts) -> None:
        self.out = out
        args = [sys.executable, WORKER, "--bootstrap", target.bootstrap, "--group", group, "--topic", topic,
                "--out", str(out)]
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def events(self) -> list[dict]:
        if not self.out.exists():
            return []
        lines = self.out.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip().endswith("}")]

    def records(self) -> list[dict]:
        return [e for e in self.events() if e["ev"] == "rec"]

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def stderr(self) -> str:
        return self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""


def rdkafka_membership(log_path: Path) -> tuple[list[int], list[str]]:
    """From a share_worker's librdkafka debug log (``debug="cgrp"``): the member epochs its
    ShareGroupHeartbeats sent, in order, and the lines where it lost its membership (UNKNOWN_MEMBER_ID
    or FENCED_MEMBER_EPOCH: "member fenced - rejoining")."""
    epochs, lost = [], []
    for line in log_path.read_text(errors="replace").splitlines():
        m = re.search(r"ShareGroupHeartbeat of group id .*member epoch (-?\d+)", line)
        if m:
            epochs.append(int(m.group(1)))
        elif re.search(r"fenced|UNKNOWN_MEMBER_ID", line):
            lost.append(line)
    return epochs, lost


def wait_until(predicate, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
