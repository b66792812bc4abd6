"""Share-partition engine (KIP-932): pure, range-based in-flight state of share-partitions.

`SharePartition` is one share-partition; see docs/engine.md for the model and the API.
"""

from kshare_sidecar.share.acks import AckPlan, parse_ack_batches
from kshare_sidecar.share.config import ShareConfig
from kshare_sidecar.share.partition import SharePartition
from kshare_sidecar.share.types import AckBatch, AckType, AcquiredRecords, AcquireMode, LogBatch

__all__ = [
    "AckBatch",
    "AckPlan",
    "AckType",
    "AcquireMode",
    "AcquiredRecords",
    "LogBatch",
    "ShareConfig",
    "SharePartition",
    "parse_ack_batches",
]
