"""Find record-batch boundaries in a fetched buffer without decoding a single record.

Why: share acquisition works on whole log batches, and the sidecar answers ShareFetch with the
backend's batch bytes unchanged. All it needs per batch is the 61-byte v2 header: offsets, the
transactional/control bits and the producer id. Records (possibly compressed) are never touched,
so the cost is one ``struct.unpack_from`` per batch, independent of batch size.

Layout of a RecordBatch (magic 2) header, big-endian::

    0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32
    21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64
    43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordsCount i32 | 61 ...

``batchLength`` counts the bytes after itself, so a batch occupies ``12 + batchLength`` bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from .types import BatchInfo

HEADER_SIZE = 61
_LOG_OVERHEAD = 12  # baseOffset + batchLength
_MIN_BATCH_LENGTH = HEADER_SIZE - _LOG_OVERHEAD
# baseOffset, batchLength, (skip epoch), magic, (skip crc), attributes, lastOffsetDelta,
# (skip both timestamps), producerId
_HEADER = struct.Struct(">qi4xb4xhi16xq")
_unpack = _HEADER.unpack_from
_NEEDED = _HEADER.size  # 51: enough to read every field we use

TRANSACTIONAL = 0x10
CONTROL = 0x20


class RecordFormatError(ValueError):
    """The buffer is not a sequence of v2 record batches (old message format or corruption)."""


def parse_batches(buf: bytes | memoryview, start: int = 0) -> tuple[BatchInfo, ...]:
    """Return the complete v2 batches in ``buf`` from ``start`` on, in order.

    A truncated batch at the end (Kafka may cut the last batch of a fetch at ``max_bytes``) is
    dropped: ``result[-1].end`` (or ``start``) is where the complete part ends.
    Raises :class:`RecordFormatError` on a magic other than 2 or an impossible length.
    """
    out: list[BatchInfo] = []
    append = out.append
    size = len(buf)
    pos = start
    while size - pos >= _NEEDED:
        base, length, magic, attrs, last_delta, producer_id = _unpack(buf, pos)
        end = pos + _LOG_OVERHEAD + length
        if end > size:
            break  # partial trailing batch
        if magic != 2:
            raise RecordFormatError(f"record batch at byte {pos} has magic {magic}; kshare reads only v2")
        if length < _MIN_BATCH_LENGTH:
            raise RecordFormatError(f"record batch at byte {pos} has impossible length {length}")
        append(
            BatchInfo(
                base,
                base + last_delta,
                producer_id,
                bool(attrs & TRANSACTIONAL),
                bool(attrs & CONTROL),
                pos,
                end,
            )
        )
        pos = end
    return tuple(out)


def complete_size(batches: Sequence[BatchInfo], start: int = 0) -> int:
    """Bytes covered by complete batches (what is safe to cache or forward)."""
    return batches[-1].end if batches else start


def batch_views(buf: bytes | memoryview, batches: Iterable[BatchInfo]) -> list[memoryview]:
    """The bytes of ``batches`` (in the order given) as views of ``buf``, adjacent runs merged:
    what the ShareFetch answer writes to the socket as they are (no copy; usually one view)."""
    view = memoryview(buf)
    runs: list[tuple[int, int]] = []
    for b in batches:
        if runs and runs[-1][1] == b.start:
            runs[-1] = (runs[-1][0], b.end)
        else:
            runs.append((b.start, b.end))
    return [view[s:e] for s, e in runs]


def slice_batches(buf: bytes | memoryview, batches: Iterable[BatchInfo]) -> bytes:
    """The bytes of ``batches`` joined into one ``bytes`` (a copy; the share path uses
    :func:`batch_views`)."""
    views = batch_views(buf, batches)
    if len(views) == 1 and isinstance(buf, bytes) and len(views[0]) == len(buf):
        return buf
    return b"".join(views)


def overlapping(batches: Sequence[BatchInfo], first: int, last: int) -> list[BatchInfo]:
    """The batches containing at least one offset in ``[first, last]`` (inclusive)."""
    return [b for b in batches if b.last_offset >= first and b.base_offset <= last]
