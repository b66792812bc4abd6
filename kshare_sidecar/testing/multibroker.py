"""A multi-broker cluster from the same harness: N brokers on loopback, in KRaft or ZooKeeper mode.

Why: routing that only ever met one broker is untested routing. Pass-through splits requests per
partition leader and sends group/transaction requests to their coordinators; those paths only run
when partitions and coordinators live on different brokers.

    with KafkaCluster("3.9", brokers=3) as cluster:
        cluster.bootstrap           # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        cluster.nodes[1].kill()     # fault tests, per node (KafkaBroker API)

In KRaft mode every node is a combined broker + controller and a voter; in ZooKeeper mode (2.8,
3.x: ``zookeeper=``, as for :class:`~.kafka.KafkaBroker`) the nodes register with one ZooKeeper,
started first and stopped last.
"""

from __future__ import annotations

import atexit
import signal
import tempfile
import time
from pathlib import Path

from .errors import HarnessError
from .kafka import KafkaBroker, _cluster_id, free_port
from .maven import kafka_libs, require_tool
from .zookeeper import ZooKeeperServer


class ClusterNode(KafkaBroker):
    """One node of a :class:`KafkaCluster`: its node id, and the shared controller quorum
    (``voters``, KRaft) or ZooKeeper (``zk_connect``)."""

    def __init__(self, version: str, node_id: int, voters: str, brokers: int, **kwargs) -> None:
        super().__init__(version, **kwargs)
        self.node_id = node_id
        self.voters = voters
        self.brokers = brokers

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        internal_rf = str(min(3, self.brokers))
        ids = {"broker.id": str(self.node_id)} if self.zookeeper else \
            {"node.id": str(self.node_id), "controller.quorum.voters": self.voters}
        props |= ids | {"offsets.topic.replication.factor": internal_rf,
                        "transaction.state.log.replication.factor": internal_rf,
                        "transaction.state.log.min.isr": "1"}
        return props | self.extra_config


class KafkaCluster:
    """``brokers`` nodes forming one cluster (KRaft: every node a voter and a broker)."""

    def __init__(self, version: str = "3.9", *, brokers: int = 3, extra_config: dict[str, str] | None = None,
                 heap: str = "512m", zookeeper: bool | None = None, share_groups: bool | None = None) -> None:
        if brokers < 1:
            raise HarnessError(f"a cluster needs at least one broker, got {brokers}")
        ports = [(free_port(), free_port()) for _ in range(brokers)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        cluster_id = _cluster_id()
        self.nodes: list[ClusterNode] = []
        for i, (port, controller) in enumerate(ports):
            node = ClusterNode(version, i + 1, voters, brokers, extra_config=extra_config, heap=heap,
                               zookeeper=zookeeper, share_groups=share_groups)
            node.port, node.cluster_id = port, cluster_id
            node.controller_port = 0 if node.zookeeper else controller
            self.nodes.append(node)
        first = self.nodes[0]
        self.version, self.zookeeper, self.share_groups = first.version, first.zookeeper, first.share_groups
        self.zk: ZooKeeperServer | None = None
        self.startup_seconds: float | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def metadata(self) -> str:
        return self.nodes[0].metadata

    @property
    def running(self) -> bool:
        """Every node runs (and ZooKeeper, in that mode)."""
        return all(n.running for n in self.nodes) and (self.zk is None or self.zk.running)

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(f"-- node {n.node_id}:\n{n.log_tail(lines)}" for n in self.nodes)

    def start(self) -> KafkaCluster:
        java = require_tool("java", "install a Java 17+ runtime")
        started = time.monotonic()
        libs = kafka_libs(self.version)
        atexit.register(self.stop)
        try:
            if self.zookeeper:
                self.zk = ZooKeeperServer(self.version, java, libs).start()
            for node in self.nodes:  # all must run before any can answer: the quorum needs a majority
                node.workdir = Path(tempfile.mkdtemp(prefix=f"kshare-kafka-{node.version}-n{node.node_id}-"))
                if self.zk is not None:
                    node.zk_connect = self.zk.connect
                node._launch(java, libs)
            for node in self.nodes:
                node._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """SIGTERM every node at once, then wait for each: one after the other, the last nodes
        lose their controller quorum and wait out the whole stop timeout (33 s per cluster).
        ZooKeeper last: a stopping broker still deregisters there."""
        for node in self.nodes:
            if node.running:
                node.kill(signal.SIGTERM, wait=False)
        for node in self.nodes:
            node.stop()
        zk, self.zk = self.zk, None
        if zk is not None:
            zk.stop()
        atexit.unregister(self.stop)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
