"""ShareFetch answers (v1-v2) encoded by hand, the records as the backend's buffers.

Why not kio's writer (every other answer uses it): a ShareFetch answer is mostly record bytes the
sidecar forwards unchanged. Through kio each was copied into a ``BytesIO``, out of it, and once
more behind the size prefix, and the answer's entity tree (a dataclass per partition and per
acquired range, the version conversion walking it) was Python work per request; the profile of
the 1M-record run counted both among the largest costs of the sidecar. Here the answer is a list
of pieces: small ``bytes`` for the fields and the views of the acquired batches in between
(:class:`~.registry.EncodedBody`), which the connection writes without joining.

v1 and v2 answers have the same layout (v2 only adds request fields). Flexible versions: compact
arrays, strings and records (unsigned varint length + 1), an empty tagged-field section after
every struct::

    throttle_time_ms i32 | error_code i16 | error_message string? | acquisition_lock_timeout_ms i32
    responses [topic_id uuid | partitions [partition_index i32 | error_code i16 | error_message string?
      | acknowledge_error_code i16 | acknowledge_error_message string? | current_leader {leader_id i32
      | leader_epoch i32} | records? | acquired_records [first_offset i64 | last_offset i64
      | delivery_count i16]]]
    node_endpoints [node_id i32 | host string | port i32 | rack string?]

``tests/unit/api/test_api_share_response.py`` checks it byte for byte against kio's writer.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Sequence

from ..metrics import STATS as _METRICS
from ..protocol.varint import compact_string as _string, uvarint
from .registry import EncodedBody

_I16 = struct.Struct(">h").pack
_I32 = struct.Struct(">i").pack
_PARTITION_HEAD = struct.Struct(">ih").pack  # partition_index, error_code
_LEADER = struct.Struct(">iib").pack  # leader_id, leader_epoch, no tagged fields
_ACQUIRED = struct.Struct(">qqhb").pack  # first, last, delivery count, no tagged fields
_TOP = struct.Struct(">ih").pack  # throttle_time_ms, error_code

#: Record bytes below this go into the surrounding piece (a copy): a send per piece costs more
#: than copying a few KiB, and small answers (a poll of a few records) then leave in one send.
_INLINE_BYTES = 8192

#: ``leader(topic_id, partition) -> (leader_id, leader_epoch)``
Leader = Callable[[uuid.UUID, int], tuple[int, int]]


def share_fetch_body(*, throttle_ms: int, error_code: int, error_message: str | None, lock_timeout_ms: int,
                     topics: Iterable[tuple[uuid.UUID, Sequence]], leader: Leader,
                     endpoints: Sequence[tuple[int, str, int, str | None]]) -> EncodedBody:
    """The answer's body. ``topics``: ``(topic_id, partitions)`` in order, each partition with
    ``partition``, ``error``, ``message``, ``ack_error`` (None: no acks), ``ack_message``,
    ``records`` (a bytes-like, or a list of them: written as they are) and ``acquired``
    (``first_offset``, ``last_offset``, ``delivery_count``)."""
    pieces: list[bytes | bytearray | memoryview] = []
    head = bytearray(_TOP(throttle_ms, error_code))
    head += _string(error_message)
    head += _I32(lock_timeout_ms)
    topics = list(topics)
    head += uvarint(len(topics) + 1)
    for topic_id, parts in topics:
        head += topic_id.bytes
        head += uvarint(len(parts) + 1)
        for p in parts:
            head += _PARTITION_HEAD(p.partition, int(p.error))
            head += _string(p.message)
            head += _I16(int(p.ack_error or 0))
            head += _string(p.ack_message)
            head += _LEADER(*leader(topic_id, p.partition), 0)
            records = p.records
            views = records if isinstance(records, list) else [records] if records else []
            size = sum(len(v) for v in views)
            head += uvarint(size + 1)
            if 0 < size < _INLINE_BYTES:
                for v in views:
                    head += v
                _METRICS.record_bytes_copied += size
            elif size:
                pieces.append(head)
                pieces += [v for v in views if len(v)]
                head = bytearray()
            head += uvarint(len(p.acquired) + 1)
            for a in p.acquired:
                head += _ACQUIRED(a.first_offset, a.last_offset, a.delivery_count, 0)
            head += b"\x00"  # partition's tagged fields
        head += b"\x00"  # topic's tagged fields
    head += uvarint(len(endpoints) + 1)
    for node_id, host, port, rack in endpoints:
        head += _I32(node_id)
        head += _string(host)
        head += _I32(port)
        head += _string(rack)
        head += b"\x00"
    head += b"\x00"  # the body's tagged fields
    pieces.append(head)
    return EncodedBody(pieces, flexible=True)
