"""Small value types shared by the engine and its callers (wire numbering kept where one exists).

Record states and acknowledge types are in kshare_sidecar/states.py (RecordState, AcknowledgeType).
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class AcquireMode(IntEnum):
    """ShareAcquireMode (ShareFetch v2): MaxRecords is soft (whole batches) or strict."""

    BATCH_OPTIMIZED = 0
    RECORD_LIMIT = 1


class AcquiredRecords(NamedTuple):
    """One AcquiredRecords entry of a ShareFetch response; it carries its own acquisition lock."""

    first_offset: int
    last_offset: int
    delivery_count: int


class LogBatch(NamedTuple):
    """Header facts of one log record batch: all the engine needs to acquire it without decoding records."""

    base_offset: int
    last_offset: int
    producer_id: int = -1
    is_transactional: bool = False
    is_control: bool = False


class AckBatch(NamedTuple):
    """One AcknowledgementBatches entry: types has 1 element (whole range) or one per offset."""

    first_offset: int
    last_offset: int
    ack_types: tuple[int, ...] | list[int]


# A run is (first_offset, last_offset, ack_type): offsets acknowledged with one AcknowledgeType
# number, the unit the engine works on (per range, not per record). A plain tuple, not a
# NamedTuple: one is made per acknowledgement batch, and a NamedTuple's constructor costs ~8% of
# the single-offset ack path (measured with benchmarks/engine.py).
Run = tuple[int, int, int]
