"""Fetch and ListOffsets requests (through kio) and their translation into FetchResult.

Why Fetch by topic *name* (v4..v12) rather than by ID (v13+): minted topic IDs (Redpanda, old
backends) mean nothing to the backend, names work everywhere, and v12 already carries everything
share logic needs: high watermark, LSO, log start offset and the aborted-transaction list.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .batches import parse_batches
from .errors import LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, UnknownTopicError
from ..protocol.constants import ApiKey, OffsetSpec
from ..protocol.types import TopicPartition
from .kio_bridge import Builder, KioRequest, make
from .types import FetchResult

FETCH_API = ApiKey.FETCH
FETCH_VERSIONS = range(4, 13)  # v4: isolation level, LSO, aborted txns; Kafka 4 dropped < v4
LIST_OFFSETS_API = ApiKey.LIST_OFFSETS
LIST_OFFSETS_VERSIONS = range(1, 8)  # v2: isolation level; v7: max-timestamp spec (-3)

EARLIEST = OffsetSpec.EARLIEST
LATEST = OffsetSpec.LATEST
INT32_MAX = 2**31 - 1


class PartitionRead(NamedTuple):
    """One partition to read in :meth:`Backend.fetch_many`."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


def fetch_request(
    reads: Sequence[PartitionRead], *, max_wait_ms: int, isolation_level: int, max_bytes: int | None
) -> KioRequest:
    """A Fetch aiokafka's connections can carry (the version chosen per connection)."""
    return KioRequest(FETCH_API, FETCH_VERSIONS, fetch_builder(reads, max_wait_ms=max_wait_ms,
                                                               isolation_level=isolation_level, max_bytes=max_bytes))


def fetch_builder(
    reads: Sequence[PartitionRead], *, max_wait_ms: int, isolation_level: int, max_bytes: int | None
) -> Builder:
    """``build(module, version)``: the Fetch of ``reads`` as a kio request of that version."""
    by_topic: dict[str, list[PartitionRead]] = {}
    for r in reads:
        by_topic.setdefault(r.topic, []).append(r)
    total = max_bytes if max_bytes is not None else min(INT32_MAX, sum(r.max_bytes for r in reads))
    wait = datetime.timedelta(milliseconds=max_wait_ms)

    def build(mod, version: int):
        topics = tuple(
            make(
                mod.FetchTopic,
                topic=name,
                partitions=tuple(
                    make(
                        mod.FetchPartition,
                        partition=r.partition,
                        fetch_offset=r.offset,
                        partition_max_bytes=r.max_bytes,
                        current_leader_epoch=-1,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                    )
                    for r in rs
                ),
            )
            for name, rs in by_topic.items()
        )
        return make(
            mod.FetchRequest,
            replica_id=-1,
            max_wait=wait,
            min_bytes=1,  # answer as soon as any data exists: a long poll when max_wait > 0
            max_bytes=total,
            isolation_level=isolation_level,
            session_id=0,
            session_epoch=-1,  # no incremental fetch sessions: every request is self-contained
            topics=topics,
            forgotten_topics_data=(),
            rack_id="",
        )

    return build


def empty_result(error_code: int, *, hwm: int = -1, lso: int = -1, log_start: int = -1) -> FetchResult:
    return FetchResult(b"", (), hwm, lso, log_start, (), error_code)


def to_result(p) -> FetchResult:
    """Translate one kio ``PartitionData`` into a :class:`FetchResult` (only complete batches)."""
    code = int(p.error_code)
    hwm = int(p.high_watermark)
    lso = int(getattr(p, "last_stable_offset", -1))
    log_start = int(getattr(p, "log_start_offset", -1))
    if code != 0:
        return empty_result(code, hwm=hwm, lso=lso, log_start=log_start)
    raw = p.records or b""
    batches = parse_batches(raw)
    if batches:
        end = batches[-1].end
        records = raw if end == len(raw) else raw[:end]  # drop a truncated trailing batch
    else:
        records = b""
    aborted = tuple((int(a.producer_id), int(a.first_offset)) for a in (p.aborted_transactions or ()))
    return FetchResult(records, batches, hwm, lso, log_start, aborted, 0, len(raw) - len(records))


def list_offsets_request(topic: str, partition: int, timestamp: int, isolation_level: int) -> KioRequest:
    def build(mod, version: int):
        part = make(
            mod.ListOffsetsPartition,
            partition_index=partition,
            current_leader_epoch=-1,
            timestamp=timestamp,
            max_num_offsets=1,
        )
        return make(
            mod.ListOffsetsRequest,
            replica_id=-1,
            isolation_level=isolation_level,
            topics=(make(mod.ListOffsetsTopic, name=topic, partitions=(part,)),),
        )

    return KioRequest(LIST_OFFSETS_API, LIST_OFFSETS_VERSIONS, build)


def list_offsets_timestamp(spec: Any) -> int:
    """ListOffsets' timestamp for ``Backend.list_offsets``' spec: ``"earliest"``, ``"latest"`` or a
    timestamp in ms (≥ 0); anything else is the caller's mistake (ValueError)."""
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return spec
    raise ValueError(f"offset spec must be 'earliest', 'latest' or a timestamp in ms ≥ 0, not {spec!r}")


def route(reads: list[PartitionRead], leader: Callable[[str, int], int]
          ) -> tuple[dict[int, list[PartitionRead]], dict[TopicPartition, FetchResult]]:
    """Reads grouped by the leader ``leader(topic, partition)`` names; a read without one (unknown
    topic or partition, no leader now) is answered at once with its error."""
    by_leader: dict[int, list[PartitionRead]] = {}
    errored: dict[TopicPartition, FetchResult] = {}
    for r in reads:
        try:
            node = leader(r.topic, r.partition)
        except UnknownTopicError:
            errored[(r.topic, r.partition)] = empty_result(UNKNOWN_TOPIC_OR_PARTITION)
            continue
        if node < 0:
            errored[(r.topic, r.partition)] = empty_result(LEADER_NOT_AVAILABLE)
        else:
            by_leader.setdefault(node, []).append(r)
    return by_leader, errored
