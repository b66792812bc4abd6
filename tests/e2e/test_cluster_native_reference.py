"""The native reference for ``test_sidecar_cluster.py``'s kill -9 figures (opt-in, ``make
test-sidecar-cluster``): a 3-broker Kafka 4.3.1 with share groups, the same consumers and load, one
broker SIGKILLed. Its figures are printed beside the sidecars' so docs/deployment.md can compare."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import Target, Worker, wait_until
from tests.e2e.test_sidecar_cluster import (
    LONG,
    SESSION_MS,
    WORK_MS,
    JavaWorker,
    accepted,
    baseline_gap,
    by_kind,
    check_clients,
    gaps,
    java_command,
    produce_many,
    unfinished,
)
from tests.support import unique

pytestmark = pytest.mark.kafka


def _native_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})  # quiet about the dead broker
    md = admin.list_topics(topic, timeout=10)
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


@LONG
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_native_kafka_43_broker_kill_9_under_200k(tmp_path):
    """The reference for the kill -9 figures above: a 3-broker Kafka 4.3.1 (share groups native,
    topic and internal topics at replication factor 3), the same consumers and load, one broker —
    leader of some partitions — SIGKILLed. ``broker.session.timeout.ms`` = the sidecars'
    cluster.session.timeout.ms, so both detect the death on the same timer."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kshare_sidecar.testing.multibroker import KafkaCluster
    from tests.support import set_group_config

    records, partitions = 200_000, 12
    config = {"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000",
              "default.replication.factor": "3", "min.insync.replicas": "1",
              "share.coordinator.state.topic.replication.factor": "3",
              "share.coordinator.state.topic.min.isr": "1",
              "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000"}
    java = java_command(tmp_path)
    with KafkaCluster("4", brokers=3, extra_config=config) as kafka:
        topic, group = unique("nat"), unique("nat-g")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})  # kept: its futures need the handle
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=3)])[topic].result(timeout=60)
        set_group_config(kafka.bootstrap, group, {"share.auto.offset.reset": "earliest"})
        produce_many(kafka.bootstrap, topic, records, partitions)
        workers: list = []
        try:
            for node in kafka.nodes:
                workers.append(Worker(Target("native", node.bootstrap, kafka.bootstrap), group, topic,
                                      tmp_path / f"w{node.node_id}.jsonl", mode="explicit", max_poll_records=100,
                                      work_ms=WORK_MS, idle_s=40, grace_s=60, max_s=900))
            if java is not None:
                workers.append(JavaWorker(java, kafka.nodes[0].bootstrap, group, topic, tmp_path / "java.out",
                                          idle_ms=40_000, max_ms=900_000, work_us=int(WORK_MS * 1000)))
            assert wait_until(lambda: sum(accepted(workers).values()) > records // 5, 300)
            leaders = _native_leaders(kafka.bootstrap, topic)
            victim = max((2, 3), key=lambda n: sum(1 for v in leaders.values() if v == n))
            lost = unfinished(workers, {p for p, n in leaders.items() if n == victim}, records // partitions)
            assert lost, f"broker {victim} leads no unfinished partition: {leaders}"
            t_kill = time.time()
            kafka.nodes[victim - 1].kill()
            at = sum(accepted(workers).values())
            elected: dict[int, float] = {}

            def moved() -> bool:
                try:
                    now = _native_leaders(kafka.nodes[0].bootstrap, topic)
                except Exception:  # noqa: BLE001 - a metadata answer during the failover
                    return False
                for p in lost:
                    if p not in elected and now.get(p, victim) not in (victim, -1):
                        elected[p] = time.time()
                return len(elected) == len(lost)

            assert wait_until(moved, 120, step=0.1)
            assert wait_until(lambda: len(gaps(workers, lost, t_kill)) == len(lost), 180), gaps(workers, lost, t_kill)
            client_gaps = gaps(workers, lost, t_kill)
            kinds = by_kind(workers, lost, t_kill)
            baseline = baseline_gap(workers, lost, t_kill)
            for w in workers:
                assert w.wait(960) == 0, w.stderr()
        finally:
            for w in workers:
                if w.proc.poll() is None:
                    w.proc.kill()
    check_clients(workers, records, partitions, {p: [t] for p, t in elected.items()})
    served = {p: round(t - t_kill, 2) for p, t in sorted(elected.items())}
    print(f"\n[native] kill -9 of Kafka 4.3 broker {victim} after {at} acks: new leaders of its partitions "
          f"{sorted(lost)} in metadata {served} s after the kill (broker.session.timeout.ms {SESSION_MS}); clients "
          f"accepted records of them again after {client_gaps} s (max {max(client_gaps.values())}; before the kill "
          f"a partition already waited up to {baseline} s for its turn; per client kind: {kinds}); Java consumer: "
          f"{'yes' if java else 'no javac'}; {records} records accepted exactly once")
