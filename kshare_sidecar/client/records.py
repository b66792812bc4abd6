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

import msgspec
from aiokafka.errors import KafkaError
from aiokafka.record.memory_records import MemoryRecords
from crc32c import crc32c

HEADER_SIZE = 61
_MAGIC = struct.Struct(">b").unpack_from  # at byte 16 of a batch
_LENGTH = struct.Struct(">i").unpack_from  # at byte 8
_BASE = struct.Struct(">q").unpack_from  # at byte 0
_CRC = struct.Struct(">I").unpack_from  # at byte 17: CRC-32C of everything from byte 21 to the batch's end

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
CONTROL_BIT = 0x20

CREATE_TIME, LOG_APPEND_TIME = 0, 1


class RecordDecodeError(ValueError):
    """The bytes are not valid v2 record batches (old format, corruption or an unknown codec)."""


class ShareRecord(msgspec.Struct, frozen=True, gc=False):
    """One record acquired by this consumer (aiokafka's ConsumerRecord fields + delivery_count):
    attributes, equality, hashing, ``record._replace(...)`` for a changed copy.

    A frozen msgspec ``Struct`` that the garbage collector never tracks. One object per record is
    the consumer's whole per-record allocation, and what kind of object decides what the
    collector does with it: a named tuple (until 2026-11-30) is a tuple *subclass*, which CPython
    never untracks, so every batch the application held across a collection went to the older
    generations and set off full collections of the whole heap (~60k objects after the imports,
    20–30 ms each; up to five per 300k records). A ``Struct`` is also
    made in C without the intermediate tuple ``tuple.__new__`` needs (0.09 against 0.16 µs).
    Untracked means a cycle through a record is never collected: a deserialized value made to
    refer back to its own record would leak (nothing in the consumer does that)."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # milliseconds since the epoch
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: Any
    value: Any
    headers: Sequence[tuple[str, bytes | None]] = ()
    delivery_count: int = 1

    def _replace(self, **changes: Any) -> ShareRecord:
        """A copy with ``changes`` (the named tuple's spelling, kept)."""
        return msgspec.structs.replace(self, **changes)


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
    view = memoryview(buf)
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
        # The CRC is checked here, with the crc32c package (kio's dependency: SSE 4.2 / ARMv8
        # instructions where the CPU has them), not with aiokafka's ``validate_crc``, a table
        # lookup per byte: ~0.55 µs a 1 KiB record, more than building the record; ~0.02 µs here.
        if check_crcs and crc32c(view[pos + 21:end]) != _CRC(buf, pos + 17)[0]:
            (base_offset,) = _BASE(buf, pos)
            raise RecordDecodeError(f"record batch at offset {base_offset} fails its CRC check")
        try:
            batch = records.next_batch()
        except (KafkaError, ValueError) as exc:
            raise RecordDecodeError(f"record batch at byte {pos}: {exc}") from None
        pos = end
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
