"""Leader hints in forwarded answers name the sidecar, never a backend broker.

Since KIP-951 a Produce (v10+) or Fetch (v16+) answer (and every ShareFetch / ShareAcknowledge
answer: forwarded for share groups the backend serves, passthrough/native.py) with NOT_LEADER_OR_FOLLOWER or
FENCED_LEADER_EPOCH carries the new leader: ``CurrentLeader`` per partition and the leader's
address in ``NodeEndpoints``. Clients act on it at once, without a Metadata round trip:
librdkafka renames its broker to the endpoint's host:port and reconnects there. Passed through
unchanged, the backend's hint would move a client *off the sidecar* to the backend broker
(bypassing pass-through and every share group), and the reconnect drops its in-flight Produce
requests — a producer without idempotence writes them again (found as duplicated records
through the sidecar right after CreateTopics, when Kafka answers NOT_LEADER_OR_FOLLOWER until
the new partition is loaded). So such answers are rewritten: every endpoint becomes the
sidecar's own (its Metadata says it leads every partition), every known leader id the
sidecar's node id.

Cheap for the common case: an answer is decoded only when it can carry hints (api key and
version) *and* its bytes contain a backend broker's host name — which a NodeEndpoints entry
must. Record data that happens to contain the host merely costs a decode and re-encode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from kio.schema.types import BrokerId
from kio.static.primitive import i32

#: api key → first version whose answer carries CurrentLeader / NodeEndpoints (KIP-951).
HINTED_FROM: dict[int, int] = {0: 10, 1: 16, 78: 0, 79: 0}  # ShareFetch/ShareAcknowledge: every version


def hinted(api_key: int, version: int) -> bool:
    first = HINTED_FROM.get(api_key)
    return first is not None and version >= first


def may_name_backend(answer: bytes | bytearray | memoryview, hosts: Iterable[bytes]) -> bool:
    """Whether a raw answer might hold a backend endpoint (a host name occurs in its bytes)."""
    data = answer if isinstance(answer, (bytes, bytearray)) else bytes(answer)
    return any(host and host in data for host in hosts)


def point_at_sidecar(response: Any, node_id: int, host: str, port: int, rack: str | None) -> Any:
    """The same answer with every leader hint naming the sidecar (``node_id`` at host:port)."""
    changes: dict[str, Any] = {}
    endpoints = getattr(response, "node_endpoints", None)
    if endpoints:
        endpoint_cls = type(endpoints[0])
        changes["node_endpoints"] = (endpoint_cls(node_id=BrokerId(node_id), host=host, port=i32(port), rack=rack),)
    topics = getattr(response, "responses", None)
    if topics:
        new_topics = tuple(_topic(t, node_id) for t in topics)
        if any(a is not b for a, b in zip(new_topics, topics)):
            changes["responses"] = new_topics
    return dataclasses.replace(response, **changes) if changes else response


def _topic(topic: Any, node_id: int) -> Any:
    field = "partition_responses" if hasattr(topic, "partition_responses") else "partitions"
    parts = getattr(topic, field, None)
    if not parts:
        return topic
    new_parts = tuple(_partition(p, node_id) for p in parts)
    if all(a is b for a, b in zip(new_parts, parts)):
        return topic
    return dataclasses.replace(topic, **{field: new_parts})


def _partition(part: Any, node_id: int) -> Any:
    changes: dict[str, Any] = {}
    leader = getattr(part, "current_leader", None)
    if leader is not None and int(leader.leader_id) >= 0 and int(leader.leader_id) != node_id:
        changes["current_leader"] = dataclasses.replace(leader, leader_id=BrokerId(node_id))
    replica = getattr(part, "preferred_read_replica", None)
    if replica is not None and int(replica) >= 0:
        # KIP-392: a follower to fetch from; clients only know the sidecar, which reads from the leader.
        changes["preferred_read_replica"] = BrokerId(-1)
    return dataclasses.replace(part, **changes) if changes else part


__all__ = ["HINTED_FROM", "hinted", "may_name_backend", "point_at_sidecar"]
