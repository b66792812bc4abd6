"""Share-partition engine (KIP-932): pure, range-based in-flight state of share-partitions.

`SharePartition` is one share-partition; see docs/engine.md for the model and the API.
"""

from kshare_sidecar.share.engine.acks import AckPlan, parse_ack_batches
from kshare_sidecar.share.engine.config import ShareConfig
from kshare_sidecar.share.engine.partition import SharePartition
from kshare_sidecar.share.engine.types import AckBatch, AcquiredRecords, AcquireMode, LogBatch, Run
from kshare_sidecar.states import AcknowledgeType, RecordState

__all__ = [
    "AckBatch",
    "AckPlan",
    "AcknowledgeType",
    "AcquireMode",
    "AcquiredRecords",
    "LogBatch",
    "RecordState",
    "Run",
    "ShareConfig",
    "SharePartition",
    "parse_ack_batches",
]
