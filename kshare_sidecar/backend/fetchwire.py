"""Fetch responses (v4-v12) read by hand: the headers the share path and the Spark source need,
records left in place.

Why not kio's decoder (the rest of the backend bridge uses kio): a Fetch answer is mostly record
bytes the sidecar only forwards. kio (and aiokafka's connection under it) copied every record
byte four times before the sidecar saw it — aiokafka's StreamReader buffer, its ``readexactly``
slice, the ``BytesIO`` unshared for kio's read-only view, kio's ``bytes`` for the records field
— and the profile of the 1M-record run showed those copies and their page faults as the largest
part of the sidecar's CPU. Here the frame is received once, by ``BrokerConn``, into a buffer of
its exact size, and every partition's records are a read-only ``memoryview`` of that buffer: the
read path's only copy of a record byte is the kernel's. Per partition a few ``struct`` reads;
per record nothing.

A tagged field this reader does not know is skipped, as Kafka's clients skip them (KIP-482): the
``NodeEndpoints`` that tansu puts into v12 answers needs no lower version here.

Layout (v12 flexible: compact arrays/strings/bytes as unsigned varint length + 1, tagged fields
after every struct; v4-v11 classic int32/int16 lengths)::

    header: correlation_id i32 [tagged fields v12]
    throttle_time_ms i32 | error_code i16 (v7+) | session_id i32 (v7+)
    [topic: name string | [partition: index i32, error i16, hwm i64, lso i64, log_start i64 (v5+),
      aborted [producer_id i64, first_offset i64]? , preferred_read_replica i32 (v11+),
      records bytes?]]
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..protocol.varint import VarintError, read_uvarint, skip_tagged_fields
from .batches import parse_batches
from .types import FetchResult

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_PART = struct.Struct(">ihqq").unpack_from  # partition, error, high watermark, last stable offset
_I64 = struct.Struct(">q").unpack_from
_ABORTED = struct.Struct(">qq").unpack_from

FLEXIBLE_FROM = 12


class FetchWireError(ValueError):
    """The answer does not parse as the Fetch version it was asked at."""


class FetchedPartition(NamedTuple):
    """One partition of a Fetch answer as the wire has it; ``records`` is a view of the frame,
    uncut (a partial batch at the end is still there)."""

    topic: str
    partition: int
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int  # -1 before v5
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset)
    records: memoryview


def read_fetch(frame: bytes | bytearray | memoryview, version: int, start: int = 0
               ) -> tuple[int, int, list[FetchedPartition]]:
    """``(correlation_id, top-level error, partitions)`` of one Fetch answer (``frame`` from
    ``start``: the correlation id, after the size prefix). Raises :class:`FetchWireError`."""
    if not 4 <= version <= FLEXIBLE_FROM:
        raise FetchWireError(f"Fetch v{version} is not read here (v4..v{FLEXIBLE_FROM})")
    buf = memoryview(frame).toreadonly()
    try:
        return _read(buf, version, start)
    except (IndexError, struct.error, VarintError, UnicodeDecodeError) as exc:
        raise FetchWireError(f"a malformed or truncated Fetch v{version} answer: {exc}") from None


def parse_fetch(frame: bytes | bytearray | memoryview, version: int, start: int = 0
                ) -> tuple[int, int, dict[tuple[str, int], FetchResult]]:
    """``(correlation_id, top-level error, {(topic, partition): FetchResult})`` of one Fetch
    answer, as the share path reads it: records cut after the last whole batch, their batch
    headers read. Raises :class:`FetchWireError`."""
    cid, error, partitions = read_fetch(frame, version, start)
    return cid, error, {(p.topic, p.partition): _result(p) for p in partitions}


def _read(buf: memoryview, version: int, pos: int) -> tuple[int, int, list[FetchedPartition]]:
    flexible = version >= FLEXIBLE_FROM
    (cid,) = _I32(buf, pos)
    pos += 4
    if flexible:
        pos = skip_tagged_fields(buf, pos)
    pos += 4  # throttle_time_ms
    error = 0
    if version >= 7:
        (error,) = _I16(buf, pos)
        pos += 6  # error_code, session_id
    out: list[FetchedPartition] = []
    topics, pos = _count(buf, pos, flexible)
    for _ in range(topics):
        if flexible:
            n, pos = read_uvarint(buf, pos)
            n -= 1
        else:
            (n,) = _I16(buf, pos)
            pos += 2
        if n < 0:
            raise FetchWireError("null topic name")
        topic = bytes(buf[pos:pos + n]).decode()
        pos += n
        partitions, pos = _count(buf, pos, flexible)
        for _ in range(partitions):
            partition, code, hwm, lso = _PART(buf, pos)
            pos += 22
            log_start = -1
            if version >= 5:
                (log_start,) = _I64(buf, pos)
                pos += 8
            aborted_n, pos = _count(buf, pos, flexible)
            aborted: list[tuple[int, int]] = []
            for _ in range(max(aborted_n, 0)):
                aborted.append(_ABORTED(buf, pos))
                pos += 16
                if flexible:
                    pos = skip_tagged_fields(buf, pos)
            if version >= 11:
                pos += 4  # preferred_read_replica
            if flexible:
                size, pos = read_uvarint(buf, pos)
                size -= 1
            else:
                (size,) = _I32(buf, pos)
                pos += 4
            records = buf[pos:pos + max(size, 0)]
            if len(records) < size:
                raise FetchWireError(f"records of {topic}[{partition}] run past the answer's end")
            pos += max(size, 0)
            if flexible:
                pos = skip_tagged_fields(buf, pos)
            out.append(FetchedPartition(topic, partition, code, hwm, lso, log_start, tuple(aborted), records))
        if flexible:
            pos = skip_tagged_fields(buf, pos)
    return cid, error, out


def _count(buf: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length (-1: null)."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    (n,) = _I32(buf, pos)
    return n, pos + 4


_EMPTY = memoryview(b"")


def _result(p: FetchedPartition) -> FetchResult:
    if p.error:
        return FetchResult(_EMPTY, (), p.high_watermark, p.last_stable_offset, p.log_start_offset, (), p.error)
    batches = parse_batches(p.records)
    end = batches[-1].end if batches else 0
    return FetchResult(p.records[:end], batches, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                       p.aborted, 0, len(p.records) - end)
