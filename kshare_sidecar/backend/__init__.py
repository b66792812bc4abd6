"""The backend cluster: topic metadata with stable topic IDs, raw record-batch reads, offsets.

The only package that talks to the backend's user topics. Record data moves as bytes.
Public surface: :class:`Backend`, the value types, the error types, the batch helpers and the
:class:`TopicIdStore` protocol. See docs/backend.md.
"""

from .backend import Backend
from .offsets import OffsetSpec
from .batches import RecordFormatError, overlapping, parse_batches, slice_batches
from .errors import BackendError, BackendUnavailableError, UnknownTopicError
from .reads import PartitionRead
from .topic_ids import InMemoryTopicIdStore, TopicIdStore
from .types import BatchInfo, FetchResult, TopicInfo

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "BatchInfo",
    "FetchResult",
    "InMemoryTopicIdStore",
    "OffsetSpec",
    "PartitionRead",
    "RecordFormatError",
    "TopicIdStore",
    "TopicInfo",
    "UnknownTopicError",
    "overlapping",
    "parse_batches",
    "slice_batches",
]
