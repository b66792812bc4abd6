"""What share-group administration answers with: plain values the handlers translate.

Why a module apart from ``admin.py``: the API handlers (``api/admin.py``, ``api/configs.py``) and
the tests read these shapes without needing the service's behaviour, and ``admin.py`` stays about
Kafka's rules. Codes are kio's ``ErrorCode``; config sources and types are
:mod:`kshare_sidecar.protocol.constants`' ``ConfigSource`` / ``ConfigType``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ..protocol.constants import SHARE_GROUP_TYPE, ConfigSource, ConfigType
from ..protocol.errors import KafkaError


class AdminError(KafkaError):
    """A request-level failure with a Kafka error code."""


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    group_type: str = SHARE_GROUP_TYPE
    protocol_type: str = SHARE_GROUP_TYPE


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed: tuple[str, ...]
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]  # (topic id, name, partitions)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    state: str = ""  # Kafka leaves the state empty when it answers with an error
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: tuple[MemberInfo, ...] = ()


@dataclass
class PartitionOffset:
    partition: int
    start_offset: int = -1
    leader_epoch: int = 0
    lag: int = -1
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass
class TopicOffsets:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionOffset] = field(default_factory=list)
    error: ErrorCode = ErrorCode.none  # topic-level (delete offsets)
    message: str | None = None


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: str
    source: ConfigSource  # GROUP_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG
    config_type: ConfigType
    doc: str
    default: str
    #: where the default comes from: STATIC_BROKER_CONFIG when the sidecar setting behind it was set
    #: (Kafka's synonym of a server.properties entry), else DEFAULT_CONFIG
    default_source: ConfigSource = ConfigSource.DEFAULT_CONFIG
