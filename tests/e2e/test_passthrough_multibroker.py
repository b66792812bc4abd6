"""Pass-through in front of a 3-broker Kafka 3.9 cluster: requests that span partition leaders are
split and merged, group and transaction requests reach their coordinators — with third-party
clients bootstrapped to the sidecar only (confluent-kafka producer, consumers, admin, share
consumer)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.e2e.conftest import SidecarProcess
from tests.support import assert_quiet_log, share_consume, unique

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(420)]

PARTITIONS, RECORDS = 6, 3000


@pytest.fixture(scope="module")
def cluster(kafka_39_cluster3):
    return kafka_39_cluster3


def _consume(bootstrap: str, topic: str, want: int, **conf) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("mb-g"), "auto.offset.reset": "earliest",
                         **conf})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    while len(got) < want and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    quiet = time.monotonic() + 2
    while time.monotonic() < quiet:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.close()  # auto-commit: the offsets go to the group coordinator through the sidecar
    return got


def test_split_and_merged_requests_across_three_brokers(cluster, tmp_path):
    sc = SidecarProcess(cluster.bootstrap, tmp_path / "sidecar.log").start()
    try:
        admin = AdminClient({"bootstrap.servers": sc.bootstrap})
        topic, txn_topic = unique("mb"), unique("mb-txn")
        for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1), NewTopic(txn_topic, 3, 1)]).values():
            f.result(60)
        deadline = time.monotonic() + 30
        while not {topic, txn_topic} <= set(admin.list_topics(timeout=10).topics):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        backend = AdminClient({"bootstrap.servers": cluster.bootstrap})
        deadline = time.monotonic() + 30
        while True:  # every broker's metadata learns the new topic a moment after creation
            parts = backend.list_topics(topic, timeout=10).topics[topic].partitions
            leaders = {p.leader for p in parts.values() if p.leader >= 0}
            if len(parts) == PARTITIONS and len(leaders) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(leaders) >= 2, f"the backend put every partition on one broker: {leaders}"

        values = [b"mb-%d" % i for i in range(RECORDS)]
        # idempotent, as Kafka clients are by default since 3.0: a retry under load (CI once saw
        # 1,000 duplicates from a non-idempotent run) cannot write a batch twice
        producer = Producer({"bootstrap.servers": sc.bootstrap, "linger.ms": 10, "enable.idempotence": True})
        for i, v in enumerate(values):
            producer.produce(topic, v, partition=i % PARTITIONS)
        assert producer.flush(60) == 0

        offsets = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)})
        assert sum(f.result(30).offset for f in offsets.values()) == RECORDS

        assert sorted(_consume(sc.bootstrap, topic, RECORDS)) == sorted(values)

        txn = Producer({"bootstrap.servers": sc.bootstrap, "transactional.id": unique("mb-tx")})
        txn.init_transactions(60)
        for outcome in ("commit", "abort"):
            txn.begin_transaction()
            for i in range(90):
                txn.produce(txn_topic, f"{outcome}-{i}".encode(), partition=i % 3)
            txn.flush(30)
            (txn.commit_transaction if outcome == "commit" else txn.abort_transaction)(60)
        committed = _consume(sc.bootstrap, txn_topic, 90, **{"isolation.level": "read_committed"})
        assert sorted(committed) == sorted(f"commit-{i}".encode() for i in range(90))

        got = share_consume(sc.bootstrap, unique("mb-share"), topic, RECORDS, timeout_s=120,
                            extra={"share.acknowledgement.mode": "implicit"})
        assert {v for v, _ in got} == set(values)

        deleted = admin.delete_records([TopicPartition(topic, p, 10) for p in range(PARTITIONS)])
        for f in deleted.values():
            f.result(30)
        earliest = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.earliest() for p in range(PARTITIONS)})
        assert {f.result(30).offset for f in earliest.values()} == {10}
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    assert "Traceback" not in log


def _leaders(cluster, topic: str, partitions: int) -> dict[int, int]:
    """The topic's leaders once every live broker's metadata agrees on all of them (a broker learns
    a new topic a moment after creation; asking one broker only raced with the others)."""
    admins = [AdminClient({"bootstrap.servers": n.bootstrap}) for n in cluster.nodes if n.running]
    deadline = time.monotonic() + 30
    while True:
        views = []
        for admin in admins:
            parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
            views.append({p: m.leader for p, m in parts.items() if m.leader >= 0})
        if all(len(v) == partitions and v == views[0] for v in views) or time.monotonic() > deadline:
            return views[0]
        time.sleep(0.2)


@pytest.mark.optin("faults")  # a leader killed: `make test-faults`
def test_acks0_then_leader_killed_mid_produce(cluster, tmp_path):
    """acks=0 frames (no answer) split per leader; then the leader of some partitions is SIGKILLed
    while an acks=all producer runs: the sidecar must re-learn leaders (NOT_LEADER_OR_FOLLOWER is
    retriable) and every acks=all record arrives, read back through the sidecar."""
    sc = SidecarProcess(cluster.bootstrap, tmp_path / "sidecar.log").start()
    try:
        admin = AdminClient({"bootstrap.servers": sc.bootstrap})
        topic = unique("mb-fault")
        for f in admin.create_topics([NewTopic(topic, PARTITIONS, 3)]).values():
            f.result(60)
        leaders = _leaders(cluster, topic, PARTITIONS)
        assert len(set(leaders.values())) >= 2, leaders

        fire = Producer({"bootstrap.servers": sc.bootstrap, "acks": 0, "linger.ms": 5})
        for i in range(600):
            fire.produce(topic, b"zero-%d" % i, partition=i % PARTITIONS)
        assert fire.flush(30) == 0
        deadline = time.monotonic() + 30
        while True:  # acks=0: nothing answers; the records show up in the log end offsets
            ends = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)})
            try:
                total = sum(f.result(30).offset for f in ends.values())
            except KafkaException as exc:  # a broker that has not learned the new topic yet: retriable
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                    raise
                total = -1
            if total >= 600 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert total == 600

        errors: list[KafkaError] = []
        delivered: list[bytes] = []

        def on_delivery(err, msg) -> None:
            (errors.append(err) if err else delivered.append(msg.value()))

        producer = Producer({"bootstrap.servers": sc.bootstrap, "enable.idempotence": True, "acks": "all",
                             "message.timeout.ms": 120000, "error_cb": errors.append})
        for i in range(500):
            producer.produce(topic, b"before-%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
        assert producer.flush(60) == 0
        mark = sc.log_path.stat().st_size
        victim = leaders[0]
        cluster.nodes[victim - 1].kill()
        for i in range(500):
            producer.produce(topic, b"after-%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
            if i % 50 == 0:
                producer.poll(0)
        assert producer.flush(120) == 0, "acks=all records not delivered after the leader died"
        assert sc.proc.poll() is None, "the sidecar died"
        assert not [e for e in errors if e.fatal() or "UNKNOWN_SERVER_ERROR" in e.str()], errors
        assert len(delivered) == 1000
        moved = _leaders(cluster, topic, PARTITIONS)
        assert victim not in moved.values(), moved

        seen = set(_consume(sc.bootstrap, topic, 1600))
        assert set(delivered) <= seen, f"{len(set(delivered) - seen)} acks=all records lost"
        fault_log = sc.log_path.read_text(errors="replace")[mark:]
    finally:
        sc.stop()
    assert_quiet_log(fault_log)
