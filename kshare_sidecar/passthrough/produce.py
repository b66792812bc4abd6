"""What the forwarder needs from a Produce frame, read without decoding (or copying) its records.

A Produce request carries megabytes of record batches behind a few header fields; routing needs
only ``acks`` (acks=0 has no response) and the topics (kshare's state topic is refused): by name
up to v12, by topic id from v13 (KIP-516, Kafka 4.1+; a client sends ids whenever the backend
offers v13). Frames reach here after the bounds pre-pass, so every length read below is inside
the frame.
"""

from __future__ import annotations

import uuid

from ..protocol.varint import read_uvarint, skip_tagged_fields

_FIRST_FLEXIBLE = 9
_FIRST_TOPIC_ID = 13


def acks(frame: bytes, version: int) -> int:
    """The request's ``acks``."""
    pos, _ = _after_transactional_id(frame, version)
    return int.from_bytes(frame[pos:pos + 2], "big", signed=True)


def topic_keys(frame: bytes, version: int) -> list[str | uuid.UUID]:
    """The request's topics in order — names up to v12, topic ids from v13; record batches are
    skipped by length."""
    pos, flexible = _after_transactional_id(frame, version)
    pos += 2 + 4  # acks, timeout
    names: list[str | uuid.UUID] = []
    count, pos = _count(frame, pos, flexible)
    for _ in range(count):
        if version >= _FIRST_TOPIC_ID:
            names.append(uuid.UUID(bytes=bytes(frame[pos:pos + 16])))
            pos += 16
        else:
            if flexible:
                length, pos = read_uvarint(frame, pos)
                length -= 1
            else:
                length = int.from_bytes(frame[pos:pos + 2], "big", signed=True)
                pos += 2
            names.append(bytes(frame[pos:pos + length]).decode("utf-8", "replace"))
            pos += length
        parts, pos = _count(frame, pos, flexible)
        for _ in range(parts):
            pos += 4  # partition index
            if flexible:
                size, pos = read_uvarint(frame, pos)
                pos = skip_tagged_fields(frame, pos + max(size - 1, 0))
            else:
                size = int.from_bytes(frame[pos:pos + 4], "big", signed=True)
                pos += 4 + max(size, 0)
        if flexible:
            pos = skip_tagged_fields(frame, pos)
    return names


def _after_transactional_id(frame: bytes, version: int) -> tuple[int, bool]:
    pos = 8  # api key, version, correlation id
    n = int.from_bytes(frame[pos:pos + 2], "big", signed=True)  # client_id: never compact
    pos += 2 + max(n, 0)
    flexible = version >= _FIRST_FLEXIBLE
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    if version >= 3:  # transactional_id
        if flexible:
            length, pos = read_uvarint(frame, pos)
            pos += max(length - 1, 0)
        else:
            n = int.from_bytes(frame[pos:pos + 2], "big", signed=True)
            pos += 2 + max(n, 0)
    return pos, flexible


def _count(frame: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        n, pos = read_uvarint(frame, pos)
        return max(n - 1, 0), pos
    return max(int.from_bytes(frame[pos:pos + 4], "big", signed=True), 0), pos + 4
