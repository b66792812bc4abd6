"""The source's rows as Arrow: the schema, and decoded records (``decode.Records``) as a batch.

Key, value and header columns are built without touching a record in Python: the positions the
decoder found become the offsets of one Arrow binary array *over the Fetch response's own bytes*
that alternates each record's field with the bytes between two fields; ``take`` of its even
elements (C++) then copies each key or value once into a compact array. Null keys and values
(length -1) are null elements. The other columns are numpy arrays handed to Arrow, and the
constant ones Arrow ``repeat``s.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .decode import Records


def arrow_schema(include_headers: bool = False):
    """The Arrow form of ``source.SCHEMA`` (``SCHEMA_WITH_HEADERS`` with ``include_headers``)."""
    import pyarrow as pa

    headers = [("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))]
    return pa.schema([
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        *(headers if include_headers else []),
        ("deliveryCount", pa.int32()),
    ])


@lru_cache(maxsize=8)
def _evens(n: int):
    import pyarrow as pa

    return pa.array(np.arange(0, 2 * n - 1, 2, dtype=np.int64))


def binary_column(data, pos: np.ndarray, length: np.ndarray, kind=None):
    """Elements ``data[pos[i]:pos[i] + length[i]]`` (``length[i] < 0``: null) as a compact Arrow
    binary (or ``kind``, e.g. string) array. ``pos`` must ascend with the fields disjoint, as the
    fields of consecutive records are."""
    import pyarrow as pa

    kind = kind or pa.binary()
    n = len(pos)
    if n == 0:
        return pa.array([], kind)
    if int(pos[-1]) + max(int(length[-1]), 0) >= 2**31:
        raise ValueError("a Fetch response over 2 GiB")  # fetch.max.bytes is far below; int32 offsets
    ends = pos + np.maximum(length, 0)
    offsets = np.empty(2 * n, np.int32)
    offsets[0::2] = pos
    offsets[1::2] = ends
    nulls = length < 0
    validity = None
    if nulls.any():
        valid = np.ones(2 * n - 1, bool)
        valid[0::2] = ~nulls
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    source = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    interleaved = pa.Array.from_buffers(kind, 2 * n - 1, [validity, pa.py_buffer(offsets), source])
    return interleaved.take(_evens(n))


def record_batch(recs: Records, counts: np.ndarray, topic: str, partition: int, schema):
    """One Arrow record batch of ``recs`` (delivered ``counts[i]`` times) in ``schema``."""
    import pyarrow as pa

    n = len(recs)
    f = {field.name: field.type for field in schema}
    data = pa.py_buffer(recs.data)
    stamps = recs.timestamp
    columns = {
        "key": binary_column(data, recs.key_pos, recs.key_len),
        "value": binary_column(data, recs.value_pos, recs.value_len),
        "topic": pa.repeat(pa.scalar(topic, f["topic"]), n),
        "partition": pa.repeat(pa.scalar(partition, f["partition"]), n),
        "offset": pa.array(recs.offset, f["offset"]),
        "timestamp": pa.array(stamps * 1000, f["timestamp"], mask=stamps < 0),
        "timestampType": pa.array(recs.log_append_time.astype(np.int32), f["timestampType"]),
        "deliveryCount": pa.array(counts.astype(np.int32, copy=False), f["deliveryCount"]),
    }
    if "headers" in f:
        columns["headers"] = _headers(data, recs, f["headers"])
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def _headers(data, recs: Records, kind):
    """list<struct<key: string, value: binary>>: a record's headers in order, null when it has none
    (as the librdkafka reader gave them, and Spark's Kafka source: an empty array there)."""
    import pyarrow as pa

    count = recs.header_count
    assert count is not None and recs.header_key_pos is not None and recs.header_key_len is not None
    assert recs.header_value_pos is not None and recs.header_value_len is not None
    n = len(count)
    if not count.any():
        return pa.nulls(n, kind)
    struct = kind.value_type
    keys = binary_column(data, recs.header_key_pos, recs.header_key_len, struct.field("key").type)
    values = binary_column(data, recs.header_value_pos, recs.header_value_len, struct.field("value").type)
    items = pa.StructArray.from_arrays([keys, values], fields=list(struct))
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(count, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=kind, mask=pa.array(count == 0))
