"""Executor side: read exactly the acquired offsets from the backend, as Arrow record batches.

Executors never join the share group. A Spark input partition holds ranges
``[first, last, deliveryCount]`` of one or more topic-partitions; each is read in turn. By
default (``readClient=auto``, ``readclient.py``) the reader sends Kafka Fetch requests itself
(``fetch.py``) and decodes the record batches of the answer straight into Arrow columns
(``decode.py``, ``arrow.py``): no Python object per record, where librdkafka built a ``Message``
per record that the executors then took apart again (docs/spark.md, "Executors"). With settings
only librdkafka has, or ``readClient=librdkafka``, ``read_librdkafka.py`` reads instead.

Per topic-partition, from the first range's first offset: Fetch, keep the records inside the
ranges (each with its range's delivery count), go on at the offset after the last complete
batch of the answer, skip to the next range once a range is passed, and stop after the last.
Offsets without a record inside a range (compaction, transaction markers, records of aborted
transactions with read_committed) simply yield no row, as with librdkafka. A Fetch is sized from
what the partition's records took before (bytes per offset), so a range is mostly one request.
Records the backend already deleted (retention ran past an acquired range: OFFSET_OUT_OF_RANGE)
are logged and skipped from the log start offset on; they cannot be read by anyone.

The worker's :class:`~.fetch.Fetcher` (connections, leaders, an event loop) is kept per Python
worker process and configuration, as Spark reuses its workers.
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Iterator

from . import gcfreeze
from .arrow import arrow_schema
from .options import SourceOptions
from .readclient import ReaderConfig, reader_client, reader_config

log = logging.getLogger("kshare.spark")

_OFFSET_OUT_OF_RANGE = 1
#: A Fetch's size: at least this, at most the reader's fetch.max.bytes.
MIN_FETCH_BYTES = 64 * 1024
#: One Fetcher per worker process and configuration (few: one per query's options).
_FETCHERS: dict[ReaderConfig, object] = {}
#: Bytes per offset last seen per (topic, partition), and the largest batch: sizes the next Fetch.
_SIZES: dict[tuple[str, int], tuple[float, int]] = {}


def read_ranges(opts: SourceOptions, topic: str, partition: int, ranges: list[list[int]]) -> Iterator:
    """Yield Arrow batches with every record in ``ranges`` (``[first, last, deliveryCount]``)."""
    if reader_client(opts)[0] == "librdkafka":
        from .read_librdkafka import read_ranges as read_with_librdkafka

        yield from read_with_librdkafka(opts, topic, partition, ranges)
        return
    yield from _read(opts, reader_config(opts), topic, partition, ranges)


def _fetcher(config: ReaderConfig):
    from .fetch import Fetcher

    fetcher = _FETCHERS.get(config)
    if fetcher is None:
        fetcher = _FETCHERS[config] = Fetcher(
            config.servers, security=config.security(), client_id=config.client_id, isolation=config.isolation,
            max_wait_ms=config.max_wait_ms, request_timeout_s=config.request_timeout_ms / 1000)
    return fetcher


def _drop(config: ReaderConfig) -> None:
    fetcher = _FETCHERS.pop(config, None)
    if fetcher is not None:
        try:
            fetcher.close()  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - already broken: nothing more to release
            log.debug("kshare source: closing a reader: %s", exc)


@atexit.register
def _close_all() -> None:
    for config in list(_FETCHERS):
        _drop(config)


def _batch_id() -> str:
    """Spark's batchId of the running task (a local property of every streaming job), for messages."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return (ctx.getLocalProperty("streaming.sql.batchId") or "?") if ctx is not None else "?"
    except Exception:  # noqa: BLE001 - only for a message: outside a Spark task there is none
        return "?"


def _read(opts: SourceOptions, config: ReaderConfig, topic: str, partition: int, ranges: list[list[int]]) -> Iterator:
    import numpy as np

    from .arrow import record_batch
    from .decode import decode

    if not ranges:
        return
    schema = arrow_schema(opts.include_headers)
    fetcher = _fetcher(config)
    gcfreeze.freeze_imports()  # after the imports above: see gcfreeze.py
    ranges = sorted(ranges)
    firsts = np.array([r[0] for r in ranges], np.int64)
    lasts = np.array([r[1] for r in ranges], np.int64)
    counts = np.array([r[2] for r in ranges], np.int32)
    end = int(lasts.max())
    deadline = time.monotonic() + opts.read_timeout_ms / 1000
    position, k = int(firsts[0]), 0
    healthy = False
    try:
        while True:
            while k < len(ranges) and position > lasts[k]:  # past this range: on to the next
                k += 1
            if k == len(ranges):
                break
            position = max(position, int(firsts[k]))
            size = _fetch_size(config, topic, partition, end - position + 1)
            try:
                if time.monotonic() > deadline:
                    raise TimeoutError("no records there")
                answer = fetcher.fetch(topic, partition, position, size, deadline)
            except TimeoutError as exc:
                raise TimeoutError(
                    f"kshare source: batch {_batch_id()}: reading {topic}[{partition}] offsets {position}..{end} from "
                    f"{opts.backend} took longer than readTimeoutMs={opts.read_timeout_ms} ({exc})") from None
            if answer.error == _OFFSET_OUT_OF_RANGE:
                start = fetcher.log_start(topic, partition, deadline)
                if start > position:
                    log.warning("kshare source: batch %s: %s[%d] offsets %d..%d were deleted from the log before "
                                "they were read (retention); reading on from %d", _batch_id(), topic, partition,
                                position, start - 1, start)
                    position = start
                    continue
            if answer.error:
                from kio.schema.errors import ErrorCode

                raise RuntimeError(f"kshare source: batch {_batch_id()}: Fetch {topic}[{partition}] at offset "
                                   f"{position} from {opts.backend}: {ErrorCode(answer.error).name}")
            got = decode(answer.records, first=position, last=end, read_committed=config.isolation == 1,
                         aborted=answer.aborted, headers=opts.include_headers, check_crcs=config.check_crcs)
            if got.next_offset <= position:  # no complete batch: nothing readable there yet (read_committed:
                if answer.records:  # a transaction still open; the Fetch itself waited), or the batch is
                    _grow(topic, partition, size)  # larger than the Fetch (a backend not cutting at a batch)
                continue
            _learn_size(topic, partition, got.bytes_per_offset, got.largest_batch)
            recs = got.records
            if len(recs):
                # each record's range (ranges are disjoint and sorted); offsets between ranges are not ours
                at = np.searchsorted(firsts, recs.offset, side="right") - 1
                inside = (at >= 0) & (recs.offset <= lasts[np.maximum(at, 0)])
                if not inside.all():
                    recs, at = recs.take(inside), at[inside]
                if len(recs):
                    yield record_batch(recs, counts[at], topic, partition, schema)
            position = got.next_offset
        healthy = True
    finally:
        if not healthy:  # an error or an abandoned generator: do not reuse connections in an unknown state
            _drop(config)


def _fetch_size(config: ReaderConfig, topic: str, partition: int, offsets: int) -> int:
    """Bytes to ask for ``offsets`` more offsets: what they took before, plus one batch (the range
    usually ends inside one), within [MIN_FETCH_BYTES, fetch.max.bytes]; the reader's
    max.partition.fetch.bytes before anything is known."""
    known = _SIZES.get((topic, partition))
    if known is None:
        return min(config.partition_max_bytes, config.fetch_max_bytes)
    per_offset, batch = known
    return int(min(config.fetch_max_bytes, max(MIN_FETCH_BYTES, per_offset * offsets * 1.05 + batch)))


def _learn_size(topic: str, partition: int, per_offset: float, batch: int) -> None:
    if per_offset > 0:
        _SIZES[(topic, partition)] = (per_offset, batch)


def _grow(topic: str, partition: int, size: int) -> None:
    per_offset, _ = _SIZES.get((topic, partition), (0.0, 0))
    _SIZES[(topic, partition)] = (per_offset, 2 * size)
