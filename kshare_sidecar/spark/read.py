"""Executor side: read exactly the acquired offsets from the backend with a plain consumer.

Executors never join the share group. Each Spark input partition holds the ranges of one
topic-partition; the reader assigns and seeks to each range's first offset, keeps only
offsets inside the ranges, and yields Arrow record batches (much faster than Python rows).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from .options import SourceOptions

ARROW_BATCH = 8192

#: librdkafka timestamp types -> Spark Kafka source's timestampType (0 create, 1 log-append).
_TS_TYPE = {1: 0, 2: 1}


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
    def __init__(self) -> None:
        self.cols: list[list] = [[] for _ in range(9)]

    def __len__(self) -> int:
        return len(self.cols[0])

    def add(self, msg, count: int) -> None:
        c = self.cols
        ts_type, ts = msg.timestamp()
        headers = msg.headers()
        c[0].append(msg.key())
        c[1].append(msg.value())
        c[2].append(msg.topic())
        c[3].append(msg.partition())
        c[4].append(msg.offset())
        c[5].append(ts * 1000 if ts_type and ts >= 0 else None)
        c[6].append(_TS_TYPE.get(ts_type, -1))
        c[7].append([{"key": k, "value": v} for k, v in headers] if headers else None)
        c[8].append(count)

    def flush(self, schema):
        import pyarrow as pa

        arrays = [pa.array(col, type=f.type) for col, f in zip(self.cols, schema)]
        self.cols = [[] for _ in range(9)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_ranges(opts: SourceOptions, topic: str, partition: int, ranges: list[list[int]]) -> Iterator:
    """Yield Arrow batches with every record in ``ranges`` (``[first, last, deliveryCount]``)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    schema = arrow_schema()
    consumer = Consumer(opts.plain_consumer_config())
    cols = _Columns()
    deadline = time.monotonic() + opts.read_timeout_ms / 1000
    try:
        for first, last, count in sorted(ranges):
            consumer.assign([TopicPartition(topic, partition, first)])
            position = first
            while position <= last:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"kshare source: reading {topic}[{partition}] offsets {first}..{last} from "
                        f"{opts.backend} took longer than readTimeoutMs={opts.read_timeout_ms}")
                msgs = consumer.consume(min(10_000, last - position + 1), 0.5)
                ended = False
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            ended = True  # the rest of the range is gone (control records / truncation)
                            continue
                        raise KafkaException(err)
                    offset = msg.offset()
                    if offset < position:
                        continue
                    if offset > last:
                        ended = True
                        break
                    cols.add(msg, count)
                    position = offset + 1
                    if len(cols) >= ARROW_BATCH:
                        yield cols.flush(schema)
                if ended:
                    break
            consumer.unassign()
        if len(cols):
            yield cols.flush(schema)
    finally:
        consumer.close()
