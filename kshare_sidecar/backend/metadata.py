"""Backend topic metadata: Metadata requests (v1..v12 through kio) and the topic cache.

Why a cache of our own rather than aiokafka's ``ClusterMetadata``: aiokafka reads Metadata v5,
which has no topic IDs, and only refreshes every ``metadata_max_age_ms``. The share APIs address
topics by ID and must find the partition leader to read from, so one kio Metadata answer fills
both: names ↔ IDs and partition leaders. aiokafka's own metadata still serves one purpose —
broker addresses for its connection pool.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from ..protocol.constants import ApiKey
from .kio_bridge import KioRequest, make
from .types import TopicInfo

METADATA_API = ApiKey.METADATA
# v1 is the first to accept "null = all topics"; v10 adds topic IDs; v12 is the newest shape
# every supported backend speaks (v13 only adds a top-level error code).
METADATA_VERSIONS = range(1, 13)
ZERO_UUID = uuid.UUID(int=0)
_DELETED_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class TopicMeta:
    """One topic as the backend described it, before kshare assigns the ID it presents."""

    name: str
    backend_id: uuid.UUID | None  # None: the backend gave no (or a zero) ID
    internal: bool
    leaders: tuple[int, ...]  # leader broker id per partition index; -1 = none
    leader_epochs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MetadataAnswer:
    topics: dict[str, TopicMeta]
    unknown: frozenset[str]  # names the backend said do not exist
    version: int


def metadata_request(names: Iterable[str] | None) -> KioRequest:
    """A Metadata request for ``names`` (None = all topics) that never auto-creates topics."""
    wanted = None if names is None else tuple(names)

    def build(mod, version: int):
        topics = None if wanted is None else tuple(make(mod.MetadataRequestTopic, name=n, topic_id=None) for n in wanted)
        return make(
            mod.MetadataRequest,
            topics=topics,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )

    return KioRequest(METADATA_API, METADATA_VERSIONS, build)


def parse_metadata(response, version: int) -> MetadataAnswer:
    topics: dict[str, TopicMeta] = {}
    unknown: set[str] = set()
    for t in response.topics:
        if t.name is None:
            continue
        if t.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
            unknown.add(t.name)
            continue
        if t.error_code != 0 and not t.partitions:
            continue  # e.g. LEADER_NOT_AVAILABLE right after creation: nothing usable yet
        count = max((p.partition_index for p in t.partitions), default=-1) + 1
        leaders = [-1] * count
        epochs = [-1] * count
        for p in t.partitions:
            leaders[p.partition_index] = int(p.leader_id)
            epochs[p.partition_index] = int(getattr(p, "leader_epoch", -1))
        backend_id = getattr(t, "topic_id", None)
        if backend_id == ZERO_UUID:
            backend_id = None
        topics[t.name] = TopicMeta(
            name=t.name,
            backend_id=backend_id,
            internal=bool(getattr(t, "is_internal", False)),
            leaders=tuple(leaders),
            leader_epochs=tuple(epochs),
        )
    return MetadataAnswer(topics, frozenset(unknown), version)


@dataclass(frozen=True, slots=True)
class CachedTopic:
    info: TopicInfo
    meta: TopicMeta
    minted: bool  # True when the ID came from the TopicIdStore, not the backend
    at: float  # monotonic time this entry was last confirmed by the backend

    def age(self, now: float) -> float:
        return now - self.at


class TopicCache:
    """Name and ID indexes over the last metadata seen; plain dict lookups for the hot path."""

    def __init__(self) -> None:
        self.by_name: dict[str, CachedTopic] = {}
        self.by_id: dict[uuid.UUID, CachedTopic] = {}
        self.full_refresh_at: float = 0.0  # monotonic time of the last all-topics refresh
        #: backend topic ids a DeleteTopics deleted (oldest first, bounded): a broker whose metadata
        #: has not caught up yet must not put such a topic back (ids are never reused)
        self.deleted: dict[uuid.UUID, None] = {}

    def put(self, entry: CachedTopic) -> None:
        old = self.by_name.get(entry.info.name)
        if old is not None and old.info.topic_id != entry.info.topic_id:
            self.by_id.pop(old.info.topic_id, None)
        self.by_name[entry.info.name] = entry
        self.by_id[entry.info.topic_id] = entry

    def drop(self, name: str) -> CachedTopic | None:
        old = self.by_name.pop(name, None)
        if old is not None:
            self.by_id.pop(old.info.topic_id, None)
        return old

    def mark_deleted(self, backend_id: uuid.UUID) -> None:
        self.deleted[backend_id] = None
        while len(self.deleted) > _DELETED_KEPT:
            del self.deleted[next(iter(self.deleted))]

    def age(self) -> float:
        return time.monotonic() - self.full_refresh_at if self.full_refresh_at else float("inf")
