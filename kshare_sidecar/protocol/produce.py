"""The body of a Produce request of one record batch for one partition, written by hand.

The state topic's writer sends one such request per acknowledgement batch; building kio's
request entities (three per request) and writing them field by field cost more than the rest of
the write's own work. The shape is fixed, so the bytes are too: byte for byte what kio writes
(tests/unit/protocol/test_produce_body.py), for versions 3 to 12 (v13 names topics by id).

Non-flexible versions (3-8): transactional_id as a nullable string (int16 length), acks int16,
timeout_ms int32, then int32-counted arrays of topics (name: int16-length string) and partitions
(index int32, records: int32-length bytes). Flexible versions (9-12, KIP-482): compact strings,
arrays and records (uvarint length + 1) and an empty tagged-field section after each structure.
"""

from __future__ import annotations

import struct

from .varint import uvarint

FIRST_VERSION, LAST_VERSION = 3, 12
_FIRST_FLEXIBLE = 9

_ACKS_TIMEOUT = struct.Struct(">hi")
_INT32 = struct.Struct(">i")


def produce_body(version: int, topic: str, partition: int, records: bytes, *, acks: int = -1,
                 timeout_ms: int = 30_000) -> bytes:
    """A Produce request body (no header) carrying ``records`` (one or more encoded record
    batches) to ``topic``/``partition``, without a transactional id."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(f"Produce v{version} is not written here (v{FIRST_VERSION}..v{LAST_VERSION})")
    name = topic.encode()
    head = _ACKS_TIMEOUT.pack(acks, timeout_ms)
    if version < _FIRST_FLEXIBLE:
        return b"".join((b"\xff\xff", head, b"\x00\x00\x00\x01", len(name).to_bytes(2, "big"), name,
                         b"\x00\x00\x00\x01", _INT32.pack(partition), _INT32.pack(len(records)), records))
    # compact: null transactional id 0; one topic, one partition: count + 1 = 2
    return b"".join((b"\x00", head, b"\x02", uvarint(len(name) + 1), name, b"\x02", _INT32.pack(partition),
                     uvarint(len(records) + 1), records, b"\x00", b"\x00", b"\x00"))
