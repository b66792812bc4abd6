"""Bad values of the extension configs (docs/extensions.md) through confluent-kafka's AdminClient
against the sidecar on Kafka 3.9: INVALID_CONFIG with a message naming the key, nothing stored."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from tests.support import set_group_config, unique

pytestmark = pytest.mark.kafka

CASES = [
    ("share.assignor", "no-such-assignor"),
    ("errors.deadletterqueue.topic.name", "__dlq.internal"),  # Kafka 4.4's one refusal; the name rules and
    # the prefix are checked at write time, as natively (tests/e2e/test_dlq_parity.py), or at config time
    # with deadletter.strict.names (tests/unit/share/test_ext_pure.py)
    ("share.release.backoff.ms", "-1"),
    ("share.release.backoff.max.ms", "-5"),
    ("share.release.backoff.multiplier", "0.5"),
    ("share.key.ordering", "yes"),
]


@pytest.mark.parametrize("key,value", CASES)
def test_bad_extension_config_is_invalid_config_naming_the_key(sidecar, key, value):
    group = unique("g")
    with pytest.raises(KafkaException) as info:
        set_group_config(sidecar.bootstrap, group, {key: value})
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert key in err.str(), err.str()
    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    described = future.result(30)
    assert key not in described or described[key].value != value


def test_backoff_cap_below_the_base_is_invalid_config(sidecar):
    group = unique("g")
    set_group_config(sidecar.bootstrap, group, {"share.release.backoff.ms": "5000"})
    with pytest.raises(KafkaException) as info:
        set_group_config(sidecar.bootstrap, group, {"share.release.backoff.max.ms": "1000"})
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG and "share.release.backoff.max.ms" in err.str(), err.str()
