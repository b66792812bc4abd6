"""A 3-broker backend under a share-consume: the leader of a consumed partition is
restarted with a controlled shutdown (SIGTERM), then the leader of a state-topic partition is
SIGKILLed and restarted — the state topic at replication factor 3, the sidecar never restarted.
Nothing may be lost: every record delivered and acknowledged, read from what the clients saw and
from the state topic's lag at the end."""

from __future__ import annotations

import signal
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.conftest import SidecarProcess, Target, Worker, wait_until
from tests.support import unique

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.optin("cluster-faults")]  # ~3.5 min, 3 brokers

RECORDS, PARTITIONS, STATE_TOPIC = 200_000, 4, "__kshare_state"


@pytest.fixture(scope="module")
def cluster(kafka_39_cluster3):
    return kafka_39_cluster3


def _leader(admin: AdminClient, topic: str, partition: int) -> int:
    deadline = time.monotonic() + 30
    while True:
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        leader = meta.partitions[partition].leader if meta.partitions else -1
        if leader >= 0:
            return leader
        assert time.monotonic() < deadline, f"{topic}-{partition} has no leader"
        time.sleep(0.2)


def _node(cluster, node_id: int):
    return next(n for n in cluster.nodes if n.node_id == node_id)


def test_broker_restarts_under_a_share_consume_lose_nothing(cluster, tmp_path):
    backend = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic, group = unique("c3"), unique("c3-g")
    backend.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
    _leader(backend, topic, PARTITIONS - 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, value=b"x" * 100, key=str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:  # acks=all to 3 replicas on 2 cores: let the queue drain
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0

    sc = SidecarProcess(cluster.bootstrap, tmp_path / "sidecar.log",
                        env={"KSHARE_STATE_TOPIC_REPLICATION_FACTOR": "3", "KSHARE_STATE_TOPIC": STATE_TOPIC}).start()
    workers = []
    try:
        target = Target("kshare", sc.bootstrap, cluster.bootstrap)
        # ~1 ms of work per record: three consumers take about a minute, so both faults land mid-run
        workers = [Worker(target, group, topic, tmp_path / f"w{i}.jsonl", mode="explicit", max_poll_records=500,
                          work_ms=1.0, idle_s=25, max_s=400) for i in range(3)]

        def acked() -> set[tuple[int, int]]:
            return {(e["p"], e["o"]) for w in workers for e in w.events() if e["ev"] == "ack" and e["ok"]}

        assert wait_until(lambda: len(acked()) > RECORDS // 5, 120), sc.log_tail()
        consumed_leader = _node(cluster, _leader(backend, topic, 0))
        consumed_leader.restart(down_s=2, sig=signal.SIGTERM)  # controlled shutdown, then back
        at_first = len(acked())

        assert at_first < RECORDS * 0.6, "the consumers were too fast for the faults: the test proves nothing"
        assert wait_until(lambda: len(acked()) > at_first + RECORDS // 20, 180), sc.log_tail()  # it recovered
        state_leader = _node(cluster, _leader(backend, STATE_TOPIC, 0))
        state_leader.restart(down_s=2, sig=signal.SIGKILL)
        at_second = len(acked())
        assert at_second < RECORDS, "everything was consumed before the second fault: the test proves nothing"

        for w in workers:
            assert w.wait(420) == 0, w.stderr()
        assert sc.proc is not None and sc.proc.poll() is None, "the sidecar must survive broker restarts"
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.terminate()
        sc.stop()
    got = acked()
    missing = {(i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS)} - got
    assert not missing, f"{len(missing)} records never acknowledged, e.g. {sorted(missing)[:5]}"
    print(f"\n[kshare, 3 brokers] {RECORDS} records acknowledged; faults after {at_first} and {at_second} acks")
