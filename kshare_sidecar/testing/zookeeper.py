"""A standalone ZooKeeper for Kafka brokers in ZooKeeper mode (2.8 and 3.x), from Kafka's own jars.

Why no separate download: ``org.apache.kafka:kafka_2.13`` of every release up to 3.9 depends on
``org.apache.zookeeper:zookeeper``, so the classpath the harness resolves for the broker already
holds the ZooKeeper server of the version that release was tested with. It runs as
``QuorumPeerMain`` with one server (which starts ``ZooKeeperServerMain``, ZooKeeper's standalone
mode) on a free loopback port, in its own process group and temporary directory like a broker;
its owner (:class:`~kshare_sidecar.testing.kafka.KafkaBroker` or a
:class:`~kshare_sidecar.testing.multibroker.KafkaCluster`) starts it first and stops it last.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from .errors import HarnessError
from .process import BrokerProcess, die_with_parent, free_port

_LOG4J = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def zookeeper_answers(port: int, timeout: float = 1.0) -> bool:
    """True when ZooKeeper on loopback ``port`` answers the ``srvr`` four-letter word (the one
    ZooKeeper 3.5+ allows by default) as a serving server."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"srvr")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
    except OSError:
        return False
    return b"Mode:" in reply


class ZooKeeperServer(BrokerProcess):
    """One ZooKeeper server (standalone) for the Kafka brokers of one harness backend.

    ``libs``: the Kafka classpath directory (it holds ``zookeeper-*.jar``); ``java``: the runtime.
    """

    product = "ZooKeeper"
    log_name = "zookeeper.log"
    stop_timeout_s = 10.0

    def __init__(self, version: str, java: str, libs: Path, *, startup_timeout_s: float = 60.0,
                 keep_dir: bool | None = None) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s, keep_dir=keep_dir)
        self.version = version  # the Kafka release whose classpath it runs from
        self.java, self.libs = java, libs

    @property
    def connect(self) -> str:
        """``zookeeper.connect`` for the brokers."""
        return self.bootstrap

    def start(self) -> ZooKeeperServer:
        started = time.monotonic()
        return self._start_in(f"kshare-zookeeper-{self.version}-", self._launch, started)

    def _launch(self) -> None:
        assert self.workdir is not None
        if not any(self.libs.glob("zookeeper-*.jar")):
            raise HarnessError(f"Kafka {self.version}'s classpath ({self.libs}) has no ZooKeeper jar: this release "
                               "runs in KRaft mode only")
        self.port = self.port or free_port()
        config = self.workdir / "zookeeper.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in {
            "dataDir": self.workdir / "data",
            "clientPort": self.port,
            "clientPortAddress": "127.0.0.1",
            "maxClientCnxns": 0,
            "admin.enableServer": "false",  # its Jetty admin port would be one more port to pick
            "tickTime": 500,  # sessions of 6 s (the brokers' timeout) need ticks below 3 s
        }.items()))
        (self.workdir / "log4j.properties").write_text(_LOG4J)
        with open(self.workdir / self.log_name, "ab") as log:
            self._proc = subprocess.Popen(
                [self.java, "-Xmx128m", "-Xms32m", "-Djava.awt.headless=true",
                 f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
                 "-cp", f"{self.libs}/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.workdir, preexec_fn=die_with_parent)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise HarnessError(f"ZooKeeper (Kafka {self.version}'s) exited during start-up (code "
                                   f"{self._proc.returncode}); log tail:\n{self.log_tail()}")
            if zookeeper_answers(self.port):
                return
            time.sleep(self.ready_poll_s)
        raise HarnessError(f"ZooKeeper (Kafka {self.version}'s) did not answer within {self.startup_timeout_s:.0f} s; "
                           f"log tail:\n{self.log_tail()}")
