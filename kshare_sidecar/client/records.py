"""Record batches (magic 2) from a ShareFetch response, decoded into :class:`ShareRecord` objects.

The records are read by aiokafka's record reader (``MemoryRecords``: its C extension where
aiokafka's wheels ship it, as they do for every common platform; its pure-Python twin
otherwise): it walks the batch, checks the CRC, decompresses with the codecs installed and
builds each record in C, about four times faster than the Python walk it replaced (the consumer's
per-record cost is what the throughput benchmark measured against librdkafka). Exact timestamps,
LogAppendTime from the batch's max timestamp, as Kafka's consumer. Pure functions: bytes in,
records out, no I/O.

Batch layout (big-endian)::

    0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32
    21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64
    43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordsCount i32 | 61 records

Control batches (transaction markers) produce no records: their offsets are acquired by the
broker and acknowledged as GAP by the consumer, like compaction holes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from aiokafka.errors import KafkaError
from aiokafka.record.memory_records import MemoryRecords

HEADER_SIZE = 61
_MAGIC = struct.Struct(">b").unpack_from  # at byte 16 of a batch
_LENGTH = struct.Struct(">i").unpack_from  # at byte 8

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
CONTROL_BIT = 0x20

CREATE_TIME, LOG_APPEND_TIME = 0, 1


class RecordDecodeError(ValueError):
    """The bytes are not valid v2 record batches (old format, corruption or an unknown codec)."""


class ShareRecord(NamedTuple):
    """One record acquired by this consumer (aiokafka's ConsumerRecord fields + delivery_count).

    A named tuple, as kafka-python's ConsumerRecord: one object per record is the consumer's
    whole per-record allocation, and a tuple is built in C — a dataclass's ``__init__`` was a
    Python call per record and, with a list for the headers, two objects for the garbage
    collector to track (a fifth of a consumer's CPU at 100-byte records went to collections)."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # milliseconds since the epoch
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: Any
    value: Any
    headers: Sequence[tuple[str, bytes | None]] = ()
    delivery_count: int = 1


class RawRecord(NamedTuple):
    """A decoded record before deserialization (a NamedTuple: built once per record in the hot
    path, and a tuple is several times cheaper to create than a frozen dataclass)."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def batches(data: bytes | bytearray | memoryview, *, check_crcs: bool = True) -> Iterator[Any]:
    """The data batches in ``data`` (aiokafka ``DefaultRecordBatch``: iterate it for its records,
    each with ``offset``, ``timestamp``, ``timestamp_type``, ``key``, ``value``, ``headers``); a
    truncated trailing batch is ignored (a broker may cut the last batch at MaxBytes), control
    batches are skipped. Raises :class:`RecordDecodeError` for another magic, a failed CRC or a
    codec that is not installed."""
    buf = data if isinstance(data, bytes) else bytes(data)
    records = MemoryRecords(buf)
    pos, size = 0, len(buf)
    while size - pos >= HEADER_SIZE:
        (length,) = _LENGTH(buf, pos + 8)
        end = pos + 12 + length
        if end > size:
            return
        (magic,) = _MAGIC(buf, pos + 16)
        if magic != 2:  # checked here: aiokafka would read it as a legacy message set
            raise RecordDecodeError(f"record batch at byte {pos} has magic {magic}; only v2 is read")
        if length < HEADER_SIZE - 12:
            raise RecordDecodeError(f"record batch at byte {pos} has impossible length {length}")
        try:
            batch = records.next_batch()
        except (KafkaError, ValueError) as exc:
            raise RecordDecodeError(f"record batch at byte {pos}: {exc}") from None
        pos = end
        if check_crcs and not batch.validate_crc():
            raise RecordDecodeError(f"record batch at offset {batch.base_offset} fails its CRC check")
        if not batch.is_control_batch:
            yield batch


def decode_batches(data: bytes | memoryview, *, check_crcs: bool = True) -> Iterator[RawRecord]:
    """Every data record in ``data`` in log order (see :func:`batches`)."""
    raw = RawRecord
    for batch in batches(data, check_crcs=check_crcs):
        try:
            for r in batch:
                yield raw(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, tuple(r.headers))
        except (KafkaError, ValueError, struct.error, UnicodeDecodeError) as exc:
            raise RecordDecodeError(f"record batch at offset {batch.base_offset}: {exc}") from None
