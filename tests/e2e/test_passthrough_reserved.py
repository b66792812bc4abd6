"""Pass-through leaves kshare's own state alone: through the sidecar, a client cannot delete,
reconfigure or grow the state topic, nor take over a state writer's transactional id (which would
fence the sidecar). Checked with confluent-kafka clients, and on the backend itself afterwards."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   ResourceType)

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
