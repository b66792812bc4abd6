"""Operations on the APIs kshare passes through to its backend that share-group applications use
(differential parity of the pass-through): CreateTopics, Metadata, FindCoordinator (Produce is in ops.py).

What legitimately differs between a Kafka 4.4 broker and kshare on 3.9 is normalised away: node
ids, hosts and ports (kshare presents itself as the only broker), cluster ids, topic ids (each
cluster mints its own: only whether one is set is compared), leader epochs, error messages, and
the topic configs CreateTopics returns (each broker version has its own defaults).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.create_topics.v7 import request as create_req
from kio.schema.delete_topics.v6 import request as delete_req
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindCoordinatorV3
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorV4
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from .model import TOPIC_B, TOPIC_NEW, Side

_ZERO = uuid.UUID(int=0)
COORDINATOR_NOT_AVAILABLE = 15
#: CreateTopic's ``name``: the sequence's own new topic, one that exists, an illegal name.
_NAMES = {"new": TOPIC_NEW, "existing": TOPIC_B, "illegal": "parity bad name!"}


def _metadata(side: Side, topics: tuple[str, ...] | None = None, ids: tuple[uuid.UUID, ...] = ()) -> Any:
    request = tuple(MetadataRequestTopic(topic_id=None, name=side.real(t)) for t in topics or ()) + \
        tuple(MetadataRequestTopic(topic_id=tid, name=None) for tid in ids)
    return side.admin.call(MetadataRequest(topics=request, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))


def topic_view(side: Side, answer: Any) -> dict[str, Any]:
    """Metadata's topics, normalised: errors, internal flag, whether an id is set, and per partition
    its error, whether it has a leader, and how many replicas / in-sync / offline replicas."""
    brokers = {int(b.node_id) for b in answer.brokers}
    out = {}
    for t in answer.topics:
        name = side.symbolic(t.name) if t.name is not None else "<no name>"
        out[name] = {
            "error": int(t.error_code), "internal": bool(t.is_internal),
            "topic_id": t.topic_id not in (None, _ZERO),
            "partitions": [(int(p.partition_index), int(p.error_code), int(p.leader_id) in brokers,
                            len(p.replica_nodes), len(p.isr_nodes), len(p.offline_replicas))
                           for p in sorted(t.partitions, key=lambda p: p.partition_index)],
        }
    return out


@dataclass(frozen=True)
class CreateTopic:
    """CreateTopics v7 for one topic; a created sequence topic is waited for until it has leaders."""

    name: str = "new"  # new | existing | illegal
    partitions: int = 1
    replication: int = 1
    validate_only: bool = False

    def run(self, side: Side) -> Any:
        wire_name = side.real(_NAMES[self.name])
        answer = side.admin.call(create_req.CreateTopicsRequest(
            topics=(create_req.CreatableTopic(name=wire_name, num_partitions=self.partitions,
                                              replication_factor=self.replication, assignments=(), configs=()),),
            timeout=timedelta(seconds=30), validate_only=self.validate_only))
        (t,) = answer.topics
        view = {"error": int(t.error_code), "partitions": int(t.num_partitions), "replication": int(t.replication_factor),
                "topic_id": t.topic_id not in (None, _ZERO)}
        if t.error_code == 0 and not self.validate_only and self.name == "new":
            side.new_partitions = self.partitions
            side.topic_ids.pop(TOPIC_NEW, None)
            _await_leaders(side, TOPIC_NEW)
        return view


def _await_leaders(side: Side, topic: str, timeout_s: float = 15.0) -> None:
    """A new topic is usable once every partition has a leader (timing: not compared)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        view = topic_view(side, _metadata(side, (topic,))).get(topic)
        if view and view["error"] == 0 and view["partitions"] and all(p[1] == 0 and p[2] for p in view["partitions"]):
            side.topic_id(topic)
            return
        time.sleep(0.1)


@dataclass(frozen=True)
class Metadata:
    """Metadata v12 for named topics (no auto-creation), and the broker list's consistency."""

    topics: tuple[str, ...]

    def run(self, side: Side) -> Any:
        answer = _metadata(side, self.topics)
        brokers = {int(b.node_id) for b in answer.brokers}
        return {"topics": topic_view(side, answer), "brokers": bool(brokers),
                "controller_known": int(answer.controller_id) in brokers, "cluster_id": answer.cluster_id is not None}


@dataclass(frozen=True)
class MetadataById:
    """Metadata v12 naming a topic by its id (an unknown id for a topic that does not exist)."""

    topic: str

    def run(self, side: Side) -> Any:
        return {"topics": topic_view(side, _metadata(side, ids=(side.topic_id(self.topic),)))}


@dataclass(frozen=True)
class FindCoordinators:
    """FindCoordinator beyond the prologue's: the single-key v3 form, a batch of groups (v4), a
    transaction coordinator, and an unknown key type."""

    kind: str = "group-v3"  # group-v3 | groups-v4 | transaction | unknown-type

    def run(self, side: Side) -> Any:
        """Repeated while a coordinator is not available yet: a broker creates the transaction
        state topic at the first lookup, and clients retry (timing, not compared)."""
        deadline = time.monotonic() + 30
        while True:
            view = self._once(side)
            busy = view.get("error") == COORDINATOR_NOT_AVAILABLE or any(
                c[1] == COORDINATOR_NOT_AVAILABLE for c in view.get("coordinators", ()))
            if not busy or time.monotonic() > deadline:
                return view
            time.sleep(0.2)

    def _once(self, side: Side) -> Any:
        if self.kind == "group-v3":
            a = side.admin.call(FindCoordinatorV3(key=side.group, key_type=0))
            return {"error": int(a.error_code), "node": int(a.node_id) >= 0, "port": a.port > 0}
        key_type, keys = {"groups-v4": (0, (side.group, side.group + "-other")),
                          "transaction": (1, (side.group + "-txn",)),
                          "unknown-type": (7, (side.group,))}[self.kind]
        answer = side.admin.call(FindCoordinatorV4(key_type=key_type, coordinator_keys=keys))
        return {"coordinators": [(c.key == keys[i], int(c.error_code), int(c.node_id) >= 0 if c.error_code == 0 else None)
                                 for i, c in enumerate(answer.coordinators)]}


def delete_new_topic(side: Side) -> None:
    """Clean up the sequence's own topic (not compared: tidying, not behaviour)."""
    if side.new_partitions is None:
        return
    try:
        side.admin.call(delete_req.DeleteTopicsRequest(topics=(delete_req.DeleteTopicState(
            name=side.real(TOPIC_NEW), topic_id=None),), timeout=timedelta(seconds=30)))
    except OSError:
        pass
