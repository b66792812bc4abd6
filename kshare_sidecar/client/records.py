"""Record batches (magic 2) from a ShareFetch response, decoded into :class:`ShareRecord` objects.

:func:`share_records` reads the batch headers, checks each batch's CRC and decompresses it here,
then builds the records of the acquired ranges with the compiled walk (``_records.c``, built
with the package where a C compiler exists): one ``ShareRecord`` per record, made from the
batch's bytes with nothing in between. Without it, aiokafka's record reader (``MemoryRecords``,
its C extension where aiokafka's wheels ship it) builds its own record objects and the
ShareRecords are made from their attributes, at about three times the cost a record. Exact
timestamps, LogAppendTime from the batch's max timestamp, as Kafka's consumer. Pure functions:
bytes in, records out, no I/O.

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
from aiokafka import codec
from aiokafka.errors import KafkaError
from aiokafka.record.memory_records import MemoryRecords
from crc32c import crc32c

_build: Any
try:
    from ._records import build as _build
except ImportError:  # built without a C compiler: aiokafka's reader
    _build = None

HEADER_SIZE = 61
_MAGIC = struct.Struct(">b").unpack_from  # at byte 16 of a batch
_LENGTH = struct.Struct(">i").unpack_from  # at byte 8
_BASE = struct.Struct(">q").unpack_from  # at byte 0
_CRC = struct.Struct(">I").unpack_from  # at byte 17: CRC-32C of everything from byte 21 to the batch's end
#: the whole header: base offset, length, leader epoch, magic, CRC, attributes, last offset delta,
#: base and max timestamps, producer id and epoch, base sequence, record count
_HEADER = struct.Struct(">qiibIhiqqqhii").unpack_from

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


#: codec id -> (name, whether its library is installed, decompress)
_CODECS: dict[int, tuple[str, Any, Any]] = {
    1: ("gzip", codec.has_gzip, codec.gzip_decode),
    2: ("snappy", codec.has_snappy, lambda b: codec.snappy_decode(bytes(b))),
    3: ("lz4", codec.has_lz4, lambda b: codec.lz4_decode(bytes(b))),
    4: ("zstd", codec.has_zstd, lambda b: codec.zstd_decode(bytes(b))),
}


def compiled() -> bool:
    """Whether the compiled record walk is in use."""
    return _build is not None


def share_records(topic: str, partition: int, data: bytes | memoryview, ranges: list[tuple[int, int, int]], *,
                  key_deserializer: Any = None, value_deserializer: Any = None, check_crcs: bool = True,
                  use_compiled: bool = True) -> tuple[list[ShareRecord], list[int]]:
    """The records of ``data`` inside the acquired ``ranges`` (``(first, last, delivery_count)``,
    sorted by offset), as ShareRecords, and their offsets. Records outside every range are
    someone else's (the broker sends whole batches) and are skipped; a truncated trailing batch is
    ignored; control batches give nothing. Raises :class:`RecordDecodeError` for bytes that are
    not v2 batches, a failed CRC or a codec that is not installed."""
    if _build is None or not use_compiled:
        records = _records_via_aiokafka(topic, partition, data, ranges, key_deserializer, value_deserializer,
                                        check_crcs)
        return records, [r.offset for r in records]
    out: list[ShareRecord] = []
    offsets: list[int] = []
    i, n = 0, len(ranges)
    view = memoryview(data)
    pos, size = 0, len(view)
    while i < n and size - pos >= HEADER_SIZE:
        (base, length, _, magic, crc, attributes, last_delta, base_ts, max_ts, _, _, _, count) = _HEADER(view, pos)
        end = pos + 12 + length
        if end > size:
            break  # cut at MaxBytes
        if magic != 2:
            raise RecordDecodeError(f"record batch at byte {pos} has magic {magic}; only v2 is read")
        if length < HEADER_SIZE - 12:
            raise RecordDecodeError(f"record batch at byte {pos} has impossible length {length}")
        if check_crcs and crc32c(view[pos + 21:end]) != crc:
            raise RecordDecodeError(f"record batch at offset {base} fails its CRC check")
        if not attributes & CONTROL_BIT and base + last_delta >= ranges[i][0]:
            section: Any = view
            start, stop = pos + HEADER_SIZE, end
            kind = attributes & COMPRESSION_MASK
            if kind:
                name, installed, decompress = _CODECS.get(kind, (str(kind), lambda: False, None))
                if not installed():
                    raise RecordDecodeError(f"record batch at offset {base} is compressed with {name}, "
                                            "whose library is not installed")
                try:
                    section = decompress(view[start:stop])
                except Exception as exc:  # each codec library raises its own kind
                    raise RecordDecodeError(f"record batch at offset {base}: cannot decompress ({name}): {exc}") from None
                start, stop = 0, len(section)
            try:
                i = _build(section, start, stop, count, base, base_ts, max_ts, attributes & TIMESTAMP_TYPE_BIT,
                           topic, partition, ranges, i, key_deserializer, value_deserializer, ShareRecord, out,
                           offsets)
            except (ValueError, UnicodeDecodeError, KafkaError) as exc:  # a malformed record, a deserializer
                raise RecordDecodeError(f"record batch at offset {base}: {exc}") from None
        pos = end
    return out, offsets


def _records_via_aiokafka(topic: str, partition: int, data: bytes | memoryview, ranges: list[tuple[int, int, int]],
                          key_de: Any, value_de: Any, check_crcs: bool) -> list[ShareRecord]:
    """:func:`share_records` with aiokafka's reader building the records first."""
    out: list[ShareRecord] = []
    append, new = out.append, ShareRecord
    i, n = 0, len(ranges)
    if not n:
        return out
    first, last, count = ranges[0]
    try:
        for batch in batches(data, check_crcs=check_crcs):
            for r in batch:
                offset = r.offset
                while offset > last:
                    i += 1
                    if i == n:
                        return out
                    first, last, count = ranges[i]
                if offset < first:
                    continue  # someone else's: the broker sends whole batches
                key, value, headers = r.key, r.value, r.headers
                append(new(topic, partition, offset, r.timestamp, r.timestamp_type,
                           key_de(key) if key_de else key, value_de(value) if value_de else value,
                           tuple(headers) if headers else (), count))
    except (KafkaError, ValueError, UnicodeDecodeError) as exc:  # aiokafka's reader: a codec not installed,
        raise RecordDecodeError(str(exc)) from None                 # a record it cannot read
    return out
