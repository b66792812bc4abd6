"""Record batches (magic 2) from a ShareFetch response, decoded into :class:`ShareRecord` objects.

Why our own decoder and not kio's ``kio.records.readers.read_batch``: kio's reader truncates
record timestamps to whole seconds and does not decompress, and a share consumer must hand out
exact timestamps from compressed batches (producers compress by default in most clients).
Decompression uses aiokafka's codecs (aiokafka is already a dependency); varints use kio's
native readers. Pure functions: bytes in, records out, no I/O.

Batch layout (big-endian)::

    0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32
    21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64
    43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordsCount i32 | 61 records

Control batches (transaction markers) produce no records: their offsets are acquired by the
broker and acknowledged as GAP by the consumer, like compaction holes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from crc32c import crc32c
from kio.serial.readers import read_signed_varint, read_signed_varlong

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_LOG_OVERHEAD = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
CONTROL_BIT = 0x20

CREATE_TIME, LOG_APPEND_TIME = 0, 1


class RecordDecodeError(ValueError):
    """The bytes are not valid v2 record batches (old format, corruption or an unknown codec)."""


@dataclass(slots=True)
class ShareRecord:
    """One record acquired by this consumer (aiokafka's ConsumerRecord fields + delivery_count)."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # milliseconds since the epoch
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
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


def _decompress(codec: int, data: bytes) -> bytes:
    from aiokafka import codec as c

    if codec == 1:
        return c.gzip_decode(data)
    if codec == 2 and c.has_snappy():
        return c.snappy_decode(data)
    if codec == 3 and c.has_lz4():
        return c.lz4_decode(data)
    if codec == 4 and c.has_zstd():
        return c.zstd_decode(data)
    names = {2: "snappy (pip install python-snappy)", 3: "lz4 (pip install lz4)",
             4: "zstd (pip install zstandard)"}
    raise RecordDecodeError(f"record batch compressed with {names.get(codec, f'codec {codec}')}, "
                            "which is not available")


def _bytes_field(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, size = read_signed_varint(buf, pos)
    pos += size
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buf):
        raise RecordDecodeError("record field runs past the end of its batch")
    return buf[pos:end], end


def _records(buf: bytes, count: int, base_offset: int, base_ts: int, ts_type: int,
             max_ts: int) -> Iterator[RawRecord]:
    # The per-record hot path of the consumer (the throughput benchmark's profile): key and value
    # are read inline rather than through _bytes_field, names are bound locally.
    varint, varlong, raw, size_limit = read_signed_varint, read_signed_varlong, RawRecord, len(buf)
    append_time = ts_type == LOG_APPEND_TIME
    pos = 0
    for _ in range(count):
        length, size = varint(buf, pos)
        pos += size
        end = pos + length
        ts_delta, size = varlong(buf, pos + 1)  # + 1: attributes (unused in v2 records)
        pos += 1 + size
        off_delta, size = varint(buf, pos)
        pos += size
        n, size = varint(buf, pos)
        pos += size
        if n < 0:
            key = None
        else:
            key, pos = buf[pos:pos + n], pos + n
        n, size = varint(buf, pos)
        pos += size
        if n < 0:
            value = None
        else:
            value, pos = buf[pos:pos + n], pos + n
        n, size = varint(buf, pos)
        pos += size
        headers: tuple = ()
        if n:
            items = []
            for _ in range(n):
                hkey, pos = _bytes_field(buf, pos)
                hval, pos = _bytes_field(buf, pos)
                items.append(((hkey or b"").decode("utf-8", "replace"), hval))
            headers = tuple(items)
        if pos != end or pos > size_limit:
            raise RecordDecodeError(f"record at offset {base_offset + off_delta} has a wrong length")
        yield raw(base_offset + off_delta, max_ts if append_time else base_ts + ts_delta, ts_type, key, value,
                  headers)


def decode_batches(data: bytes | memoryview, *, check_crcs: bool = True) -> Iterator[RawRecord]:
    """Every data record in ``data`` in log order; a truncated trailing batch is ignored (a
    broker may cut the last batch at MaxBytes). Control batches yield nothing."""
    buf = bytes(data)
    pos, size = 0, len(buf)
    while size - pos >= HEADER_SIZE:
        (base_offset, length, _epoch, magic, crc, attrs, _last_delta, base_ts, max_ts, _pid, _pepoch,
         _seq, count) = _HEADER.unpack_from(buf, pos)
        end = pos + _LOG_OVERHEAD + length
        if end > size:
            break
        if magic != 2:
            raise RecordDecodeError(f"record batch at offset {base_offset} has magic {magic}; only v2 is read")
        if length < HEADER_SIZE - _LOG_OVERHEAD:
            raise RecordDecodeError(f"record batch at offset {base_offset} has impossible length {length}")
        if check_crcs and crc32c(memoryview(buf)[pos + 21:end]) != crc:
            raise RecordDecodeError(f"record batch at offset {base_offset} fails its CRC check")
        if not attrs & CONTROL_BIT:
            body = buf[pos + HEADER_SIZE:end]
            codec = attrs & COMPRESSION_MASK
            if codec:
                body = _decompress(codec, body)
            ts_type = LOG_APPEND_TIME if attrs & TIMESTAMP_TYPE_BIT else CREATE_TIME
            yield from _records(body, count, base_offset, base_ts, ts_type, max_ts)
        pos = end
