"""Durable share-group state: the persisted model, the persister protocol and built-in persisters.

The model, records, errors and the protocol are plain data and load with this face; the
persisters (``MemoryPersister`` here on first use, ``TopicPersister`` from
:mod:`kshare_sidecar.persist.topic`) load only when asked for, so the pure engine (``share/``),
which reads the model, never loads a persister.
"""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from kshare_sidecar.persist.memory import MemoryLog, MemoryPersister


def __getattr__(name: str) -> Any:
    if name in ("MemoryLog", "MemoryPersister"):
        from kshare_sidecar.persist import memory

        return getattr(memory, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
