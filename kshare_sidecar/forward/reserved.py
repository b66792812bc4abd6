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

Produce is checked on the raw path by walking the frame for its topics only, names or (v13+) ids
(``produce.py``: records are skipped by length, never copied); the admin APIs are small and decoded.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.constants import ApiKey, ConfigResourceType
from . import routes

#: Admin requests naming topics: (request list, item name attribute or None, response list, name).
TOPIC_KEYED: dict[int, routes.KeySpec] = {
    19: routes.KeySpec("topics", "name", "topics", "name"),
    37: routes.KeySpec("topics", "name", "results", "name"),
}
WRITE_REFUSAL = {19: ErrorCode.invalid_topic_exception}


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
        elif api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
            names = [t.name for t in getattr(body, "v3_and_below_topics", ())]
            if any(self.topic(n) for n in names):
                return ErrorCode.invalid_topic_exception
        return None
