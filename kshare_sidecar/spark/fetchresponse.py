"""A Fetch response (v4..v12) read in place: the partitions' numbers, and their record bytes as
views of the response frame.

Why not kio, which encodes the requests: kio's reader copies each partition's ``records`` out of
the frame into a new ``bytes``, and in a Fetch answer the records are nearly all of the frame --
a second copy of every byte read, a fresh allocation (page faults) per answer, measured at about
a fifth of the reader's CPU. Here the records stay a ``memoryview`` of the frame the socket
filled, which the decoder and Arrow read directly. Only the fields the reader needs are kept;
everything else is skipped by its wire size. Layout (Kafka's ``FetchResponse.json``)::

    header: correlation id, v12+ tagged fields | throttle_time_ms i32 | v7+: error_code i16, session_id i32
    responses[]: topic (string) | partitions[]: partition i32, error i16, high_watermark i64,
        last_stable_offset i64, v5+: log_start_offset i64, aborted[]: (producer_id i64, first_offset i64),
        v11+: preferred_read_replica i32, records (nullable bytes) | v12+ tagged fields at each level

v12 is the first flexible version: arrays, strings and bytes carry unsigned-varint lengths + 1,
and each structure ends with tagged fields.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")


class FetchResponseError(ValueError):
    """The frame is not a Fetch response of the version it was read as."""


class PartitionAnswer(NamedTuple):
    topic: str
    partition: int
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset)
    records: memoryview


class FetchResponse(NamedTuple):
    error: int
    partitions: list[PartitionAnswer]


class _Reader:
    __slots__ = ("flexible", "pos", "view")

    def __init__(self, view: memoryview, flexible: bool) -> None:
        self.view, self.pos, self.flexible = view, 0, flexible

    def fixed(self, fmt: struct.Struct) -> tuple:
        out = fmt.unpack_from(self.view, self.pos)
        self.pos += fmt.size
        return out

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            b = self.view[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise FetchResponseError("an unsigned varint is longer than 5 bytes")

    def length(self) -> int:
        """An array, string or bytes length; -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.fixed(_I32)[0]

    def string(self) -> str:
        n = self.uvarint() - 1 if self.flexible else self.fixed(_I16)[0]
        if n < 0:
            return ""
        text = bytes(self.view[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return text

    def tagged(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # tag
                self.pos += self.uvarint()  # size, then skip the field


def read_fetch_response(payload: memoryview, version: int) -> FetchResponse:
    """``payload``: a Fetch response frame without its size prefix (correlation id first)."""
    if not 4 <= version <= 12:
        raise FetchResponseError(f"Fetch v{version} is not read here (v4..v12)")
    r = _Reader(payload, version >= 12)
    try:
        r.pos = 4  # correlation id
        r.tagged()  # response header v1 (flexible versions)
        r.pos += 4  # throttle_time_ms
        error = 0
        if version >= 7:
            error = r.fixed(_I16)[0]
            r.pos += 4  # session_id
        out: list[PartitionAnswer] = []
        for _ in range(max(r.length(), 0)):
            topic = r.string()
            for _ in range(max(r.length(), 0)):
                partition, code, hwm, lso = r.fixed(_PARTITION)
                log_start = r.fixed(_I64)[0] if version >= 5 else -1
                aborted = []
                for _ in range(max(r.length(), 0)):
                    aborted.append(r.fixed(_ABORTED))
                    r.tagged()
                if version >= 11:
                    r.pos += 4  # preferred_read_replica
                n = r.length()
                records = payload[r.pos:r.pos + max(n, 0)]
                if len(records) != max(n, 0):
                    raise FetchResponseError("the records run past the end of the response")
                r.pos += max(n, 0)
                r.tagged()
                out.append(PartitionAnswer(topic, partition, code, hwm, lso, log_start,
                                           tuple((int(p), int(o)) for p, o in aborted), records))
            r.tagged()
        r.tagged()
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise FetchResponseError(f"a malformed Fetch v{version} response: {exc}") from None
    return FetchResponse(error, out)
