"""Kafka's wire numbers, by Kafka's names, in one place.

Why: these numbers used to be spelled where they were needed (``RESOURCE_GROUP = 32`` in the
service, again in the CLI and in pass-through; ``EARLIEST, LATEST = -2, -1`` twice; API keys as
bare literals), so a reader had to know them by heart and a typo was silent. Each class is an
``IntEnum``: members compare equal to the plain ints kio decodes, and go into kio entities as they
are. Error codes are not repeated here: kio's :class:`~kio.schema.errors.ErrorCode` is the map.
The record-state and acknowledge-type numbers of share groups live with the engine
(``share/``), which owns their meaning.

Values are from Kafka's ``ApiKeys``, ``ConfigResource.Type``, ``DescribeConfigsResponse``'s
``ConfigSource``/``ConfigType``, ``AlterConfigOp.OpType``, ``ListOffsetsRequest`` and
``FindCoordinatorRequest.CoordinatorType``; tests/unit/protocol checks the API keys against kio.
"""

from __future__ import annotations

import enum

#: Kafka's ``security.protocol`` values, for listeners and for connections to a cluster alike.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SCRAM mechanisms Kafka offers (``ScramMechanism``).
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Every SASL mechanism kshare speaks as a client (to a backend or a broker). Its listeners serve
#: all but OAUTHBEARER (``config.settings.SASL_MECHANISMS``).
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")


class ApiKey(enum.IntEnum):
    """The API keys kshare names in code (``ApiKeys`` in Kafka; the full list is kio's index)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    ADD_PARTITIONS_TO_TXN = 24
    DESCRIBE_ACLS = 29
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


class ConfigResourceType(enum.IntEnum):
    """``ResourceType`` of DescribeConfigs / IncrementalAlterConfigs (``ConfigResource.Type``)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(enum.IntEnum):
    """``ConfigSource`` of a DescribeConfigs answer (and of its synonyms)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(enum.IntEnum):
    """``ConfigType`` of a DescribeConfigs answer (with ``include_documentation``)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterConfigOp(enum.IntEnum):
    """``ConfigOperation`` of IncrementalAlterConfigs (``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class OffsetSpec(enum.IntEnum):
    """The special timestamps of ListOffsets (``ListOffsetsRequest``); any other value is a time."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3
    EARLIEST_LOCAL = -4
    LATEST_TIERED = -5


class CoordinatorType(enum.IntEnum):
    """``KeyType`` of FindCoordinator."""

    GROUP = 0
    TRANSACTION = 1
    SHARE = 2


#: ``GroupType`` of a share group in ListGroups (v5+) and DescribeGroups answers.
SHARE_GROUP_TYPE = "share"
#: The states a share group can be in, as ListGroups / ShareGroupDescribe name them.
SHARE_GROUP_STATES = ("Empty", "Stable", "Dead")
