"""Executor side with ``readClient=librdkafka``: read exactly the acquired offsets with a plain consumer.

The default reader is ``read.py`` (raw Fetch requests decoded straight into Arrow columns); this
one stays for settings only librdkafka has (GSSAPI, OAUTHBEARER setups, socket tuning, ...:
``readclient.py``). Executors never join the share group. The reader keeps only offsets inside
the ranges and yields Arrow record batches.

Speed (profiled on a 2-core machine): building a librdkafka client, connecting and
fetching metadata cost more than reading a 10k-record range, once per task and batch. Spark
reuses its Python workers (``spark.python.worker.reuse``, default true), so plain consumers are
kept per worker process — one per configuration and topic-partition, at most ``MAX_READERS``, as
Spark's own Kafka source caches one consumer per topic-partition and executor — and each stays
**assigned** to its partition between tasks. A range is read through to its end without consuming
past it, so the reader knows where its queue goes on (``next_offset``): librdkafka fetches ahead
(about one fetch, ``queued.min.messages``) while Spark commits the batch and plans the next, and
when this worker gets the next range of the same partition — it starts where the last one ended
— it is read from that queue without a seek or a fetch round trip (a 10k-record range: 17.7 ms
wall of which 8.1 ms the task's own CPU, measured alone). Any other range seeks, which drops the
queue. The Arrow columns are built without Python work per record (``_Columns``), and the
worker's objects from the imports are frozen out of the garbage collector that PySpark runs
after every task (``gcfreeze.py``).
"""

from __future__ import annotations

import atexit
import logging
import time
from collections import OrderedDict
from collections.abc import Iterator
from itertools import chain, compress
from typing import TYPE_CHECKING

from . import gcfreeze
from .arrow import arrow_schema
from .options import SourceOptions

if TYPE_CHECKING:  # imported lazily at run time: executors load it only when reading
    from confluent_kafka import Consumer

log = logging.getLogger("kshare.spark")

ARROW_BATCH = 8192
#: Records per consume() call.
CONSUME_BATCH = 10_000

#: One plain consumer per Python worker process, configuration and topic-partition, kept assigned
#: (see the module docstring); at most MAX_READERS per worker, least recently used closed first
#: (Spark's Kafka source caches 64 consumers per executor: spark.kafka.consumer.cache.capacity).
_ReaderKey = tuple[tuple[tuple[str, str], ...], str, int]
_READERS: OrderedDict[_ReaderKey, _Reader] = OrderedDict()
MAX_READERS = 16


class _Columns:
    """The kept records of one topic-partition until the next Arrow batch, built column by column.

    Each ``Message`` accessor runs over the whole list in C (``map``) and the derived columns
    come from numpy and Arrow, so there is no Python work per record (the per-record
    loop was ~40% of an executor's Python time). Constant columns are Arrow ``repeat``s, the
    delivery counts one numpy ``repeat`` per range.
    """

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.msgs: list = []
        #: the offsets of ``msgs`` as the read loop computed them (one array per add_many), or []
        self.offsets: list = []
        self.counts: list[tuple[int, int]] = []  # (first row, deliveryCount) per run

    def __len__(self) -> int:
        return len(self.msgs)

    def add_many(self, msgs: list, count: int, offsets=None) -> None:
        """Keep ``msgs`` (delivered ``count`` times); ``offsets``: their offsets as a numpy array
        if the caller has it (the read loop does), so that flush need not ask every message again."""
        if not self.counts or self.counts[-1][1] != count:
            self.counts.append((len(self.msgs), count))
        if offsets is None or (self.msgs and not self.offsets):
            self.offsets = []  # not known for every kept message: flush asks the messages
        else:
            self.offsets.append(offsets)
        self.msgs.extend(msgs)

    def flush(self, schema):
        import numpy as np
        import pyarrow as pa
        from confluent_kafka import Message

        msgs, n = self.msgs, len(self.msgs)
        f = {field.name: field.type for field in schema}
        stamps = np.fromiter(chain.from_iterable(map(Message.timestamp, msgs)), np.int64, 2 * n).reshape(n, 2)
        kinds, millis = stamps[:, 0], stamps[:, 1]
        ts_types = np.full(n, -1, np.int32)  # librdkafka: 1 create time, 2 log-append time
        ts_types[kinds == 1] = 0
        ts_types[kinds == 2] = 1
        starts = [start for start, _ in self.counts] + [n]
        counts = np.repeat(np.array([count for _, count in self.counts], np.int32), np.diff(starts))
        offsets = (np.concatenate(self.offsets) if self.offsets
                   else np.fromiter(map(Message.offset, msgs), np.int64, n))
        columns = {
            "key": pa.array(list(map(Message.key, msgs)), type=f["key"]),
            "value": pa.array(list(map(Message.value, msgs)), type=f["value"]),
            "topic": pa.repeat(pa.scalar(self.topic, f["topic"]), n),
            "partition": pa.repeat(pa.scalar(self.partition, f["partition"]), n),
            "offset": pa.array(offsets, type=f["offset"]),
            "timestamp": pa.array(millis * 1000, type=f["timestamp"], mask=(kinds == 0) | (millis < 0)),
            "timestampType": pa.array(ts_types, type=f["timestampType"]),
            "deliveryCount": pa.array(counts, type=f["deliveryCount"]),
        }
        if "headers" in f:  # includeHeaders=true
            headers = list(map(Message.headers, msgs))
            # librdkafka gives (key, value) tuples, which Arrow takes as structs; no headers -> null
            columns["headers"] = (pa.array([h or None for h in headers], type=f["headers"]) if any(headers)
                                  else pa.nulls(n, f["headers"]))
        arrays = [columns[name] for name in schema.names]
        last = self.counts[-1][1] if self.counts else None
        self.msgs = []
        self.offsets = []
        self.counts = [(0, last)] if last is not None else []
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _Reader:
    """One plain consumer assigned to one topic-partition for good, and where its queue goes on."""

    __slots__ = ("consumer", "next_offset")

    def __init__(self, consumer: Consumer, next_offset: int) -> None:
        self.consumer = consumer
        #: the offset of the next message the consumer's queue delivers (None: unknown, seek)
        self.next_offset: int | None = next_offset


def _reader(opts: SourceOptions, topic: str, partition: int, first: int) -> tuple[_ReaderKey, _Reader]:
    """This worker's reader of ``topic[partition]``, created and assigned at ``first`` if new;
    the least recently used one is closed beyond ``MAX_READERS``."""
    from confluent_kafka import Consumer, TopicPartition

    config = opts.plain_consumer_config()
    key = (tuple(sorted((k, str(v)) for k, v in config.items())), topic, partition)
    reader = _READERS.pop(key, None)
    if reader is None:
        consumer = Consumer(config)
        consumer.assign([TopicPartition(topic, partition, first)])
        reader = _Reader(consumer, first)
    _READERS[key] = reader  # most recently used last
    while len(_READERS) > MAX_READERS:
        _drop(next(iter(_READERS)))
    return key, reader


def _drop(key: _ReaderKey) -> None:
    reader = _READERS.pop(key, None)
    if reader is not None:
        try:
            reader.consumer.close()
        except Exception as exc:  # already broken: nothing more to release
            log.debug("kshare source: closing a reader: %s", exc)


@atexit.register
def _close_all() -> None:
    for key in list(_READERS):
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
    import numpy as np
    from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

    schema = arrow_schema(opts.include_headers)
    ranges = sorted(ranges)
    key, reader = _reader(opts, topic, partition, ranges[0][0] if ranges else 0)
    consumer = reader.consumer
    gcfreeze.freeze_imports()  # after the imports above: see gcfreeze.py
    cols = _Columns(topic, partition)
    deadline = time.monotonic() + opts.read_timeout_ms / 1000
    healthy = False
    try:
        for first, last, count in ranges:
            if reader.next_offset != first:  # else the queue already holds (the start of) this range
                consumer.seek(TopicPartition(topic, partition, first))
            reader.next_offset = None  # unknown until this range is read through
            position = first
            while position <= last:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"kshare source: batch {_batch_id()}: reading {topic}[{partition}] offsets {first}..{last} "
                        f"from {opts.backend} took longer than readTimeoutMs={opts.read_timeout_ms}")
                msgs = consumer.consume(min(CONSUME_BATCH, last - position + 1), 0.5)
                if not msgs:
                    continue
                ended = False
                if any(map(Message.error, msgs)):  # rare: an end-of-partition event or an error
                    good = []
                    for msg in msgs:
                        err = msg.error()
                        if err is None:
                            good.append(msg)
                        elif err.code() == KafkaError._PARTITION_EOF:
                            # The log ends at msg.offset(): past `last`, the rest of the range has no
                            # data (control records, compaction). At or before it, the event is an old
                            # one from this reader's fetch-ahead, queued before the range was written.
                            ended = ended or (msg.offset() or 0) > last
                        else:
                            raise KafkaException(err)
                    msgs = good
                    if not msgs:
                        if ended:
                            break
                        continue
                offsets = np.fromiter(map(Message.offset, msgs), np.int64, len(msgs))
                inside = (offsets >= position) & (offsets <= last)
                if (offsets > last).any():
                    ended = True
                if inside.any():
                    if inside.all():
                        cols.add_many(msgs, count, offsets)
                    else:
                        cols.add_many(list(compress(msgs, inside.tolist())), count, offsets[inside])
                    position = int(offsets[inside].max()) + 1
                    if len(cols) >= ARROW_BATCH:
                        yield cols.flush(schema)
                if ended:
                    break
            # Read through to `last` without consuming past it: the queue goes on at last + 1 (an
            # offset without data there is skipped by the fetch anyway).
            reader.next_offset = last + 1 if position == last + 1 else None
        if len(cols):
            yield cols.flush(schema)
        healthy = True
    finally:
        if not healthy:  # an error or an abandoned generator: do not reuse a client in an unknown state
            _drop(key)
