"""The Kafka numbers in protocol/constants.py are Kafka's (checked against kio's index where it has them)."""

from __future__ import annotations

from kio.schema.index import api_key_map

from kshare_sidecar.protocol.constants import (
    SHARE_GROUP_STATES,
    AlterConfigOp,
    ApiKey,
    ConfigResourceType,
    ConfigSource,
    CoordinatorType,
    OffsetSpec,
)


def test_api_keys_match_kios_index() -> None:
    assert {k.name.lower(): int(k) for k in ApiKey} == {api_key_map[int(k)]: int(k) for k in ApiKey}


def test_values_are_kafkas() -> None:
    assert (ConfigResourceType.TOPIC, ConfigResourceType.BROKER, ConfigResourceType.GROUP) == (2, 4, 32)
    assert (ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG, ConfigSource.GROUP_CONFIG) == (4, 5, 8)
    assert [int(op) for op in AlterConfigOp] == [0, 1, 2, 3]
    assert (OffsetSpec.LATEST, OffsetSpec.EARLIEST, OffsetSpec.MAX_TIMESTAMP) == (-1, -2, -3)
    assert (CoordinatorType.GROUP, CoordinatorType.TRANSACTION, CoordinatorType.SHARE) == (0, 1, 2)
    assert SHARE_GROUP_STATES == ("Empty", "Stable", "Dead")


def test_int_enums_read_as_plain_ints() -> None:
    """Members go into kio entities and log lines as the numbers Kafka uses."""
    assert f"{ApiKey.SHARE_FETCH}" == "78" and str(ConfigResourceType.GROUP) == "32"
    assert {78: "x"}[ApiKey.SHARE_FETCH] == "x"
