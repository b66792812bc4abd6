"""Durable share-group state: the persisted model, the persister protocol and built-in persisters.

``TopicPersister`` (aiokafka) is imported lazily from :mod:`kshare_sidecar.persist.topic`.
"""

from kshare_sidecar.persist.errors import (
    BackendWriteError,
    CommitOutcomeUnknownError,
    FencedLeaderEpochError,
    FencedStateEpochError,
    InvalidStateError,
    NotReadyError,
    PersistError,
    PersisterClosedError,
    StateTopicMisconfiguredError,
    UnknownSharePartitionError,
    WriterFencedError,
)
from kshare_sidecar.persist.memory import MemoryLog, MemoryPersister
from kshare_sidecar.persist.model import (
    DeliveryState,
    PartitionState,
    SharePartitionKey,
    StateBatch,
)
from kshare_sidecar.persist.protocol import Persister
from kshare_sidecar.persist.records import (
    NO_EPOCH,
    UNSET_OFFSET,
    GroupRecord,
    InitializeItem,
    RecoveryStats,
    StateSummary,
    StoredPartition,
    WriteItem,
)

__all__ = [
    "NO_EPOCH",
    "UNSET_OFFSET",
    "BackendWriteError",
    "CommitOutcomeUnknownError",
    "DeliveryState",
    "FencedLeaderEpochError",
    "FencedStateEpochError",
    "GroupRecord",
    "InitializeItem",
    "InvalidStateError",
    "MemoryLog",
    "MemoryPersister",
    "NotReadyError",
    "PartitionState",
    "PersistError",
    "Persister",
    "PersisterClosedError",
    "RecoveryStats",
    "SharePartitionKey",
    "StateBatch",
    "StateSummary",
    "StateTopicMisconfiguredError",
    "StoredPartition",
    "UnknownSharePartitionError",
    "WriteItem",
    "WriterFencedError",
]
