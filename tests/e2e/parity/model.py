"""The differential harness: the same operations against native Kafka 4.4 (the reference) and kshare on 3.9.

An operation is symbolic ("member b fetches", "member a acknowledges what it holds with
RELEASE"); each *side* renders it into a kio request with its own ids (topic ids, the member
epoch and share-session epoch that side handed out), sends it, and turns the answer into a
*normalised observation*: plain data with what legitimately differs between two brokers
removed (node ids and endpoints, throttle times, topic ids → names, leader epochs, error
messages). Two sides agree on a sequence when every observation is equal.

Timing is part of Kafka's contract only loosely (when an assignment arrives, how long a fetch
parks), so operations that depend on it are *settling* operations: ``Settle`` heartbeats every
member until each side's assignments stop changing, and ``Fetch`` repeats an empty answer until
records arrive or its budget ends. Everything else is compared as it comes.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from dataclasses import dataclass, field
from typing import Any

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from .wire import Wire, record_batch, records

GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3

#: Topics every sequence may use, created once per session on both targets.
TOPIC_A, TOPIC_B, NO_TOPIC = "parity-pa", "parity-pb", "parity-no-such-topic"
PARTITIONS = {TOPIC_A: 3, TOPIC_B: 1}
#: A topic of the sequence's own, which does not exist until a CreateTopic op creates it (on the
#: wire: ``<group>-new``; in observations: this symbol).
TOPIC_NEW = "<new>"


@dataclass
class Member:
    """What one side knows about one member (ids are the client's, epochs are the side's)."""

    member_id: str
    epoch: int = 0
    subscribed: tuple[str, ...] = ()
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)
    session_epoch: int | None = None  # None: no share session open
    in_session: set[tuple[str, int]] = field(default_factory=set)
    acquired: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # offsets held
    wire: Wire | None = None


class Side:
    """One target (``native`` or ``kshare``) during one sequence."""

    def __init__(self, name: str, bootstrap: str, group: str, member_ids: dict[str, str]) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.group = group
        self.admin = Wire(bootstrap, client_id="parity-admin")
        self.member_ids = member_ids
        self.members: dict[str, Member] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.settled = False
        self.produced = 0
        self.new_partitions: int | None = None  # TOPIC_NEW's partitions once created

    # --- topics: symbolic names (observations) and wire names -------------------------------

    def real(self, topic: str) -> str:
        return f"{self.group}-new" if topic == TOPIC_NEW else topic

    def symbolic(self, name: str) -> str:
        return TOPIC_NEW if name == f"{self.group}-new" else name

    def partitions(self, topic: str) -> int | None:
        """How many partitions ``topic`` has (None: it does not exist)."""
        return self.new_partitions if topic == TOPIC_NEW else PARTITIONS.get(topic)

    # --- ids -------------------------------------------------------------------------------

    def member(self, name: str) -> Member:
        if name not in self.members:
            self.members[name] = Member(self.member_ids[name])
            self.members[name].wire = Wire(self.bootstrap, client_id=f"parity-{name}")
        return self.members[name]

    def topic_id(self, topic: str) -> uuid.UUID:
        if topic not in self.topic_ids:
            answer = self.admin.call(MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=self.real(topic)),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
            (t,) = answer.topics
            # An unknown topic gets a random id: requests naming it must fail as unknown.
            self.topic_ids[topic] = t.topic_id if t.error_code == 0 else uuid.uuid4()
        return self.topic_ids[topic]

    def topic_name(self, topic_id: uuid.UUID | None) -> str:
        for name, tid in self.topic_ids.items():
            if tid == topic_id:
                return name
        return "<unknown topic id>"

    def produce(self, topic: str, partition: int, values: list[bytes]) -> Any:
        """One record batch through the target (kshare forwards Produce to its backend)."""
        request = ProduceRequest(transactional_id=None, acks=-1, timeout=timedelta(seconds=30), topic_data=(
            TopicProduceData(name=self.real(topic), partition_data=(
                PartitionProduceData(index=partition, records=record_batch(values)),)),))
        answer = self.admin.call(request)
        (t,) = answer.responses
        (p,) = t.partition_responses
        return int(p.error_code), int(p.base_offset)

    def close(self) -> None:
        self.admin.close()
        for m in self.members.values():
            if m.wire is not None:
                m.wire.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def acquired_view(side: Side, topic: str, partition_data: Any) -> dict:
    """A fetched partition as comparable data: errors, acquired ranges, and the acquired records."""
    held = []
    for a in partition_data.acquired_records:
        held.extend(range(int(a.first_offset), int(a.last_offset) + 1))
    values = {off: val for off, val in records(partition_data.records)}
    return {
        "error": int(partition_data.error_code),
        "ack_error": int(partition_data.acknowledge_error_code),
        "acquired": [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                     for a in partition_data.acquired_records],
        "records": [(off, values.get(off)) for off in held],
    }
