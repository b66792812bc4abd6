"""What clients of the sidecar may not touch on the backend: kshare's own state.

With pass-through, a client of the sidecar can do on the backend whatever the backend lets it
do. The sidecar's state topic and its state writers' transactional ids are its internals, as
``__consumer_offsets`` is a broker's: a Produce into the state topic, a DeleteTopics or
DeleteRecords of it, a config change (``cleanup.policy=delete`` would erase share state), or an
InitProducerId with a state writer's transactional id (which would fence the sidecar) must not
pass through. Each gets the answer Kafka gives for its own internal topics and ids:
INVALID_TOPIC_EXCEPTION for writes, UNKNOWN_TOPIC_OR_PARTITION where the topic is hidden (it is
not in Metadata), TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the ids. Reads (Fetch, ListOffsets)
are not refused: they cannot change state, and the topic is hidden from Metadata anyway.

Hidden as the state topic is from Metadata, DescribeTopicPartitions and DescribeConfigs: the state
writers' transactional ids from ListTransactions (left out of the answer), from
DescribeTransactions (TRANSACTIONAL_ID_NOT_FOUND, Kafka's answer for an id it does not know) and
the state topic from DescribeProducers (UNKNOWN_TOPIC_OR_PARTITION) — the ids and producer ids
of kshare's writers are its internals too (``kafka-transactions.sh list`` showed them).

Produce is checked on the raw path by walking the frame for its topics only, names or (v13+) ids
(``produce.py``: records are skipped by length, never copied); the admin APIs are small and decoded.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.constants import ApiKey, ConfigResourceType
from ..protocol.varint import read_uvarint, skip_tagged_fields, uvarint
from . import routes

#: Admin requests naming topics: (request list, item name attribute or None, response list, name).
TOPIC_KEYED: dict[int, routes.KeySpec] = {
    19: routes.KeySpec("topics", "name", "topics", "name"),
    37: routes.KeySpec("topics", "name", "results", "name"),
}
WRITE_REFUSAL = {19: ErrorCode.invalid_topic_exception}
#: Kafka's message with UNKNOWN_TOPIC_OR_PARTITION where an answer has one (DescribeProducers)
NOT_HOSTED = "This server does not host this topic-partition."


@dataclasses.dataclass(frozen=True)
class Reserved:
    """``topics`` by name, and their backend ``topic_ids``: requests name topics by id too
    (Produce v13+, DeleteTopics v6+, Fetch v13+)."""

    topics: frozenset[str]
    txn_prefixes: tuple[str, ...] = ()
    topic_ids: frozenset[uuid.UUID] = frozenset()

    def topic(self, key: Any) -> bool:
        """``key``: a topic name or a topic id."""
        return key in self.topic_ids if isinstance(key, uuid.UUID) else key in self.topics

    def txn(self, transactional_id: Any) -> bool:
        return isinstance(transactional_id, str) and transactional_id.startswith(self.txn_prefixes)

    # -- which requests touch them ---------------------------------------------------------------
    def refused(self, api_key: int, version: int, body: Any) -> ErrorCode | None:
        """The error for a decoded request that touches kshare's state, else ``None``."""
        if api_key in TOPIC_KEYED:
            if any(self.topic(k) for k in routes.request_keys(body, TOPIC_KEYED[api_key])):
                return WRITE_REFUSAL.get(api_key, ErrorCode.unknown_topic_or_partition)
        elif api_key == ApiKey.DELETE_TOPICS:  # DeleteTopics: names up to v5, topics[] by name or id from v6
            names = body.topic_names if hasattr(body, "topic_names") else [t.name or t.topic_id for t in body.topics]
            if any(self.topic(n) for n in names):
                return ErrorCode.unknown_topic_or_partition
        elif api_key == ApiKey.DELETE_RECORDS:  # DeleteRecords
            if any(self.topic(t.name) for t in body.topics):
                return ErrorCode.unknown_topic_or_partition
        elif api_key == ApiKey.ALTER_CONFIGS:  # AlterConfigs (legacy)
            if any(r.resource_type == ConfigResourceType.TOPIC and self.topic(r.resource_name) for r in body.resources):
                return ErrorCode.unknown_topic_or_partition
        elif api_key == ApiKey.DESCRIBE_PRODUCERS:
            if any(self.topic(t.name) for t in body.topics):
                return ErrorCode.unknown_topic_or_partition
        elif api_key == ApiKey.DESCRIBE_TRANSACTIONS:
            if any(self.txn(t) for t in body.transactional_ids):
                return ErrorCode.transactional_id_not_found
        elif api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
            names = [t.name for t in getattr(body, "v3_and_below_topics", ())]
            if any(self.topic(n) for n in names):
                return ErrorCode.invalid_topic_exception
        return None

    def listed(self, answer: Any) -> Any | None:
        """A ListTransactions answer without the state writers' transactional ids; ``None`` when
        it names none of them (the answer goes back as it came)."""
        states = answer.transaction_states
        kept = tuple(t for t in states if not self.txn(t.transactional_id))
        return None if len(kept) == len(states) else dataclasses.replace(answer, transaction_states=kept)


def join_described(backend: bytes | bytearray, hidden: bytes) -> bytes:
    """One DescribeTransactions answer (framed) from the backend's for the other ids and the
    sidecar's for the hidden ones: the backend's entries are joined as bytes, because kio cannot
    read them all — an Empty transaction's start time is −1, which its timestamp type refuses.

    Both are flexible (every version is): size, correlation id, header tags, ThrottleTimeMs,
    TransactionStates as a compact array, and the body's tags — none, as Kafka sends them."""
    backend = bytes(backend)
    if backend[-1] != 0 or hidden[-1] != 0:
        raise ValueError("a DescribeTransactions answer with tagged fields")
    head, count, start = _states(backend)
    _, extra, extra_start = _states(hidden)
    body = backend[4:head] + uvarint(count + extra + 1) + backend[start:-1] + hidden[extra_start:]
    return len(body).to_bytes(4, "big") + body


def _states(frame: bytes) -> tuple[int, int, int]:
    """(where the array's length is, how many entries, where they start) in a framed answer."""
    pos = skip_tagged_fields(frame, 8) + 4  # size and correlation id, header tags; ThrottleTimeMs
    n, start = read_uvarint(frame, pos)
    return pos, n - 1, start
