"""Pass-through leaves kshare's own state alone: through the sidecar, a client cannot delete,
reconfigure or grow the state topic, nor take over a state writer's transactional id (which would
fence the sidecar) — nor see the state writers in transaction and producer listings. Checked with
confluent-kafka clients and raw requests, and on the backend itself afterwards."""

from __future__ import annotations

import dataclasses
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   ResourceType)
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_producers.v0.response import PartitionResponse
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_transactions.v0.response import TransactionState as DescribedTransaction
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_transactions.v0.request import ListTransactionsRequest

from kshare_sidecar.protocol.address import parse_host_port
from kshare_sidecar.protocol.blocking import BlockingConnection
from tests.support import create_topic, unique

pytestmark = [pytest.mark.kafka]

STATE = "__kshare_state"


def _error(future) -> KafkaError | None:
    try:
        future.result(30)
    except KafkaException as exc:
        return exc.args[0]
    return None


def test_the_state_topic_and_writer_ids_are_out_of_reach(sidecar, kafka_39):
    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    assert STATE not in admin.list_topics(timeout=30).topics  # hidden, as before pass-through

    (deleted,) = admin.delete_topics([STATE], operation_timeout=10).values()
    assert _error(deleted).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    change = ConfigResource(ResourceType.TOPIC, STATE, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    (altered,) = admin.incremental_alter_configs([change]).values()
    assert _error(altered).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    (grown,) = admin.create_partitions([NewPartitions(STATE, 64)]).values()
    assert _error(grown).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    thief = Producer({"bootstrap.servers": sidecar.bootstrap, "transactional.id": f"kshare-state-{STATE}-0"})
    with pytest.raises(KafkaException) as refused:
        thief.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    # the backend still has the state topic, compacted, with its partitions
    backend = AdminClient({"bootstrap.servers": kafka_39.bootstrap})
    topic = backend.list_topics(STATE, timeout=30).topics[STATE]
    assert topic.error is None and len(topic.partitions) == 4
    (described,) = backend.describe_configs([ConfigResource(ResourceType.TOPIC, STATE)]).values()
    assert described.result(30)["cleanup.policy"].value == "compact"


def _call(bootstrap: str, request):
    host, port = parse_host_port(bootstrap)
    with BlockingConnection(host, port, timeout=30, client_id="reserved-test") as conn:
        return conn.call(request)


def _listed(bootstrap: str) -> set[str]:
    answer = _call(bootstrap, ListTransactionsRequest(state_filters=(), producer_id_filters=()))
    return {str(t.transactional_id) for t in answer.transaction_states}


def _described(bootstrap: str, *ids: str) -> dict[str, DescribedTransaction]:
    answer = _call(bootstrap, DescribeTransactionsRequest(transactional_ids=ids))
    return {str(t.transactional_id): t for t in answer.transaction_states}


def _described_at_its_coordinator(bootstrap: str, transactional_id: str) -> DescribedTransaction:
    """As an admin client asks: FindCoordinator first (which creates ``__transaction_state`` on a
    fresh broker), then DescribeTransactions until the coordinator is loaded."""
    deadline = time.monotonic() + 30
    while True:
        _call(bootstrap, FindCoordinatorRequest(key_type=1, coordinator_keys=(transactional_id,)))
        found = _described(bootstrap, transactional_id)[transactional_id]
        if found.error_code not in _NOT_YET or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


_NOT_YET = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress}


def _producers(bootstrap: str, *topics: str) -> dict[str, PartitionResponse]:
    answer = _call(bootstrap, DescribeProducersRequest(topics=tuple(
        TopicRequest(name=t, partition_indexes=(0,)) for t in topics)))
    return {str(t.name): t.partitions[0] for t in answer.topics}


def test_the_state_writers_are_hidden_from_transaction_and_producer_listings(sidecar, kafka_39, native_kafka):
    """As the state topic is hidden from Metadata: `kafka-transactions.sh list` through the sidecar
    used to show the state writers' transactional ids (`kshare-state-…`). Now ListTransactions
    leaves them out, DescribeTransactions answers them as Kafka 4.3 answers an id it does not know,
    and DescribeProducers the state topic as Kafka answers a topic it does not have; everything
    else is the backend's answer."""
    topic, txn = unique("txn-topic"), unique("user-txn")
    create_topic(kafka_39.bootstrap, topic)
    producer = Producer({"bootstrap.servers": sidecar.bootstrap, "transactional.id": txn})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"v", partition=0)
    producer.commit_transaction(30)

    direct = _listed(kafka_39.bootstrap)
    writers = sorted(t for t in direct if t.startswith(f"kshare-state-{STATE}-"))
    assert writers and txn in direct  # what the backend itself lists
    through = _listed(sidecar.bootstrap)
    assert txn in through and not [t for t in through if t.startswith("kshare-state-")], through

    # (the backend describes the writers; kio cannot read that answer: an Empty transaction's start
    # time is -1 — and that is why the sidecar joins the backend's part to its own as bytes)
    nobody = unique("nobody")
    natively = _described_at_its_coordinator(native_kafka.bootstrap, nobody)
    assert natively.error_code == ErrorCode.transactional_id_not_found
    described = _described(sidecar.bootstrap, writers[0], txn)
    assert set(described) == {writers[0], txn}
    assert described[txn].error_code == ErrorCode.none and described[txn].transaction_state == "CompleteCommit"
    assert dataclasses.replace(described[writers[0]], transactional_id=nobody) == natively

    missing = unique("missing")
    natively_missing = _producers(native_kafka.bootstrap, missing)[missing]
    assert natively_missing.error_code == ErrorCode.unknown_topic_or_partition
    producers = _producers(sidecar.bootstrap, STATE, topic)
    assert producers[STATE] == natively_missing
    assert producers[topic].error_code == ErrorCode.none and len(producers[topic].active_producers) == 1
    assert _producers(kafka_39.bootstrap, STATE)[STATE].error_code == ErrorCode.none
