"""Value types shared by the backend layer and its callers (handlers, fetch manager)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A backend topic as kshare presents it: a stable topic ID and its partition count."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    internal: bool = False


class BatchInfo(NamedTuple):
    """Boundaries of one log batch inside a fetched `records` buffer (header fields only).

    ``start``/``end`` are byte positions in the buffer, so a caller can pass through exactly the
    batches it acquired without decoding a single record. A tuple: one is built per batch of
    every read, and its first five fields are what the engine's ``acquire`` takes as they are.
    """

    base_offset: int
    last_offset: int
    producer_id: int
    is_transactional: bool
    is_control: bool
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One partition's answer from a backend Fetch: raw bytes plus what share logic needs.

    ``records`` is a read-only view of the buffer the answer was received into (backend/fetchwire.py)
    or ``bytes``; either way it is never copied on the share path, only sliced."""

    records: bytes | memoryview
    batches: tuple[BatchInfo, ...]
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] = field(default=())  # (producer_id, first_offset)
    error_code: int = 0
    #: bytes of a trailing batch the backend cut at the read's size limit, dropped from
    #: ``records``: the next read fetches that batch again from its start
    cut_bytes: int = 0
