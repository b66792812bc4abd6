"""The one error map: every failure named by a Kafka error code is a KafkaError, and for_code
answers with the most specific class registered for a code."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.api.context import KafkaError as HandlerError
from kshare_sidecar.backend.errors import (
    BackendError,
    BackendUnavailableError,
    UnknownTopicError,
    error_for,
)
from kshare_sidecar.passthrough.pool import CoordinatorError
from kshare_sidecar.protocol.errors import KafkaError, for_code, stands_for
from kshare_sidecar.group.admin_model import AdminError
from kshare_sidecar.share.cache import PartitionError
from kshare_sidecar.share.engine.sessions import SessionError


def test_every_coded_error_is_one_kafka_error() -> None:
    assert HandlerError is KafkaError  # what a handler raises is the same class, not a copy
    for cls in (BackendError, CoordinatorError, AdminError, PartitionError, SessionError):
        exc = cls(ErrorCode.not_coordinator, "moved")
        assert isinstance(exc, KafkaError)
        assert exc.code is ErrorCode.not_coordinator and exc.message == "moved"
        assert str(exc) == "moved"


def test_without_a_message_str_names_the_code() -> None:
    exc = KafkaError(ErrorCode.group_authorization_failed)
    assert exc.message is None
    assert str(exc) == "GROUP_AUTHORIZATION_FAILED"


def test_an_int_becomes_kios_error_code() -> None:
    exc = KafkaError(int(ErrorCode.invalid_request), "bad")
    assert exc.code is ErrorCode.invalid_request


def test_a_code_kio_does_not_know_is_unknown_server_error_with_its_number_kept() -> None:
    exc = KafkaError(32767, "from a newer broker")
    assert exc.code is ErrorCode.unknown_server_error
    assert exc.message == "error code 32767: from a newer broker"
    assert for_code(32767) is KafkaError


def test_for_code_answers_with_the_registered_class() -> None:
    assert for_code(ErrorCode.unknown_topic_or_partition) is UnknownTopicError
    assert for_code(int(ErrorCode.unknown_topic_id)) is UnknownTopicError
    assert for_code(ErrorCode.leader_not_available) is BackendUnavailableError
    assert for_code(ErrorCode.not_leader_or_follower) is BackendUnavailableError
    assert for_code(ErrorCode.invalid_request) is KafkaError  # nothing stands for it


def test_error_for_is_always_a_backend_error() -> None:
    exc = error_for(int(ErrorCode.request_timed_out), "slow", topic="t", partition=3)
    assert type(exc) is BackendUnavailableError and exc.retriable
    assert (exc.topic, exc.partition) == ("t", 3)
    other = error_for(int(ErrorCode.invalid_request), "bad")
    assert type(other) is BackendError and not other.retriable
    assert type(error_for(int(ErrorCode.unknown_topic_id), "gone")) is UnknownTopicError


def test_a_code_stands_for_one_class_only() -> None:
    with pytest.raises(ValueError, match="UNKNOWN_TOPIC_OR_PARTITION already stands for UnknownTopicError"):

        @stands_for(ErrorCode.unknown_topic_or_partition)
        class Another(KafkaError):
            pass
