"""An Apache Kafka broker, in KRaft or ZooKeeper mode, started from Maven Central jars on loopback ports.

`KafkaBroker` is the one facade: ``with KafkaBroker("3.9") as broker: broker.bootstrap``.
Each broker gets a fresh temporary directory (data, config, log) that is removed on stop,
and runs in its own process group so stopping it leaves no process behind.

Releases from 2.8 to 4.4 (the backends of docs/compatibility.md): 2.8 runs with ZooKeeper only
(its KRaft mode was early access), 3.x with either (``zookeeper=``; ZooKeeper by default for 3.5,
the last line before KRaft was production-ready for most users, KRaft from 3.7), 4.x in KRaft
only. A ZooKeeper-mode broker starts its own ZooKeeper (:mod:`.zookeeper`) from the same
classpath and stops it after itself.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import time
import uuid
from pathlib import Path

from .errors import HarnessError
from .maven import kafka_libs, require_tool
from .process import BrokerProcess, die_with_parent, free_port
from .zookeeper import ZooKeeperServer

#: Pinned versions by alias: 3.9 is a backend without share groups, 4 the native reference (4.4.0,
#: share groups with dead-letter queues); 4.3 the previous share-group release, kept as a second reference.
KAFKA_VERSIONS: dict[str, str] = {"3.9": "3.9.2", "4.3": "4.3.1", "4.4": "4.4.0", "4": "4.4.0"}

#: The backends of the compatibility matrix (docs/compatibility.md), oldest first.
KAFKA_VERSIONS |= {"2.8": "2.8.2", "3.5": "3.5.2", "3.7": "3.7.2", "4.0": "4.0.1", "4.1": "4.1.1"}
#: Older than kshare supports: the backend kshare refuses at start-up (docs/compatibility.md, "Backends").
KAFKA_VERSIONS |= {"2.4": "2.4.1"}
BACKEND_VERSIONS = ("2.8.2", "3.5.2", "3.7.2", "3.9.2", "4.0.1", "4.1.1", "4.4.0")

#: The ``share.version`` feature level each share-group release is formatted with: 4.4's level 2
#: turns on its dead-letter queues (KIP-1191), which level 1 leaves off. 4.1 has share groups as a
#: preview (level 1, off unless asked); 4.0 as early access, with no feature level at all (broker
#: configs, :data:`EARLY_ACCESS_SHARE_CONFIG`).
SHARE_VERSION = {"4.1.1": 1, "4.3.1": 1, "4.4.0": 2}
EARLY_ACCESS_SHARE_CONFIG = {"group.share.enable": "true", "unstable.api.versions.enable": "true"}
#: Releases whose share groups are on unless the caller turns them off.
SHARE_GROUPS_BY_DEFAULT = frozenset({"4.3.1", "4.4.0"})

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
    """Map ``3.9`` / ``4`` / ``2.8`` ... (or a pinned full version) to the pinned release."""
    if alias in KAFKA_VERSIONS:
        return KAFKA_VERSIONS[alias]
    if alias in KAFKA_VERSIONS.values():
        return alias
    allowed = ", ".join(sorted(KAFKA_VERSIONS) + sorted(set(KAFKA_VERSIONS.values())))
    raise HarnessError(f"unknown Kafka version {alias!r}: use one of {allowed}")


def metadata_mode(version: str, zookeeper: bool | None) -> bool:
    """Whether ``version`` (a pinned release) runs with ZooKeeper: ``zookeeper`` if that release
    can, else its only mode; None picks the default (ZooKeeper up to 3.5, KRaft from 3.7)."""
    major, minor = (int(part) for part in version.split(".")[:2])
    if major >= 4:
        if zookeeper:
            raise HarnessError(f"Kafka {version} runs in KRaft mode only (4.0 removed ZooKeeper): drop --zookeeper "
                               "or choose a 3.x or 2.8 release")
        return False
    if major == 2:
        if zookeeper is False:
            raise HarnessError(f"Kafka {version} runs with ZooKeeper here (its KRaft mode is early access): drop "
                               "--kraft or choose 3.5 or later")
        return True
    return (major, minor) <= (3, 5) if zookeeper is None else zookeeper


def _cluster_id() -> str:
    """A KRaft cluster id (URL-safe base64 of a UUID). Never one starting with '-': the storage
    tool's argument parser would take it for an option (Kafka's own Uuid avoids it too)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


class KafkaBroker(BrokerProcess):
    """A single-node Kafka for tests and local development: a combined KRaft broker + controller,
    or a broker with its own ZooKeeper (``zookeeper``: :func:`metadata_mode`).

    ``extra_config`` adds or overrides broker properties. ``share_groups`` turns KIP-932 share
    groups on or off where the release has them (None: on for 4.3 and 4.4; 4.0's early access and
    4.1's preview stay off unless asked), with the share-state topic sized for one broker.
    """

    product = "Kafka"

    def __init__(
        self,
        version: str = "3.9",
        *,
        zookeeper: bool | None = None,
        share_groups: bool | None = None,
        extra_config: dict[str, str] | None = None,
        heap: str = "1g",
        startup_timeout_s: float = 120.0,
        keep_dir: bool | None = None,
    ) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s, keep_dir=keep_dir)
        self.version = resolve_version(version)
        self.major = int(self.version.split(".")[0])
        self.zookeeper = metadata_mode(self.version, zookeeper)
        if share_groups and self.major < 4:
            raise HarnessError(f"Kafka {self.version} has no share groups (KIP-932 arrived in 4.0): use 4.0 or later")
        self.share_groups = self.version in SHARE_GROUPS_BY_DEFAULT if share_groups is None else share_groups
        self.extra_config = dict(extra_config or {})
        self.heap = heap
        self.controller_port = 0
        self.cluster_id: str | None = None  # set by multibroker.KafkaCluster: one id for every node
        self.format_args: list[str] = []  # extra `kafka-storage format` arguments
        #: ZooKeeper mode: the server this broker registers with (its own, or its cluster's)
        self.zk_connect = ""
        self.own_zookeeper: ZooKeeperServer | None = None

    # -- facade (bootstrap, running, stop, kill, log_tail: BrokerProcess) ----------------
    @property
    def metadata(self) -> str:
        """``"zookeeper"`` or ``"kraft"``: where this broker keeps its cluster metadata."""
        return "zookeeper" if self.zookeeper else "kraft"

    def start(self) -> KafkaBroker:
        java = require_tool("java", "install a Java 17+ runtime (for example `apt-get install openjdk-17-jre`)")
        started = time.monotonic()
        libs = kafka_libs(self.version)
        return self._start_in(f"kshare-kafka-{self.version}-", lambda: self._launch(java, libs), started)

    def stop(self) -> None:
        """The broker first, then its own ZooKeeper (a broker stopping still talks to it)."""
        super().stop()
        zk, self.own_zookeeper = self.own_zookeeper, None
        if zk is not None:
            zk.stop()

    def restart(self, *, down_s: float = 0.0, sig: signal.Signals = signal.SIGKILL) -> None:
        """Kill the broker (``sig``; a no-op if :meth:`kill` already did), wait ``down_s``, start it
        again on the same ports and data: a backend outage for fault tests. ZooKeeper stays up."""
        self.kill(sig)
        time.sleep(down_s)
        self._spawn(require_tool("java", "install a Java 17+ runtime"), kafka_libs(self.version))
        self._wait_ready()

    # -- internals ----------------------------------------------------------------------
    def _properties(self) -> dict[str, str]:
        assert self.workdir is not None
        props = self._zookeeper_properties() if self.zookeeper else self._kraft_properties()
        props |= {
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
            if self.version not in SHARE_VERSION:  # 4.0: early access, switched on by broker configs
                props |= EARLY_ACCESS_SHARE_CONFIG
        return props | self.extra_config

    def _kraft_properties(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }

    def _zookeeper_properties(self) -> dict[str, str]:
        return {
            "broker.id": "1",
            "zookeeper.connect": self.zk_connect,
            # A broker killed for a fault test leaves its registration behind until its session
            # expires; the restarted broker waits for that, so keep it short (ZooKeeper's default
            # bounds: 2 to 20 ticks of the harness's 500 ms).
            "zookeeper.session.timeout.ms": "6000",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
        }

    def _launch(self, java: str, libs: Path) -> None:
        assert self.workdir is not None
        if self.zookeeper and not self.zk_connect:  # a cluster node (multibroker.py) shares its cluster's
            self.own_zookeeper = ZooKeeperServer(self.version, java, libs, keep_dir=self.keep_dir).start()
            self.zk_connect = self.own_zookeeper.connect
        if not self.port:  # a cluster node (multibroker.py) has its ports
            self.port = free_port()
        if not (self.zookeeper or self.controller_port):
            self.controller_port = free_port()
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self._properties().items()))
        if self.major >= 4:
            (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        else:
            (self.workdir / "log4j.properties").write_text(_LOG4J1)
        if not self.zookeeper:
            self._format(java, libs, config)
        self._spawn(java, libs)

    def _format(self, java: str, libs: Path, config: Path) -> None:
        """`kafka-storage format`: a KRaft node's metadata log, with the share-group feature level."""
        format_cmd = self._java(java, libs) + ["kafka.tools.StorageTool", "format", "-t",
                                               self.cluster_id or _cluster_id(), "-c", str(config)]
        if self.version in SHARE_VERSION:  # 4.1+: share groups are a feature level (0: off)
            format_cmd += ["--feature", f"share.version={SHARE_VERSION[self.version] if self.share_groups else 0}"]
        format_cmd += self.format_args  # e.g. --add-scram for SCRAM users (tests/e2e/test_secured_backend.py)
        fmt = subprocess.run(format_cmd, capture_output=True, text=True, timeout=120)
        if fmt.returncode != 0:
            lines = (fmt.stdout + fmt.stderr).strip().splitlines()
            # the exception's own line says why; the stack's last lines below it never do
            why = [ln.strip() for ln in lines if not ln.lstrip().startswith("at ") and ln.strip()][-1:]
            raise HarnessError(f"formatting the Kafka {self.version} storage failed: {' | '.join(why or lines[-3:])}")

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
