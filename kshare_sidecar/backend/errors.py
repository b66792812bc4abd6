"""The backend layer's own errors: callers never see aiokafka or kio exceptions.

Every error carries a Kafka error code (``code``) because the handlers above translate backend
trouble into protocol answers, and a code is what they need. ``retriable`` tells the fetch
manager whether waiting and trying again can help.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..protocol.errors import KafkaError, for_code, stands_for

# Kafka error codes the backend layer produces or reacts to, as plain ints (kio's ErrorCode is the map).
OFFSET_OUT_OF_RANGE = int(ErrorCode.offset_out_of_range)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition)
LEADER_NOT_AVAILABLE = int(ErrorCode.leader_not_available)
NOT_LEADER_OR_FOLLOWER = int(ErrorCode.not_leader_or_follower)
REQUEST_TIMED_OUT = int(ErrorCode.request_timed_out)
NETWORK_EXCEPTION = int(ErrorCode.network_exception)
UNSUPPORTED_VERSION = int(ErrorCode.unsupported_version)
FENCED_LEADER_EPOCH = int(ErrorCode.fenced_leader_epoch)
UNKNOWN_LEADER_EPOCH = int(ErrorCode.unknown_leader_epoch)
UNKNOWN_TOPIC_ID = int(ErrorCode.unknown_topic_id)
UNKNOWN_SERVER_ERROR = int(ErrorCode.unknown_server_error)

# Codes after which fresh metadata (a new leader, a recreated topic) may make a retry succeed.
REFRESH_AND_RETRY = frozenset(
    {
        UNKNOWN_TOPIC_OR_PARTITION,
        LEADER_NOT_AVAILABLE,
        NOT_LEADER_OR_FOLLOWER,
        REQUEST_TIMED_OUT,
        NETWORK_EXCEPTION,
        FENCED_LEADER_EPOCH,
        UNKNOWN_LEADER_EPOCH,
        UNKNOWN_TOPIC_ID,
    }
)

_TRANSIENT = REFRESH_AND_RETRY - {UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID}


class BackendError(KafkaError):
    """A backend request failed. ``code`` is the Kafka error code that describes it."""

    def __init__(self, code: ErrorCode | int, message: str, *, topic: str | None = None, partition: int | None = None):
        super().__init__(code, message)
        self.topic = topic
        self.partition = partition

    @property
    def retriable(self) -> bool:
        return self.code in _TRANSIENT


@stands_for(UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID)
class UnknownTopicError(BackendError):
    """The topic or partition does not exist on the backend (or was deleted)."""


@stands_for(*_TRANSIENT)
class BackendUnavailableError(BackendError):
    """No leader, no connection, or a timeout, even after refreshing metadata and retrying once."""


def error_for(code: int, message: str, *, topic: str | None = None, partition: int | None = None) -> BackendError:
    """The most specific error class for a Kafka error code (protocol.errors.for_code), as a
    backend error."""
    cls = for_code(code)
    if not issubclass(cls, BackendError):
        cls = BackendError
    return cls(code, message, topic=topic, partition=partition)


class SaslError(Exception):
    """The broker refused the mechanism or the credentials (``code``: its error code, if any)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code
