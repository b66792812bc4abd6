"""A multi-broker KRaft cluster from the same harness: N combined broker+controller nodes on loopback.

Why: routing that only ever met one broker is untested routing. Pass-through splits requests per
partition leader and sends group/transaction requests to their coordinators; those paths only run
when partitions and coordinators live on different brokers.

    with KafkaCluster("3.9", brokers=3) as cluster:
        cluster.bootstrap           # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        cluster.nodes[1].kill()     # fault tests, per node (KafkaBroker API)
"""

from __future__ import annotations

import atexit
import signal
import tempfile
from pathlib import Path

from .kafka import KafkaBroker, _cluster_id, free_port
from .maven import kafka_libs, require_tool


class ClusterNode(KafkaBroker):
    """One node of a :class:`KafkaCluster`: its node id and the shared controller quorum."""

    def __init__(self, version: str, node_id: int, voters: str, **kwargs) -> None:
        super().__init__(version, **kwargs)
        self.node_id = node_id
        self.voters = voters

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        brokers = self.voters.count("@")
        internal_rf = str(min(3, brokers))
        props |= {"node.id": str(self.node_id), "controller.quorum.voters": self.voters,
                  "offsets.topic.replication.factor": internal_rf,
                  "transaction.state.log.replication.factor": internal_rf,
                  "transaction.state.log.min.isr": "1"}
        return props | self.extra_config


class KafkaCluster:
    """``brokers`` KRaft nodes forming one cluster (every node is a voter and a broker)."""

    def __init__(self, version: str = "3.9", *, brokers: int = 3, extra_config: dict[str, str] | None = None,
                 heap: str = "512m") -> None:
        ports = [(free_port(), free_port()) for _ in range(brokers)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        cluster_id = _cluster_id()
        self.nodes: list[ClusterNode] = []
        for i, (port, controller) in enumerate(ports):
            node = ClusterNode(version, i + 1, voters, extra_config=extra_config, heap=heap)
            node.port, node.controller_port, node.cluster_id = port, controller, cluster_id
            self.nodes.append(node)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def start(self) -> KafkaCluster:
        java = require_tool("java", "install a Java 17+ runtime")
        atexit.register(self.stop)
        try:
            for node in self.nodes:  # all must run before any can answer: the quorum needs a majority
                node.workdir = Path(tempfile.mkdtemp(prefix=f"kshare-kafka-{node.version}-n{node.node_id}-"))
                node._launch(java, kafka_libs(node.version))
            for node in self.nodes:
                node._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM every node at once, then wait for each: one after the other, the last nodes
        lose their controller quorum and wait out the whole stop timeout (33 s per cluster)."""
        for node in self.nodes:
            if node.running:
                node.kill(signal.SIGTERM, wait=False)
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
