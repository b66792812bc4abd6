"""An Apache Kafka broker in KRaft mode, started from Maven Central jars on loopback ports.

`KafkaBroker` is the one facade: ``with KafkaBroker("3.9") as broker: broker.bootstrap``.
Each broker gets a fresh temporary directory (data, config, log) that is removed on stop,
and runs in its own process group so stopping it leaves no process behind.
"""

from __future__ import annotations

import base64
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from .errors import HarnessError
from .maven import kafka_libs, require_tool
from .process import BrokerProcess, die_with_parent

#: Pinned versions by alias: 3.9 is a backend without share groups, 4 the native reference (4.4.0,
#: share groups with dead-letter queues); 4.3 the previous share-group release, kept as a second reference.
KAFKA_VERSIONS: dict[str, str] = {"3.9": "3.9.2", "4.3": "4.3.1", "4.4": "4.4.0", "4": "4.4.0"}

#: The ``share.version`` feature level each share-group release is formatted with: 4.4's level 2
#: turns on its dead-letter queues (KIP-1191), which level 1 leaves off.
SHARE_VERSION = {"4.3.1": 1, "4.4.0": 2}

_LOG4J1 = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
"""

_LOG4J2 = """status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


def resolve_version(alias: str) -> str:
    """Map ``3.9`` / ``4`` (or a pinned full version) to the pinned release."""
    if alias in KAFKA_VERSIONS:
        return KAFKA_VERSIONS[alias]
    if alias in KAFKA_VERSIONS.values():
        return alias
    allowed = ", ".join(sorted(KAFKA_VERSIONS) + sorted(KAFKA_VERSIONS.values()))
    raise HarnessError(f"unknown Kafka version {alias!r}: use one of {allowed}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cluster_id() -> str:
    """A KRaft cluster id (URL-safe base64 of a UUID). Never one starting with '-': the storage
    tool's argument parser would take it for an option (Kafka's own Uuid avoids it too)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


class KafkaBroker(BrokerProcess):
    """A single-node KRaft Kafka (combined broker + controller) for tests and local development.

    ``extra_config`` adds or overrides broker properties. ``share_groups`` (4.x only) enables
    KIP-932 share groups, with the share-state topic sized for one broker.
    """

    product = "Kafka"

    def __init__(
        self,
        version: str = "3.9",
        *,
        extra_config: dict[str, str] | None = None,
        heap: str = "1g",
        startup_timeout_s: float = 120.0,
        keep_dir: bool | None = None,
    ) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s, keep_dir=keep_dir)
        self.version = resolve_version(version)
        self.major = int(self.version.split(".")[0])
        self.extra_config = dict(extra_config or {})
        self.heap = heap
        self.controller_port = 0
        self.cluster_id: str | None = None  # set by multibroker.KafkaCluster: one id for every node
        self.format_args: list[str] = []  # extra `kafka-storage format` arguments

    # -- facade (bootstrap, running, stop, kill, log_tail: BrokerProcess) ----------------
    @property
    def share_groups(self) -> bool:
        """True when this broker serves KIP-932 share groups natively."""
        return self.major >= 4

    def start(self) -> KafkaBroker:
        java = require_tool("java", "install a Java 17+ runtime (for example `apt-get install openjdk-17-jre`)")
        started = time.monotonic()
        libs = kafka_libs(self.version)
        return self._start_in(f"kshare-kafka-{self.version}-", lambda: self._launch(java, libs), started)

    def restart(self, *, down_s: float = 0.0, sig: signal.Signals = signal.SIGKILL) -> None:
        """Kill the broker (``sig``; a no-op if :meth:`kill` already did), wait ``down_s``, start it
        again on the same ports and data: a backend outage for fault tests."""
        self.kill(sig)
        time.sleep(down_s)
        self._spawn(require_tool("java", "install a Java 17+ runtime"), kafka_libs(self.version))
        self._wait_ready()

    # -- internals ----------------------------------------------------------------------
    def _properties(self) -> dict[str, str]:
        assert self.workdir is not None
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            # Let compaction tests finish in seconds rather than the default 15 s back-off.
            "log.cleaner.backoff.ms": "1000",
        }
        if self.share_groups:
            props |= {
                "share.coordinator.state.topic.replication.factor": "1",
                "share.coordinator.state.topic.min.isr": "1",
                "share.coordinator.state.topic.num.partitions": "4",
            }
        return props | self.extra_config

    def _launch(self, java: str, libs: Path) -> None:
        assert self.workdir is not None
        if not (self.port and self.controller_port):  # a cluster node (multibroker.py) has its ports
            self.port, self.controller_port = free_port(), free_port()
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self._properties().items()))
        if self.major >= 4:
            (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        else:
            (self.workdir / "log4j.properties").write_text(_LOG4J1)
        base = self._java(java, libs)
        format_cmd = base + ["kafka.tools.StorageTool", "format", "-t", self.cluster_id or _cluster_id(), "-c",
                             str(config)]
        if self.share_groups:
            format_cmd += ["--feature", f"share.version={SHARE_VERSION.get(self.version, 1)}"]
        format_cmd += self.format_args  # e.g. --add-scram for SCRAM users (tests/e2e/test_secured_backend.py)
        fmt = subprocess.run(format_cmd, capture_output=True, text=True, timeout=120)
        if fmt.returncode != 0:
            tail = " | ".join((fmt.stdout + fmt.stderr).strip().splitlines()[-3:])
            raise HarnessError(f"formatting the Kafka {self.version} storage failed: {tail}")
        self._spawn(java, libs)

    def _java(self, java: str, libs: Path) -> list[str]:
        assert self.workdir is not None
        if self.major >= 4:
            logging = f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}"
        else:
            logging = f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}"
        return [java, f"-Xmx{self.heap}", "-Xms256m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                logging, "-cp", f"{libs}/*"]

    def _spawn(self, java: str, libs: Path) -> None:
        """Run the broker on the (already formatted) work directory; appends to broker.log."""
        assert self.workdir is not None
        log = open(self.workdir / "broker.log", "ab")
        with log:
            self._proc = subprocess.Popen(
                self._java(java, libs) + ["kafka.Kafka", str(self.workdir / "server.properties")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.workdir, preexec_fn=die_with_parent,
            )
