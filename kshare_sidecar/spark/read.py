"""Executor side: read exactly the acquired offsets from the backend with a plain consumer.

Executors never join the share group. Each Spark input partition holds the ranges of one
topic-partition; the reader assigns and seeks to each range's first offset, keeps only
offsets inside the ranges, and yields Arrow record batches (much faster than Python rows).

Speed (issue 19, profiled on a 2-core machine): building a librdkafka client, connecting and
fetching metadata cost more than reading a 10k-record range, once per task and batch. Spark
reuses its Python workers (``spark.python.worker.reuse``, default true), so the plain consumer
is kept per worker process and configuration and only re-assigned per task (Spark's own Kafka
source caches its consumers the same way). Columns that are constant per range (topic,
partition, deliveryCount) are built by Arrow, not per record.
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .options import SourceOptions

if TYPE_CHECKING:  # imported lazily at run time: executors load it only when reading
    from confluent_kafka import Consumer

log = logging.getLogger("kshare.spark")

ARROW_BATCH = 8192
#: Records per consume() call.
CONSUME_BATCH = 10_000

#: librdkafka timestamp types -> Spark Kafka source's timestampType (0 create, 1 log-append).
_TS_TYPE = {1: 0, 2: 1}

#: One plain consumer per Python worker process and configuration (see the module docstring).
_ConsumerKey = tuple[tuple[str, str], ...]
_CONSUMERS: dict[_ConsumerKey, Consumer] = {}


def arrow_schema():
    import pyarrow as pa

    return pa.schema([
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("deliveryCount", pa.int32()),
    ])


class _Columns:
    """Per-record columns of one topic-partition; constant ones are added at flush."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._reset()

    def _reset(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.offsets: list = []
        self.ts: list = []
        self.ts_types: list = []
        self.headers: list = []
        self.counts: list[tuple[int, int]] = []  # (rows so far, deliveryCount) per run

    def __len__(self) -> int:
        return len(self.offsets)

    def add_many(self, msgs: list, count: int) -> None:
        if not self.counts or self.counts[-1][1] != count:
            self.counts.append((len(self.offsets), count))
        for msg in msgs:
            self.keys.append(msg.key())
            self.values.append(msg.value())
            self.offsets.append(msg.offset())
            ts_type, ts = msg.timestamp()
            self.ts.append(ts * 1000 if ts_type and ts >= 0 else None)
            self.ts_types.append(_TS_TYPE.get(ts_type, -1))
            headers = msg.headers()
            self.headers.append([{"key": k, "value": v} for k, v in headers] if headers else None)

    def flush(self, schema):
        import pyarrow as pa

        n = len(self.offsets)
        ends = [start for start, _ in self.counts[1:]] + [n]
        counts: list[int] = []
        for (start, count), end in zip(self.counts, ends):
            counts.extend([count] * (end - start))
        f = {field.name: field.type for field in schema}
        arrays = [
            pa.array(self.keys, type=f["key"]),
            pa.array(self.values, type=f["value"]),
            pa.array([self.topic] * n, type=f["topic"]),
            pa.array([self.partition] * n, type=f["partition"]),
            pa.array(self.offsets, type=f["offset"]),
            pa.array(self.ts, type=f["timestamp"]),
            pa.array(self.ts_types, type=f["timestampType"]),
            pa.array(self.headers, type=f["headers"]),
            pa.array(counts, type=f["deliveryCount"]),
        ]
        last = self.counts[-1][1] if self.counts else None
        self._reset()
        if last is not None:
            self.counts.append((0, last))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _consumer(opts: SourceOptions) -> tuple[_ConsumerKey, Consumer]:
    from confluent_kafka import Consumer

    config = opts.plain_consumer_config()
    key = tuple(sorted((k, str(v)) for k, v in config.items()))
    consumer = _CONSUMERS.get(key)
    if consumer is None:
        consumer = _CONSUMERS[key] = Consumer(config)
    return key, consumer


def _drop(key: _ConsumerKey) -> None:
    consumer = _CONSUMERS.pop(key, None)
    if consumer is not None:
        try:
            consumer.close()
        except Exception as exc:  # already broken: nothing more to release
            log.debug("kshare source: closing a reader: %s", exc)


@atexit.register
def _close_all() -> None:
    for key in list(_CONSUMERS):
        _drop(key)


def _batch_id() -> str:
    """Spark's batchId of the running task (a local property of every streaming job), for messages."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return (ctx.getLocalProperty("streaming.sql.batchId") or "?") if ctx is not None else "?"
    except Exception:
        return "?"


def read_ranges(opts: SourceOptions, topic: str, partition: int, ranges: list[list[int]]) -> Iterator:
    """Yield Arrow batches with every record in ``ranges`` (``[first, last, deliveryCount]``)."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    schema = arrow_schema()
    key, consumer = _consumer(opts)
    cols = _Columns(topic, partition)
    deadline = time.monotonic() + opts.read_timeout_ms / 1000
    healthy = False
    try:
        for first, last, count in sorted(ranges):
            consumer.assign([TopicPartition(topic, partition, first)])
            position = first
            while position <= last:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"kshare source: batch {_batch_id()}: reading {topic}[{partition}] offsets {first}..{last} "
                        f"from {opts.backend} took longer than readTimeoutMs={opts.read_timeout_ms}")
                msgs = consumer.consume(min(CONSUME_BATCH, last - position + 1), 0.5)
                ended = False
                keep = []
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            ended = True  # the rest of the range is gone (control records / truncation)
                            continue
                        raise KafkaException(err)
                    offset = msg.offset()
                    assert offset is not None  # a record (not an error event) always has its offset
                    if offset < position:
                        continue
                    if offset > last:
                        ended = True
                        break
                    keep.append(msg)
                    position = offset + 1
                if keep:
                    cols.add_many(keep, count)
                    if len(cols) >= ARROW_BATCH:
                        yield cols.flush(schema)
                if ended:
                    break
        consumer.unassign()
        if len(cols):
            yield cols.flush(schema)
        healthy = True
    finally:
        if not healthy:  # an error or an abandoned generator: do not reuse a client in an unknown state
            _drop(key)
