"""kshare on tansu 0.6.0, a Kafka-compatible broker that is not Apache Kafka.

The scenarios are the ones the suite runs on Kafka 3.9, called here with a sidecar in front of
tansu (``tansu_sidecar``, tests/e2e/conftest.py: ``state.write.mode=fenced``, as tansu has no
EndTxn, and ``state.write.refresh.ms=0``, as its libSQL engine panics on the refresh). What passes
and what does not, and why (read in tansu's sources): docs/compatibility.md, "Tansu". Opt-in —
``make test-tansu`` runs it (``pytest --run tansu``) and builds tansu if missing.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   OffsetSpec, ResourceType)

from kshare_sidecar.testing.tansu import TansuBroker, missing_reason, tansu_binary
from tests.e2e import test_dropin_clients as dropin
from tests.e2e import test_fencing_faults as fencing
from tests.e2e import test_java_consumer as java
from tests.e2e import test_share_consumers as share
from tests.e2e.conftest import TANSU_SIDECAR_ENV, SidecarProcess, Target
from tests.e2e.test_java_consumer import java_consumer  # noqa: F401 - the fixture, for the Java scenario
from tests.e2e.test_sidecar_restart import restart_mid_run
from tests.support import unique


def _skip_reason() -> str | None:
    return None if tansu_binary() is not None else missing_reason()


pytestmark = [pytest.mark.kafka, pytest.mark.optin("tansu"),
              pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


@pytest.fixture
def target(tansu_sidecar) -> Target:
    return Target("tansu", tansu_sidecar.bootstrap, tansu_sidecar.backend)


# -- confluent-kafka's ShareConsumer (tests/e2e/test_share_consumers.py) ---------------------------

def test_release_redelivers_with_count_2_and_reject_is_final(target):
    share.test_release_redelivers_with_count_2_and_reject_is_final(target)


def test_record_released_every_time_is_archived_at_the_limit(target):
    share.test_record_released_every_time_is_archived_at_the_limit(target)


def test_lock_expiry_moves_records_and_late_ack_fails(target):
    share.test_lock_expiry_moves_records_and_late_ack_fails(target)


def test_sigkilled_consumer_releases_records_on_disconnect(target, tmp_path):
    share.test_sigkilled_consumer_releases_records_on_disconnect(target, tmp_path)


def test_one_partition_eight_consumers_all_get_work(target, tmp_path):
    share.test_one_partition_eight_consumers_all_get_work(target, tmp_path)


# -- Java's KafkaShareConsumer (tests/e2e/test_java_consumer.py) ------------------------------------

def test_java_share_consumer(target, java_consumer):  # noqa: F811 - the imported fixture
    java.test_java_share_consumer(target, java_consumer)


# -- the sidecar killed and restarted: state recovered from the state topic on tansu ---------------

def test_sigkilled_sidecar_restarted_loses_nothing(tansu, tmp_path):
    restart_mid_run(tansu.bootstrap, tmp_path, "fenced", sig=signal.SIGKILL, label="kshare on tansu",
                    env=TANSU_SIDECAR_ENV)


# -- zombie sidecars (tests/e2e/test_fencing_faults.py, fenced mode): tansu's epoch check fences them

def test_frozen_owner_resumed_after_takeover_never_moves_state_backwards(tansu, tmp_path):
    fencing.test_frozen_owner_resumed_after_takeover_never_moves_state_backwards(tansu, tmp_path, 0, "fenced")


def test_killed_owner_restarted_while_successor_serves_leaves_one_writer(tansu, tmp_path):
    fencing.test_killed_owner_restarted_while_successor_serves_leaves_one_writer(tansu, tmp_path, 0, "fenced")


# -- pass-through: the sidecar as the only bootstrap (tests/e2e/test_dropin_clients.py) ------------

def test_consumer_groups_and_share_groups_side_by_side(tansu_sidecar):
    dropin.test_consumer_groups_and_share_groups_side_by_side(tansu_sidecar)


def test_produce_right_after_create_topic_is_written_once(tansu_sidecar):
    dropin.test_produce_right_after_create_topic_is_written_once_and_stays_on_the_sidecar(tansu_sidecar)


def test_a_producer_with_its_own_backend_bootstrap_still_works(tansu_sidecar, tansu):
    dropin.test_a_producer_with_its_own_backend_bootstrap_still_works(tansu_sidecar, tansu)


def test_unknown_group_errors_come_from_the_backend(tansu_sidecar):
    dropin.test_unknown_group_errors_come_from_the_backend(tansu_sidecar)


def test_api_versions_offer_only_what_tansu_serves(tansu_sidecar, tansu):
    front = dropin.offered_within_the_backend(tansu_sidecar.bootstrap, tansu.bootstrap)
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 19, 20, 22, 24, 25, 28} <= set(front)
    assert 26 not in front and 37 not in front  # tansu has neither EndTxn nor CreatePartitions


def test_transactions_are_refused_by_the_client_for_want_of_end_txn(tansu_sidecar):
    """tansu has no EndTxn, so the sidecar does not offer it and librdkafka refuses to commit —
    a clear client-side error, not a hang (Kafka 3.9: test_transactions_and_a_read_committed_share_group)."""
    topic = unique("dropin-txn")
    dropin._create(AdminClient({"bootstrap.servers": tansu_sidecar.bootstrap}), topic, 1)
    producer = Producer({"bootstrap.servers": tansu_sidecar.bootstrap, "transactional.id": unique("txn")})
    producer.init_transactions(30)  # InitProducerId and AddPartitionsToTxn exist on tansu
    producer.begin_transaction()
    producer.produce(topic, b"x")
    producer.flush(30)
    with pytest.raises(KafkaException) as refused:
        producer.commit_transaction(30)
    assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
    assert "EndTxn" in refused.value.args[0].str()


@pytest.fixture
def own_tansu_sidecar(tmp_path) -> Iterator[SidecarProcess]:
    """A tansu and a sidecar of the test's own: these scenarios delete a topic, and tansu 0.6.0's
    libSQL engine then deletes every topic (the session's state topic too; docs/compatibility.md)."""
    with TansuBroker() as broker:
        sc = SidecarProcess(broker.bootstrap, tmp_path / "sidecar.log", env=dict(TANSU_SIDECAR_ENV)).start()
        try:
            yield sc
        finally:
            sc.stop()


def test_kafka_topic_command_through_the_sidecar(own_tansu_sidecar):
    dropin.test_kafka_topic_command_through_the_sidecar(own_tansu_sidecar)


def test_admin_client_topics_configs_records(own_tansu_sidecar):
    """test_dropin_clients's admin scenario minus what tansu lacks: CreatePartitions is not offered
    (librdkafka refuses it), DeleteRecords is left out (tansu's libSQL engine panics on it), and
    DescribeConfigs lists only the configs set on the topic (no broker defaults)."""
    admin = AdminClient({"bootstrap.servers": own_tansu_sidecar.bootstrap})
    topic = unique("dropin-admin")
    dropin._create(admin, topic, 3)
    with pytest.raises(KafkaException) as refused:
        dropin._wait(admin.create_partitions([NewPartitions(topic, 4)]))
    assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE

    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    dropin._wait(admin.incremental_alter_configs([change]))
    (configs,) = dropin._wait(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])).values()
    assert configs["retention.ms"].value == "3600000"
    assert "cleanup.policy" not in configs

    producer = Producer({"bootstrap.servers": own_tansu_sidecar.bootstrap})
    for i in range(10):
        producer.produce(topic, b"r%d" % i, partition=0)
    assert producer.flush(60) == 0
    tp = TopicPartition(topic, 0)
    (latest,) = dropin._wait(admin.list_offsets({tp: OffsetSpec.latest()})).values()
    (earliest,) = dropin._wait(admin.list_offsets({tp: OffsetSpec.earliest()})).values()
    assert (earliest.offset, latest.offset) == (0, 10)

    dropin._wait(admin.delete_topics([topic], operation_timeout=30))
    assert topic not in admin.list_topics(timeout=10).topics
