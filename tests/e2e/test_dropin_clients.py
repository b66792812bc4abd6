"""The sidecar as the only bootstrap: third-party clients do everything through it.

Admin operations, transactions, plain consumer groups, Kafka's own command-line tools and share
consumers — each against ``kshare sidecar run`` in front of Kafka 3.9, with no other bootstrap.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic, OffsetSpec, ResourceType)

from kshare_sidecar.protocol.blocking import BlockingConnection
from kshare_sidecar.testing.tools import run_java_tool
from tests.support import api_versions

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

GROUPS_COMMAND = "org.apache.kafka.tools.GroupsCommand"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _wait(futures, timeout: float = 60):
    return {k: f.result(timeout) for k, f in futures.items()}


def _create(admin: AdminClient, topic: str, partitions: int) -> None:
    _wait(admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30))
    deadline = time.monotonic() + 30
    while topic not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} never appeared in Metadata"
        time.sleep(0.2)


def _produce(bootstrap: str, topic: str, values: list[bytes], **conf) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    failed = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and not failed, failed[:3]


def _poll(consumer: Consumer, topic: str, want: int, timeout: float = 60,
          positions: dict[int, int] | None = None) -> list[bytes]:
    """Values of ``want`` records of ``topic``; ``positions`` gets each partition's next offset."""
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
            if positions is not None:
                positions[m.partition()] = max(positions.get(m.partition(), 0), m.offset() + 1)
    return got


def _share_consume(bootstrap: str, group: str, topic: str, want: int, timeout: float = 60) -> list[bytes]:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < want and time.monotonic() < deadline:
            for m in consumer.poll(0.5) or []:
                if m.error() is None:
                    seen.append(m.value())
        quiet = time.monotonic() + 3  # nothing more must come (e.g. aborted records)
        while time.monotonic() < quiet:
            seen += [m.value() for m in consumer.poll(0.5) or [] if m.error() is None]
        consumer.commit_sync(30)
    finally:
        consumer.close()
    return seen


def _set_group_configs(admin: AdminClient, group: str, configs: dict[str, str]) -> None:
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    _wait(admin.incremental_alter_configs([resource]))


def test_admin_client_topics_configs_records(sidecar):
    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    topic = _name("dropin-admin")
    _create(admin, topic, 3)
    _wait(admin.create_partitions([NewPartitions(topic, 4)]))
    deadline = time.monotonic() + 30
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) != 4:
        assert time.monotonic() < deadline
        time.sleep(0.2)

    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    _wait(admin.incremental_alter_configs([change]))
    (configs,) = _wait(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])).values()
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"

    # to partition 0 explicitly: keyless records go to one sticky random partition of the four
    producer = Producer({"bootstrap.servers": sidecar.bootstrap})
    for i in range(10):
        producer.produce(topic, b"r%d" % i, partition=0)
    assert producer.flush(60) == 0
    tp = TopicPartition(topic, 0)
    (latest,) = _wait(admin.list_offsets({tp: OffsetSpec.latest()})).values()
    assert latest.offset > 0
    _wait(admin.delete_records([TopicPartition(topic, 0, latest.offset)]))
    (earliest,) = _wait(admin.list_offsets({tp: OffsetSpec.earliest()})).values()
    assert earliest.offset == latest.offset

    _wait(admin.delete_topics([topic], operation_timeout=30))
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the deleted topic is still in Metadata"
        time.sleep(0.2)


def test_transactions_and_a_read_committed_share_group(sidecar):
    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    topic, group = _name("dropin-txn"), _name("dropin-rc")
    _create(admin, topic, 2)
    _set_group_configs(admin, group, {"share.isolation.level": "read_committed",
                                      "share.auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": sidecar.bootstrap, "transactional.id": _name("txn")})
    producer.init_transactions(60)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, f"{outcome}-{i}".encode())
        producer.flush(30)
        (producer.commit_transaction if outcome == "commit" else producer.abort_transaction)(60)

    seen = _share_consume(sidecar.bootstrap, group, topic, want=100)
    assert len(seen) >= 100  # two committed transactions of the same 50 values
    assert set(seen) == {f"commit-{i}".encode() for i in range(50)}  # nothing aborted


def test_consumer_groups_and_share_groups_side_by_side(sidecar):
    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    topic, plain, share = _name("dropin-groups"), _name("plain"), _name("share")
    _create(admin, topic, 3)
    values = [b"v%d" % i for i in range(300)]
    _produce(sidecar.bootstrap, topic, values, **{"linger.ms": 5})

    consumer = Consumer({"bootstrap.servers": sidecar.bootstrap, "group.id": plain,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    positions: dict[int, int] = {}
    got = _poll(consumer, topic, len(values), positions=positions)
    assert sorted(got) == sorted(values)
    # the offsets consumed, committed explicitly: commit() without them commits the positions of the
    # assignment at that moment, and a rejoin right after the last poll (the group's metadata
    # settling) left two partitions without one (-1001) on a quiet CI run
    offsets = [TopicPartition(topic, p, o) for p, o in sorted(positions.items())]
    deadline = time.monotonic() + 30
    while True:
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            break
        except KafkaException:  # REBALANCE_IN_PROGRESS while that rejoin runs: the client commits again
            if time.monotonic() > deadline:
                raise
            consumer.poll(0.5)
    committed = {tp.partition: tp.offset for tp in
                 consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)}
    consumer.close()
    # every partition that had records has their end committed; the producer's sticky partitioner
    # may have put all 300 in one or two batches, and a partition without records has no commit
    assert {p: committed[p] for p in positions} == positions and sum(positions.values()) == len(values)
    assert all(committed[p] < 0 for p in range(3) if p not in positions)

    _set_group_configs(admin, share, {"share.auto.offset.reset": "earliest"})
    # a share group delivers at least once: a record whose lock expires on a loaded machine comes again
    assert set(_share_consume(sidecar.bootstrap, share, topic, want=len(values))) == set(values)

    listed = run_java_tool(GROUPS_COMMAND, ["--bootstrap-server", sidecar.bootstrap, "--list"])
    assert listed.returncode == 0, listed.output
    rows = {line.split()[0]: line.split()[1:] for line in listed.stdout.splitlines()[1:] if line.strip()}
    assert rows[plain][0].lower() == "classic" and rows[share][0].lower() == "share", listed.output


def test_produce_right_after_create_topic_is_written_once_and_stays_on_the_sidecar(sidecar):
    """Kafka answers NOT_LEADER_OR_FOLLOWER until a new partition is loaded, with a KIP-951 leader
    hint naming the backend broker. Forwarded as it was, librdkafka renamed its broker to the
    backend's address, dropped the sidecar connection with Produce requests in flight and sent
    them again: 300 records became 380-575 in about one round of three (CI saw it as duplicates)."""
    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    values = [b"v%d" % i for i in range(300)]
    for _ in range(8):
        topic = _name("dropin-fresh")
        _wait(admin.create_topics([NewTopic(topic, 3, 1)], operation_timeout=30))  # and produce at once
        moved: list[str] = []
        producer = Producer({"bootstrap.servers": sidecar.bootstrap, "linger.ms": 5, "enable.idempotence": False,
                             "debug": "broker", "log_level": 7,
                             "logger": _Catch(moved, "hostname updated")})
        failed: list = []
        for value in values:
            producer.produce(topic, value, on_delivery=lambda err, _m: failed.append(err) if err else None)
        assert producer.flush(60) == 0 and not failed, failed[:3]
        assert not moved, moved[:1]  # the producer never left the sidecar
        consumer = Consumer({"bootstrap.servers": sidecar.backend, "group.id": _name("count")})
        try:
            written = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3))
        finally:
            consumer.close()
        assert written == len(values)


class _Catch:
    """A librdkafka logger that keeps the lines containing ``needle``."""

    def __init__(self, into: list[str], needle: str) -> None:
        self.into, self.needle = into, needle

    def log(self, _level, fmt, *args) -> None:
        line = fmt % args if args else str(fmt)
        if self.needle in line:
            self.into.append(line)

    debug = info = warning = error = critical = exception = log


def test_partitions_added_through_the_sidecar_are_in_its_metadata_at_once(sidecar):
    """CreatePartitions, then a new producer writes to a new partition a moment later (librdkafka's
    0112 and 0171 tests do this): the sidecar's topic cache is up to 5 s old, so Metadata re-reads a
    topic when the backend's own answer has more partitions (it used to say the old count)."""
    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    topic = _name("dropin-grow")
    _create(admin, topic, 1)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 1  # cached now
    _wait(admin.create_partitions([NewPartitions(topic, 3)]))
    producer = Producer({"bootstrap.servers": sidecar.bootstrap})
    errors: list = []
    producer.produce(topic, b"to-2", partition=2, on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(30) == 0 and errors == [None], errors


def test_kafka_topic_command_through_the_sidecar(sidecar):
    topic = _name("dropin-tool")
    base = ["--bootstrap-server", sidecar.bootstrap]
    created = run_java_tool(TOPIC_COMMAND, base + ["--create", "--topic", topic, "--partitions", "2"])
    assert created.returncode == 0 and f"Created topic {topic}" in created.stdout, created.output
    described = run_java_tool(TOPIC_COMMAND, base + ["--describe", "--topic", topic])
    assert described.returncode == 0, described.output
    assert described.stdout.count("Leader: 1") == 2, described.output  # the sidecar leads every partition
    deleted = run_java_tool(TOPIC_COMMAND, base + ["--delete", "--topic", topic])
    assert deleted.returncode == 0, deleted.output


def test_api_versions_never_offer_what_the_backend_lacks(sidecar, kafka_39):
    front = offered_within_the_backend(sidecar.bootstrap, kafka_39.bootstrap)
    assert {0, 1, 2, 8, 9, 11, 19, 20, 22, 24, 26, 37} <= set(front)


def _features(bootstrap: str) -> dict[str, str]:
    """``kafka-features.sh describe``: feature name -> its supported and finalized levels."""
    described = run_java_tool(FEATURE_COMMAND, ["--bootstrap-server", bootstrap, "describe"])
    assert described.returncode == 0, described.output
    out = {}
    for line in described.stdout.splitlines():
        if line.startswith("Feature:"):
            name, rest = line.split()[1], line.split(None, 2)[2]
            out[name] = " ".join(rest.split("Epoch:")[0].split())  # the epoch is the backend's
    return out


def test_kafka_features_through_the_sidecar(sidecar, kafka_39):
    """The backend's features pass through (clients decide on transaction.version or group.version
    from them), and share.version is the sidecar's: it serves share groups with dead-letter queues
    (Kafka 4.4 finalizes 2)."""
    front, back = _features(sidecar.bootstrap), _features(kafka_39.bootstrap)
    assert "share.version" not in back
    assert front.pop("share.version") == "SupportedMinVersion: 0 SupportedMaxVersion: 2 FinalizedVersionLevel: 2"
    assert front == back and "metadata.version" in back


def offered_within_the_backend(sidecar: str, backend: str) -> dict[int, tuple[int, int]]:
    """The sidecar's ApiVersions, checked: every API it does not serve itself is one the backend
    serves, within the backend's versions; no broker-to-broker API."""
    front, back = api_versions(sidecar), api_versions(backend)
    own = {3, 10, 17, 18, 36, 76, 77, 78, 79, 90, 91, 92}  # served by the sidecar whatever the backend has
    for key, (lo, hi) in front.items():
        if key in own:
            continue
        assert key in back, f"api key {key} advertised but the backend lacks it"
        assert back[key][0] <= lo and hi <= back[key][1], f"api key {key}: {lo}..{hi} outside {back[key]}"
    for key in (4, 5, 6, 7):  # broker-to-broker APIs are never offered
        assert key not in front
    return front


def test_a_producer_with_its_own_backend_bootstrap_still_works(sidecar, kafka_39):
    """Pass-through is additive: records written straight to the backend are share-consumed."""
    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    topic, group = _name("dropin-direct"), _name("direct")
    _create(admin, topic, 1)
    _set_group_configs(admin, group, {"share.auto.offset.reset": "earliest"})
    _produce(kafka_39.bootstrap, topic, [b"d%d" % i for i in range(20)])
    assert set(_share_consume(sidecar.bootstrap, group, topic, want=20)) == {b"d%d" % i for i in range(20)}


def test_unknown_group_errors_come_from_the_backend(sidecar):
    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    (deleted,) = admin.delete_consumer_groups([_name("never-existed")], request_timeout=30).values()
    with pytest.raises(KafkaException) as exc:
        deleted.result(30)
    assert exc.value.args[0].name() == "GROUP_ID_NOT_FOUND"


def test_consumer_protocol_group_through_a_sidecar_on_kafka_4(native_kafka, tmp_path):
    """KIP-848 (`group.protocol=consumer`) needs a backend that has it: kshare in front of Kafka 4.3
    forwards ConsumerGroupHeartbeat to the backend's coordinator."""
    from tests.e2e.conftest import SidecarProcess

    sc = SidecarProcess(native_kafka.bootstrap, tmp_path / "sidecar.log").start()
    try:
        admin = AdminClient({"bootstrap.servers": sc.bootstrap})
        topic = _name("dropin-848")
        _create(admin, topic, 2)
        values = [b"k%d" % i for i in range(100)]
        _produce(sc.bootstrap, topic, values)
        consumer = Consumer({"bootstrap.servers": sc.bootstrap, "group.id": _name("g848"),
                             "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        got = _poll(consumer, topic, len(values))
        consumer.close()
        assert sorted(got) == sorted(values)
        _produce_v13_by_topic_id(sc, native_kafka.bootstrap, topic)
        # Every feature of Kafka 4.3 (transaction.version 2, group.version 1, ...) through the sidecar
        assert _features(sc.bootstrap) == _features(native_kafka.bootstrap)
    finally:
        sc.stop()


def _produce_v13_by_topic_id(sc, backend: str, topic: str) -> None:
    """Produce v13 (Kafka 4.1+) names topics by id. Through a sidecar on such a backend a record
    reaches the user topic, and the state topic stays out of reach by id as by name (the sidecar
    used to read v13 frames as names and fail every Produce; franz-go's suite found it)."""
    import datetime

    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.produce.v13.request import PartitionProduceData, ProduceRequest, TopicProduceData

    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from kshare_sidecar.protocol.address import parse_host_port

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 16)
    builder.append(0, timestamp=None, key=None, value=b"v13", headers=[])
    batch = bytes(builder.build())

    def topic_id(bootstrap: str, name: str) -> uuid.UUID:
        host, port = parse_host_port(bootstrap)
        with BlockingConnection(host, port, timeout=30, client_id="t") as conn:
            answer = conn.call(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=name),),
                                               allow_auto_topic_creation=False,
                                               include_topic_authorized_operations=False))
        (found,) = answer.topics
        return found.topic_id

    def produce(to: uuid.UUID) -> int:
        request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                                 topic_data=(TopicProduceData(topic_id=to, partition_data=(
                                     PartitionProduceData(index=0, records=batch),)),))
        host, port = parse_host_port(sc.bootstrap)
        with BlockingConnection(host, port, timeout=30, client_id="t") as conn:
            answer = conn.call(request)
        (t,) = answer.responses
        return int(t.partition_responses[0].error_code)

    assert produce(topic_id(sc.bootstrap, topic)) == ErrorCode.none
    state = sc.env["KSHARE_STATE_TOPIC"]
    assert produce(topic_id(backend, state)) == ErrorCode.invalid_topic_exception


def test_authorized_operations_are_those_of_a_broker_without_an_authorizer(target):
    """librdkafka's 0081: DescribeTopics (Metadata) and DescribeCluster asked with their authorized
    operations. Without an authorizer Kafka answers every operation the resource type supports (8
    for a topic, 7 for the cluster); through the sidecar they were never filled in. Now the
    backend's values are passed on (with passthrough.credentials = sidecar everything forwarded
    runs as the sidecar's principal, whose operations the backend computes)."""
    from confluent_kafka import TopicCollection

    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    topic = _name("ops")
    _create(AdminClient({"bootstrap.servers": target.backend}), topic, 1)
    (described,) = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True).values()
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert {op.name for op in described.result(30).authorized_operations or ()} == {
        "READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}, target.name
    assert {op.name for op in cluster.authorized_operations or ()} == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}
    # not asked: not provided, on both
    (plain,) = admin.describe_topics(TopicCollection([topic])).values()
    assert not plain.result(30).authorized_operations
    assert not admin.describe_cluster().result(30).authorized_operations
