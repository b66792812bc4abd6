"""ShareGroupHeartbeat v1 requests read by hand (`decode`), the other half of the hand-encoded
answer in heartbeat.py.

A sidecar answers a heartbeat per member every 5 s (Kafka's share.heartbeat.interval.ms): 400 a
second at 2,000 members. Decoding one with kio (its bounds pre-scan, then its entity reader,
header and body) was a tenth of the sidecar's CPU per heartbeat (py-spy, benchmarks/scale.py).
This reads the usual shape only — a request header v2 without tagged fields, every string valid
UTF-8, nothing after the body — and answers None for anything else, which the dispatcher then
decodes with kio as every request: a malformed or unusual frame gets exactly kio's treatment
(tests/unit/api/test_api_heartbeat_request.py checks both against each other)::

    header v2: api_key i16 | api_version i16 | correlation_id i32 | client_id nullable string
               (i16 length) | tagged fields
    body v1:   group_id compact string | member_id compact string | member_epoch i32
               | rack_id compact nullable string | subscribed_topic_names compact nullable
               array of compact strings | tagged fields
"""

from __future__ import annotations

from typing import NamedTuple

from ..protocol.constants import ApiKey
from ..protocol.varint import read_compact_string, read_uvarint
from ..wire import codec

_PREFIX = int(ApiKey.SHARE_GROUP_HEARTBEAT).to_bytes(2, "big") + (1).to_bytes(2, "big")


class HeartbeatHeader(NamedTuple):
    """The request header's fields the dispatcher reads (kio's RequestHeader names)."""

    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None


class HeartbeatRequest(NamedTuple):
    """ShareGroupHeartbeatRequest v1's fields (kio's names)."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: tuple[str, ...] | None


def decode(frame: bytes) -> codec.DecodedRequest | None:
    """The request in ``frame`` (a payload without its size prefix), or None when it is not a
    ShareGroupHeartbeat v1 of the usual shape."""
    if type(frame) is not bytes or frame[:4] != _PREFIX or len(frame) < 10:
        return None  # (a view or a bytearray: kio's path converts it)
    try:
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        n = int.from_bytes(frame[8:10], "big", signed=True)
        pos = 10
        client_id: str | None = None
        if n >= 0:
            if pos + n > len(frame):
                return None
            client_id, pos = frame[pos:pos + n].decode(), pos + n
        elif n != -1:
            return None
        if frame[pos] != 0:  # header tagged fields
            return None
        group_id, pos = read_compact_string(frame, pos + 1)
        member_id, pos = read_compact_string(frame, pos)
        if group_id is None or member_id is None or pos + 4 > len(frame):
            return None  # null in a non-nullable field: kio's path answers INVALID_REQUEST
        member_epoch = int.from_bytes(frame[pos:pos + 4], "big", signed=True)
        rack_id, pos = read_compact_string(frame, pos + 4)
        count, pos = read_uvarint(frame, pos)
        topics: tuple[str, ...] | None = None
        if count:
            names = []
            for _ in range(count - 1):
                name, pos = read_compact_string(frame, pos)
                if name is None:
                    return None
                names.append(name)
            topics = tuple(names)
        if frame[pos] != 0 or pos + 1 != len(frame):  # body tagged fields; trailing bytes
            return None
    except (IndexError, ValueError):  # truncated, not UTF-8, an overlong varint
        return None
    return codec.DecodedRequest(
        header=HeartbeatHeader(int(ApiKey.SHARE_GROUP_HEARTBEAT), 1, correlation_id, client_id),
        body=HeartbeatRequest(group_id, member_id, member_epoch, rack_id, topics),
        request_class=codec.request_class(int(ApiKey.SHARE_GROUP_HEARTBEAT), 1),
        response_class=codec.response_class(int(ApiKey.SHARE_GROUP_HEARTBEAT), 1))
