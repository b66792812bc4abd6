"""Persister errors, each carrying the Kafka error code a gateway should answer with."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class PersistError(Exception):
    """Base class. ``error_code`` is a :class:`kio.schema.errors.ErrorCode`."""

    error_code: ErrorCode = ErrorCode.unknown_server_error
    retriable: bool = False

    def __init__(self, message: str = ""):
        super().__init__(message or self.__class__.__doc__ or self.__class__.__name__)

    @property
    def message(self) -> str:
        return str(self)


class NotReadyError(PersistError):
    """The persister is still recovering its state (answer COORDINATOR_LOAD_IN_PROGRESS)."""

    error_code = ErrorCode.coordinator_load_in_progress
    retriable = True


class PersisterClosedError(PersistError):
    """The persister is closed or was never started."""

    error_code = ErrorCode.coordinator_not_available
    retriable = True


class FencedStateEpochError(PersistError):
    """The write names a state epoch other than the stored one (FENCED_STATE_EPOCH, 124)."""

    error_code = ErrorCode.fenced_state_epoch


class FencedLeaderEpochError(PersistError):
    """A stale owner: its epoch is outside [assignment epoch, current epoch] (FENCED_LEADER_EPOCH)."""

    error_code = ErrorCode.fenced_leader_epoch


class UnknownSharePartitionError(PersistError):
    """No state for this share-partition: it was never initialized or was deleted."""

    error_code = ErrorCode.unknown_topic_or_partition


class InvalidStateError(PersistError):
    """The state handed to write() is malformed (overlapping or unsorted batches, bad states)."""

    error_code = ErrorCode.invalid_request


class WriterFencedError(PersistError):
    """The backend fenced this writer, or this instance is re-reading ownership after it was.

    The write was not stored. While ownership is re-read the error is temporary; once another
    sidecar is found to own the state, it is permanent and the caller stops serving. Either way
    clients get NOT_COORDINATOR (retriable: they look the coordinator up again).
    """

    error_code = ErrorCode.not_coordinator
    retriable = True


class BackendWriteError(PersistError):
    """The backend did not confirm the write (timeout, broker down). The write may be retried."""

    error_code = ErrorCode.coordinator_not_available
    retriable = True


class CommitOutcomeUnknownError(BackendWriteError):
    """A state commit neither confirmed nor refused (timeout, disconnect during EndTxn).

    It may or may not be durable: the state partition takes no writes until the truth has been
    read back from the state topic (read_committed, up to the last stable offset).
    """


class StateTopicMisconfiguredError(PersistError):
    """The state topic exists but cannot hold state safely (for example, not compacted)."""

    error_code = ErrorCode.invalid_config


class WriteModeUnsupportedError(PersistError):
    """The backend lacks an API the configured ``state.write.mode`` needs (e.g. EndTxn for
    ``transactional``): found at start-up, before any state is written."""

    error_code = ErrorCode.invalid_config
