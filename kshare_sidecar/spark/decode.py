"""Kafka record batches (magic 2) decoded into column arrays, with no Python object per record.

Why: the executors used to read with librdkafka, which builds a Python ``Message`` per record
before the rows become Arrow columns; that was most of an executor's CPU (docs/spark.md). Here a
Fetch response's record bytes become numpy arrays of positions and numbers: where each record's
key, value and headers lie in the buffer, its offset, timestamp and type. ``read.py`` turns them
into Arrow columns that point into the same buffer (one copy of the key and value bytes, in C).

How, per Fetch response:

* Batch headers (61 bytes each) with one ``struct`` call per batch: batches outside the wanted
  offsets, control batches and, for read_committed, batches of aborted transactions are skipped
  without decompressing them (the Java consumer's rules, below).
* A compressed batch is decompressed whole: gzip with the standard library's ``zlib``; snappy,
  lz4 and zstd with ``cramjam`` (Rust codecs, the library aiokafka uses too).
* Record starts: a record begins with its length, so finding where record *i + 1* starts needs
  record *i*'s length -- a chain no numpy operation can follow. ``walk`` is that chain only; the
  compiled helper (``_walk.c``, built with the package where a C compiler exists) runs it at
  memory speed, and a pure-Python loop of the same chain is the fallback.
* Every other field (timestamp delta, offset delta, key and value lengths, header count and the
  headers) is read for all records at once with numpy, one varint column at a time, and checked:
  every record must end exactly where its length says.

read_committed (the isolation a reader asks for, ``isolation.level``): Kafka answers such a Fetch
only up to the last stable offset and lists the aborted transactions that overlap what it sent;
as Kafka's Java consumer does, a transactional batch is dropped while its producer has an aborted
transaction that began at or before the batch's last offset and whose abort marker (a control
batch of that producer with an ABORT record) has not been passed yet.
"""

from __future__ import annotations

import heapq
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from . import _chain

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
_LOG_OVERHEAD = 12  # baseOffset + batchLength
_MIN_LENGTH = HEADER_SIZE - _LOG_OVERHEAD

COMPRESSION_MASK = 0x07
LOG_APPEND_TIME_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
_ABORT = 0  # control record key: version int16, type int16 (0 ABORT, 1 COMMIT)

CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_XERIAL = b"\x82SNAPPY\x00"  # Java's snappy framing (SnappyOutputStream); librdkafka writes raw snappy


class RecordFormatError(ValueError):
    """The bytes are not valid v2 record batches (old message format, corruption, unknown codec)."""


@dataclass
class Records:
    """Data records of one Fetch response, column by column; positions index ``data``.

    A length of -1 is a null key or value. ``header_*`` are flat (every header of every record,
    in order) and only decoded when asked for; ``header_count`` is then per record.
    """

    data: Any  # bytes-like: the Fetch response's records, or the decompressed batches joined
    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64 milliseconds; -1: none
    log_append_time: np.ndarray  # bool
    key_pos: np.ndarray
    key_len: np.ndarray
    value_pos: np.ndarray
    value_len: np.ndarray
    header_count: np.ndarray | None = None
    header_key_pos: np.ndarray | None = None
    header_key_len: np.ndarray | None = None
    header_value_pos: np.ndarray | None = None
    header_value_len: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offset)

    def take(self, keep: np.ndarray) -> Records:
        """These records where ``keep`` (a bool mask) is true."""
        if keep.all():
            return self
        pick = {name: getattr(self, name)[keep] for name in ("offset", "timestamp", "log_append_time", "key_pos",
                                                             "key_len", "value_pos", "value_len")}
        out = Records(self.data, **pick)
        if self.header_count is not None:
            assert self.header_key_pos is not None and self.header_key_len is not None
            assert self.header_value_pos is not None and self.header_value_len is not None
            per_header = np.repeat(keep, self.header_count)
            out.header_count = self.header_count[keep]
            out.header_key_pos = self.header_key_pos[per_header]
            out.header_key_len = self.header_key_len[per_header]
            out.header_value_pos = self.header_value_pos[per_header]
            out.header_value_len = self.header_value_len[per_header]
        return out


class _Kept(NamedTuple):
    """A batch whose records are read: where its records section lies, and its header fields."""

    source: Any  # the buffer holding the section (the response, or the decompressed batch)
    start: int
    end: int
    records: int
    base: int  # base offset
    base_ts: int
    max_ts: int
    append_time: bool
    dense: bool  # offsets base .. base + count - 1 without a gap (not compacted): record i is base + i


@dataclass
class Decoded:
    records: Records
    #: one past the last offset of the last complete batch (where the next Fetch starts), or the
    #: ``first`` asked for when the buffer held no complete batch
    next_offset: int
    #: data records dropped: of aborted transactions (read_committed)
    aborted: int = 0
    #: the largest complete batch in the buffer, in bytes, and the bytes per offset of the
    #: complete batches (size the next Fetch)
    largest_batch: int = 0
    bytes_per_offset: float = 0.0


def decompress(codec: int, raw: Any) -> bytes:
    """A batch's records section, decompressed."""
    if codec == 1:  # one gzip member per batch; several are read in turn all the same
        out = []
        data = bytes(raw)
        while data:
            d = zlib.decompressobj(47)  # 32 + 15: gzip or zlib header, detected
            out.append(d.decompress(data))
            data = d.unused_data
        return b"".join(out)
    try:
        import cramjam
    except ImportError:
        raise RecordFormatError(f"a record batch is compressed with {CODECS.get(codec, codec)}, which needs "
                                "cramjam: pip install 'kshare-sidecar[spark]' (or cramjam)") from None
    if codec == 2:
        view = memoryview(raw)
        if bytes(view[:8]) == _XERIAL:  # 16-byte header, then (int32 length, raw block)*
            pos, parts = 16, []
            while pos + 4 <= len(view):
                size = int.from_bytes(view[pos:pos + 4], "big")
                parts.append(bytes(cramjam.snappy.decompress_raw(view[pos + 4:pos + 4 + size])))
                pos += 4 + size
            return b"".join(parts)
        return bytes(cramjam.snappy.decompress_raw(raw))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(raw))  # the LZ4 frame format, as Kafka writes it
    if codec == 4:
        return bytes(cramjam.zstd.decompress(raw))
    raise RecordFormatError(f"a record batch has unknown compression codec {codec}")


def varints(a: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints (Kafka's varint / varlong) at ``pos`` in ``a`` (uint8): (values, sizes).

    One byte position per round for all of them at once (``take`` with ``clip``: a byte read past
    the buffer belongs to a varint that does not end inside its record, which the caller's
    length check refuses); signed 64-bit arithmetic up to 9 bytes, the rare 10-byte varlong
    in unsigned arithmetic (:func:`_long_varints`)."""
    b = a[pos]
    cont = b >= 0x80
    if not cont.any():  # all one byte: the common case for small fields
        v = b.astype(np.int64)
        return (v >> 1) ^ -(v & 1), np.ones(len(pos), np.int64)
    val = (b & 0x7F).astype(np.int64)
    size = cont.astype(np.int64) + 1
    for k in range(1, 9):
        nb = np.take(a, pos + k, mode="clip")
        val |= np.where(cont, (nb & 0x7F).astype(np.int64) << (7 * k), 0)
        cont &= nb >= 0x80
        if not cont.any():
            return (val >> 1) ^ -(val & 1), size
        size += cont
    return _long_varints(a, pos)


def _long_varints(a: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`varints` for columns with a varint of 10 bytes (a varlong beyond +-2**62)."""
    b = a[pos]
    more = np.flatnonzero(b >= 0x80)
    val = (b & 0x7F).astype(np.uint64)
    size = np.ones(len(pos), np.int64)
    shift = np.uint64(7)
    while more.size:
        if shift > 63:
            raise RecordFormatError("a varint is longer than 10 bytes")
        nb = a[pos[more] + size[more]]
        val[more] |= (nb & 0x7F).astype(np.uint64) << shift
        size[more] += 1
        more = more[nb >= 0x80]
        shift += np.uint64(7)
    half = (val >> np.uint64(1)).astype(np.int64)
    return half ^ -((val & np.uint64(1)).astype(np.int64)), size


def _control_type(data: Any, pos: int) -> int:
    """The type of the first control record at ``pos`` (a record's length varint): 0 ABORT, 1 COMMIT."""
    a = np.frombuffer(data, np.uint8)
    p = np.array([pos], np.int64)
    _, s = varints(a, p)
    p = p + s + 1  # attributes
    for _ in range(2):  # timestamp delta, offset delta
        _, s = varints(a, p)
        p = p + s
    klen, s = varints(a, p)
    p = p + s
    if klen[0] < 4:
        raise RecordFormatError("a control record's key is shorter than 4 bytes")
    start = int(p[0])
    return int.from_bytes(bytes(data[start + 2:start + 4]), "big", signed=True)


def decode(buf: Any, *, first: int, last: int, read_committed: bool = False,
           aborted: Sequence[tuple[int, int]] = (), headers: bool = False,
           check_crcs: bool = False) -> Decoded:
    """The data records with ``first <= offset <= last`` in the complete batches of ``buf`` (one
    partition's ``records`` of a Fetch response); ``aborted``: the response's
    (producer id, first offset) pairs, used with ``read_committed``."""
    view = memoryview(buf)
    size = len(view)
    pos = 0
    next_offset = first
    pending = sorted((int(o), int(p)) for p, o in aborted) if read_committed else []
    heapq.heapify(pending)
    aborting: set[int] = set()
    kept: list[_Kept] = []
    dropped = largest = 0
    first_base = -1
    while size - pos >= HEADER_SIZE:
        (base, length, _epoch, magic, crc, attrs, last_delta, base_ts, max_ts, producer, _pepoch, _seq,
         count) = HEADER.unpack_from(view, pos)
        end = pos + _LOG_OVERHEAD + length
        if end > size:
            break  # a truncated trailing batch: Kafka cuts the last one at the fetch size
        if magic != 2:
            raise RecordFormatError(f"the record batch at offset {base} has magic {magic}: only the v2 format "
                                    "(Kafka 0.11+) is read; readClient=librdkafka reads older formats")
        if length < _MIN_LENGTH:
            raise RecordFormatError(f"the record batch at offset {base} has an impossible length {length}")
        batch_last = base + last_delta
        next_offset = max(next_offset, batch_last + 1)
        largest = max(largest, end - pos)
        first_base = base if first_base < 0 else first_base
        if read_committed and producer >= 0:
            while pending and pending[0][0] <= batch_last:
                aborting.add(heapq.heappop(pending)[1])
        control = bool(attrs & CONTROL_BIT)
        wanted = batch_last >= first and base <= last and count > 0
        if control:
            if read_committed and producer in aborting and count > 0:
                body = _body(view, pos, end, attrs, crc, check_crcs, base)
                if _control_type(body, 0) == _ABORT:
                    aborting.discard(producer)
        elif wanted:
            if read_committed and attrs & TRANSACTIONAL_BIT and producer in aborting:
                dropped += count
            else:
                codec = attrs & COMPRESSION_MASK
                append_time, dense = bool(attrs & LOG_APPEND_TIME_BIT), count == last_delta + 1
                if codec or check_crcs:
                    body = _body(view, pos, end, attrs, crc, check_crcs, base)
                    kept.append(_Kept(body, 0, len(body), count, base, base_ts, max_ts, append_time, dense))
                else:
                    kept.append(_Kept(buf, pos + HEADER_SIZE, end, count, base, base_ts, max_ts, append_time, dense))
        pos = end
    records = _columns(buf, kept, headers, first, last)
    if len(records):
        records = records.take((records.offset >= first) & (records.offset <= last))
    covered = next_offset - first_base if first_base >= 0 else 0
    return Decoded(records, next_offset, dropped, largest, pos / covered if covered > 0 else 0.0)


def _body(view: memoryview, pos: int, end: int, attrs: int, crc: int, check_crcs: bool, base: int) -> Any:
    if check_crcs:
        from crc32c import crc32c

        if crc32c(view[pos + 21:end]) != crc:
            raise RecordFormatError(f"the record batch at offset {base} fails its CRC check")
    section = view[pos + HEADER_SIZE:end]
    codec = attrs & COMPRESSION_MASK
    return decompress(codec, section) if codec else section


def _columns(buf: Any, kept: list[_Kept], headers: bool, first: int, last: int) -> Records:
    """Walk the kept batches and read the fields of their records in [first, last] (of a batch
    with gaps, all of them: which are inside is known only from their offset deltas); one data
    buffer for all of them."""
    if not kept:
        empty = np.zeros(0, np.int64)
        return Records(b"", empty, empty, np.zeros(0, bool), empty, empty, empty, empty,
                       *((empty,) * 5 if headers else ()))
    if all(k.source is buf for k in kept):  # uncompressed: the response's own bytes
        data = buf
        spans = [(k.start, k.end) for k in kept]
    else:  # compressed (or CRC-checked): join the sections into one buffer, in order
        parts = [memoryview(k.source)[k.start:k.end] for k in kept]
        data = b"".join(parts)
        spans, at = [], 0
        for part in parts:
            spans.append((at, at + len(part)))
            at += len(part)
    counts = [k.records for k in kept]
    try:
        starts = _chain.record_starts(data, spans, counts)
    except _chain.ChainError as exc:
        raise RecordFormatError(str(exc)) from None
    # a batch partly outside [first, last] (a range ends inside it): only the records inside, when
    # the batch has no gaps and record i is offset base + i
    window = [(max(0, min(k.records, first - k.base)), max(0, min(k.records, last - k.base + 1))) if k.dense
              else (0, k.records) for k in kept]
    if any(lo > 0 or hi < k.records for (lo, hi), k in zip(window, kept)):
        batch_first = np.cumsum(counts) - counts
        starts = np.concatenate([starts[b + lo:b + hi] for b, (lo, hi) in zip(batch_first.tolist(), window)])
        counts = [hi - lo for lo, hi in window]
    a = np.frombuffer(data, np.uint8)
    try:
        return _fields(a, data, starts, np.array(counts, np.int64), kept, headers)
    except IndexError:
        raise RecordFormatError("a record runs past the end of its batch") from None


def _fields(a: np.ndarray, data: Any, starts: np.ndarray, counts: np.ndarray, kept: list[_Kept],
            headers: bool) -> Records:
    length, s = varints(a, starts)
    if (length < 0).any():
        raise RecordFormatError("a record has a negative length")
    p = starts + s + 1  # + attributes (unused in v2 records)
    ends = p - 1 + length
    ts_delta, s = varints(a, p)
    p += s
    offset_delta, s = varints(a, p)
    p += s
    key_len, s = varints(a, p)
    key_pos = p + s
    p = key_pos + np.maximum(key_len, 0)
    value_len, s = varints(a, p)
    value_pos = p + s
    p = value_pos + np.maximum(value_len, 0)
    header_count, s = varints(a, p)
    p += s
    if (header_count < 0).any():
        raise RecordFormatError("a record has a negative header count")
    base = np.repeat(np.array([k.base for k in kept], np.int64), counts)
    append_time = np.repeat(np.array([k.append_time for k in kept], bool), counts)
    timestamp = np.repeat(np.array([k.base_ts for k in kept], np.int64), counts) + ts_delta
    if append_time.any():
        timestamp = np.where(append_time, np.repeat(np.array([k.max_ts for k in kept], np.int64), counts), timestamp)
    out = Records(data, base + offset_delta, timestamp, append_time, key_pos, key_len, value_pos, value_len)
    if headers:
        _headers(a, p, header_count, out)
    elif header_count.any():
        p = np.where(header_count > 0, ends, p)  # not read: trust the record's length for those
    if not np.array_equal(p, ends):
        raise RecordFormatError("a record's fields do not end where its length says")
    return out


def _headers(a: np.ndarray, p: np.ndarray, count: np.ndarray, out: Records) -> None:
    """Read every header of every record (``p``: just after each record's header count; moved to
    each record's end). Flat arrays in record order: record r's headers are a contiguous run."""
    total = int(count.sum())
    out.header_count = count
    kpos, klen = np.zeros(total, np.int64), np.zeros(total, np.int64)
    vpos, vlen = np.zeros(total, np.int64), np.zeros(total, np.int64)
    first = np.cumsum(count) - count  # each record's first header in the flat arrays
    for h in range(int(count.max()) if total else 0):
        rows = np.flatnonzero(count > h)
        at = first[rows] + h
        n, s = varints(a, p[rows])
        if (n < 0).any():
            raise RecordFormatError("a record header has a null key")
        kpos[at], klen[at] = p[rows] + s, n
        q = p[rows] + s + n
        n, s = varints(a, q)
        vpos[at], vlen[at] = q + s, n
        p[rows] = q + s + np.maximum(n, 0)
    out.header_key_pos, out.header_key_len, out.header_value_pos, out.header_value_len = kpos, klen, vpos, vlen
