"""Produce (key 0, v3–9) and Fetch (key 1, v4–12): advertised for librdkafka, refused when used.

librdkafka's share consumer never sends Produce or Fetch, but it only puts a ShareFetch on the
wire when the broker advertises Produce max >= 3 and Fetch max >= 4 (its MSGVER2 feature gate,
client_compat.md §1.1). So both are registered — and therefore advertised — with narrow ranges.

A Produce or Fetch that arrives anyway comes from a client pointed at the wrong address (the
sidecar is not a data broker). It gets INVALID_REQUEST on every partition it named: a
non-retriable error that reaches the application (the Java producer raises
InvalidRequestException; Produce v8+ carries a message saying why) instead of a retry loop, which
NOT_LEADER_OR_FOLLOWER or a closed connection would cause. Produce with acks=0 expects no
response, so — like Kafka on an acks=0 failure — the connection is closed.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..wire.errors import CloseConnection
from .context import RequestContext
from .registry import ApiRegistry

PRODUCE_KEY, PRODUCE_MIN, PRODUCE_MAX = 0, 3, 9
FETCH_KEY, FETCH_MIN, FETCH_MAX = 1, 4, 12

REFUSAL = ErrorCode.invalid_request
MESSAGE = "kshare serves share groups only; produce to and fetch from the backing cluster"


async def refuse_produce(ctx: RequestContext, header: Any, request: Any) -> dict[str, Any]:
    if int(request.acks) == 0:
        raise CloseConnection("Produce with acks=0 to the share-group sidecar")
    return {
        "throttle_time": 0,
        "responses": [
            {
                "name": topic.name,
                "partition_responses": [
                    {
                        "index": part.index,
                        "error_code": REFUSAL,
                        "base_offset": -1,
                        "record_errors": (),
                        "error_message": MESSAGE,
                    }
                    for part in topic.partition_data
                ],
            }
            for topic in request.topic_data
        ],
    }


async def refuse_fetch(ctx: RequestContext, header: Any, request: Any) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": [
            {
                "topic": topic.topic,
                "partitions": [
                    {
                        "partition_index": part.partition,
                        "error_code": REFUSAL,
                        "high_watermark": -1,
                        "aborted_transactions": None,
                        "records": b"",
                    }
                    for part in topic.partitions
                ],
            }
            for topic in request.topics
        ],
    }


def register(registry: ApiRegistry) -> None:
    registry.register(PRODUCE_KEY, PRODUCE_MIN, PRODUCE_MAX, refuse_produce)
    registry.register(FETCH_KEY, FETCH_MIN, FETCH_MAX, refuse_fetch)
