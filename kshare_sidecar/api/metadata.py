"""Metadata (key 3, v0–v13): the sidecar is the whole cluster, and leads every partition.

Clients resolve share assignments (topic IDs) through Metadata and route fetches and acks by
partition leader, so: one broker (the sidecar), every leader = its node id with epoch 0,
replicas/isr = [node id], and real, stable topic IDs (v10+). librdkafka also looks topics up *by
ID* (v12+, name null). Topics are never auto-created.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v13 import response as v13
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from ..protocol.constants import ApiKey
from ..auth.acls import CLUSTER_NAME, Decider, Op, Res
from ..log.types import TopicInfo
from .catalog import TopicCatalog
from .context import KafkaError, RequestContext, acl_of
from .registry import ApiRegistry

API_KEY = ApiKey.METADATA
MIN_VERSION, MAX_VERSION = 0, 13
_FIRST_ID_LOOKUP_VERSION = 12
_ZERO_UUID = uuid.UUID(int=0)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


class MetadataHandler:
    """``backend`` (pass-through, optional): an object with ``async metadata(names, auto_create=)``
    returning the backend's own Metadata answer. With it, leader epochs are the backend's (clients
    send them back on forwarded Fetch/Produce, where a made-up epoch would be FENCED) and
    ``allow_auto_topic_creation`` reaches the backend; topic ids stay the catalog's."""

    def __init__(self, catalog: TopicCatalog, backend: Any = None, cluster: Any = None) -> None:
        self._catalog = catalog
        self._backend = backend
        #: a cluster of sidecars (issue 15): a ``ClusterView`` — every live sidecar is a broker and
        #: each partition's leader is the sidecar leading its share-partitions
        self._cluster = cluster

    async def __call__(self, ctx: RequestContext, header: Any, request: Any) -> Any:
        topics = await self._topics(ctx, request)
        acl = await acl_of(ctx)
        if not acl.unrestricted:
            topics = _authorized(acl, ctx, request, topics)
        if self._backend is not None:
            topics = await self._from_backend(ctx, request, topics)
        if self._cluster is not None:
            return _response(ctx, [_led_by(self._cluster, t) for t in topics],
                             brokers=self._cluster.nodes(ctx.listener))
        return _response(ctx, topics)

    async def _from_backend(self, ctx: RequestContext, request: Any,
                            topics: list[v13.MetadataResponseTopic]) -> list[v13.MetadataResponseTopic]:
        """Epochs, leaderless partitions and auto-creation from the backend's own answer."""
        auto = bool(getattr(request, "allow_auto_topic_creation", False))
        names = [t.name for t in topics if t.name is not None and (
            t.error_code == ErrorCode.none or (auto and t.error_code == ErrorCode.unknown_topic_or_partition))]
        if not names:
            return topics
        answer = await self._backend.metadata(names, auto_create=auto)
        by_name = {t.name: t for t in answer.topics}
        node = ctx.node.node_id
        # The catalog is a cache (up to metadata.max.age): a topic whose partitions were added a
        # moment ago (CreatePartitions, forwarded) has more in the backend's own answer. Re-read
        # it, or a producer would be told of the old count ("Unknown partition").
        grown = [str(t.name) for t in topics if t.name is not None and t.error_code == ErrorCode.none
                 and t.name in by_name and by_name[t.name].error_code == ErrorCode.none
                 and len(by_name[t.name].partitions) != len(t.partitions)]
        refresh = getattr(self._catalog, "refresh_topics", None)
        if grown and refresh is not None:
            await refresh(grown)
            fresh = await self._catalog.describe_topics(grown)
            topics = [_topic(fresh[str(t.name)], node) if str(t.name) in fresh else t for t in topics]
        out = []
        for topic in topics:
            found = by_name.get(topic.name)
            if found is None:
                out.append(topic)
            elif found.error_code != ErrorCode.none:  # e.g. LEADER_NOT_AVAILABLE while auto-creating
                out.append(_unknown_name(topic.name, ErrorCode(found.error_code)))
            elif topic.error_code != ErrorCode.none:  # created a moment ago: the client asks again
                out.append(_unknown_name(topic.name, ErrorCode.leader_not_available))
            else:
                epochs = {int(p.partition_index): (int(p.leader_id), int(getattr(p, "leader_epoch", 0)),
                                                   ErrorCode(p.error_code)) for p in found.partitions}
                out.append(dataclasses.replace(topic, partitions=tuple(
                    _with_backend(p, epochs.get(p.partition_index), node) for p in topic.partitions)))
        return out

    async def _topics(self, ctx: RequestContext, request: Any) -> list[v13.MetadataResponseTopic]:
        node = ctx.node.node_id
        requested = request.topics
        # v0: an empty list means "all topics"; v1+: null means all, empty means none.
        if requested is None or (ctx.api_version == 0 and not requested):
            if self._backend is not None:  # the backend's list is current; the catalog may lag
                answer = await self._backend.metadata(None)
                names = [t.name for t in answer.topics if t.name is not None]
                found = await self._catalog.describe_topics(names)
            else:
                found = await self._catalog.describe_topics(None)
            return [_topic(info, node) for info in sorted(found.values(), key=lambda t: t.name)]

        by_name: list[str] = []
        wanted: list[tuple[str, Any]] = []  # ("name", str) | ("id", uuid | None), request order
        seen: set[Any] = set()
        for entry in requested:
            name = entry.name
            topic_id = getattr(entry, "topic_id", None)
            if name is not None:
                key: tuple[str, Any] = ("name", name)
            else:
                if ctx.api_version < _FIRST_ID_LOOKUP_VERSION:
                    # Kafka rejects the whole request: names are mandatory before v12.
                    raise KafkaError(
                        ErrorCode.invalid_request,
                        f"topic name can not be null for version {ctx.api_version}",
                    )
                key = ("id", topic_id)
            if key in seen:
                continue
            seen.add(key)
            wanted.append(key)
            if key[0] == "name":
                by_name.append(name)

        found = await self._catalog.describe_topics(by_name) if by_name else {}
        out: list[v13.MetadataResponseTopic] = []
        for kind, value in wanted:
            if kind == "name":
                info = found.get(value)
                out.append(_topic(info, node) if info else _unknown_name(value))
            else:
                info = None
                if value is not None and value != _ZERO_UUID:
                    info = await self._catalog.topic_by_id(value)
                out.append(_topic(info, node) if info else _unknown_id(value))
        return out


def _authorized(acl: Decider, ctx: RequestContext, request: Any,
                topics: list[v13.MetadataResponseTopic]) -> list[v13.MetadataResponseTopic]:
    """Kafka's Metadata rules for the principal (authorizer.class.name = backend): all topics —
    only those with DESCRIBE; named topics without DESCRIBE — TOPIC_AUTHORIZATION_FAILED, no id
    (existence not disclosed); by id — TOPIC_AUTHORIZATION_FAILED with the id, no name; a missing
    topic to auto-create without CREATE on the cluster or the topic — TOPIC_AUTHORIZATION_FAILED
    (so the sidecar's own credentials never create it)."""
    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        return [t for t in topics if t.name is None or acl.allows(Op.DESCRIBE, Res.TOPIC, t.name)]
    # _topics answers each distinct (name | id) entry once, in request order: pair them up again
    kinds = list(dict.fromkeys(("name", e.name) if e.name is not None else ("id", getattr(e, "topic_id", None))
                               for e in requested))
    auto = bool(getattr(request, "allow_auto_topic_creation", False))
    may_create_all = auto and acl.allows(Op.CREATE, Res.CLUSTER, CLUSTER_NAME)
    out = []
    for (kind, _), t in zip(kinds, topics, strict=True):
        if t.name is None:
            out.append(t)
        elif not acl.allows(Op.DESCRIBE, Res.TOPIC, t.name):
            if kind == "name":
                out.append(_unknown_name(t.name, ErrorCode.topic_authorization_failed))
            else:
                out.append(_unknown_id(t.topic_id, ErrorCode.topic_authorization_failed))
        elif auto and t.error_code == ErrorCode.unknown_topic_or_partition and not may_create_all \
                and not acl.allows(Op.CREATE, Res.TOPIC, t.name):
            out.append(_unknown_name(t.name, ErrorCode.topic_authorization_failed))
        else:
            out.append(t)
    return out


def _with_backend(p: v13.MetadataResponsePartition, backend: tuple[int, int, ErrorCode] | None,
                  node: int) -> v13.MetadataResponsePartition:
    if backend is None:
        return p
    leader, epoch, code = backend
    if leader < 0:
        return dataclasses.replace(p, error_code=code if code != ErrorCode.none else ErrorCode.leader_not_available,
                                   leader_id=BrokerId(-1), leader_epoch=i32(epoch))
    return dataclasses.replace(p, leader_epoch=i32(epoch))


def _led_by(cluster: Any, topic: v13.MetadataResponseTopic) -> v13.MetadataResponseTopic:
    """Each partition led by the sidecar owning its share-partitions' state partition."""
    if topic.topic_id is None or not topic.partitions:
        return topic
    parts = []
    for p in topic.partitions:
        if p.leader_id < 0:
            parts.append(p)
            continue
        leader = cluster.leader(str(topic.topic_id), p.partition_index)
        parts.append(dataclasses.replace(p, leader_id=leader, replica_nodes=(leader,), isr_nodes=(leader,)))
    return dataclasses.replace(topic, partitions=tuple(parts))


def _topic(info: TopicInfo, node: int) -> v13.MetadataResponseTopic:
    leader = BrokerId(node)
    replicas = (leader,)
    return v13.MetadataResponseTopic(
        error_code=ErrorCode.none,
        name=TopicName(info.name),
        topic_id=info.topic_id,
        is_internal=info.internal,
        partitions=tuple(
            v13.MetadataResponsePartition(
                error_code=ErrorCode.none,
                partition_index=i32(p),
                leader_id=leader,
                leader_epoch=i32(0),
                replica_nodes=replicas,
                isr_nodes=replicas,
                offline_replicas=(),
            )
            for p in range(info.partitions)
        ),
    )


def _unknown_name(
    name: str | None, code: ErrorCode = ErrorCode.unknown_topic_or_partition
) -> v13.MetadataResponseTopic:
    return v13.MetadataResponseTopic(error_code=code, name=None if name is None else TopicName(name),
                                     topic_id=None, partitions=())


def _unknown_id(
    topic_id: uuid.UUID | None, code: ErrorCode = ErrorCode.unknown_topic_id
) -> v13.MetadataResponseTopic:
    return v13.MetadataResponseTopic(error_code=code, name=None, topic_id=topic_id, partitions=())


def _response(ctx: RequestContext, topics: list[v13.MetadataResponseTopic],
              brokers: list | None = None) -> v13.MetadataResponse:
    node = ctx.node
    listed: tuple[v13.MetadataResponseBroker, ...] = (v13.MetadataResponseBroker(
        node_id=BrokerId(node.node_id), host=node.host, port=i32(node.port), rack=node.rack),)
    if brokers:
        listed += tuple(v13.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=None)
                        for b in brokers if b.node_id != node.node_id)
    return v13.MetadataResponse(
        throttle_time=_NO_THROTTLE,
        brokers=listed,
        cluster_id=node.cluster_id,
        controller_id=BrokerId(node.effective_controller_id),
        topics=tuple(topics),
        error_code=ErrorCode.none,
    )


def metadata_error_response(ctx: RequestContext, request: Any, code: ErrorCode, message: str | None) -> Any:
    """Kafka's Metadata error form: every requested topic carries the error.

    A failed "all topics" request has nothing to mirror, so it closes the connection (``None``)
    instead of claiming the cluster is empty. Catalog failures should raise ``KafkaError`` with a
    retriable code (e.g. LEADER_NOT_AVAILABLE); anything else becomes UNKNOWN_SERVER_ERROR.
    """
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        return None
    topics = []
    for t in request.topics:
        if t.name is not None:
            topics.append(_unknown_name(t.name, code))
        else:
            # Names are non-nullable in responses before v12: echo the ID with an empty name.
            entry = _unknown_id(getattr(t, "topic_id", None), code)
            if ctx.api_version < _FIRST_ID_LOOKUP_VERSION:
                entry = dataclasses.replace(entry, name=TopicName(""))
            topics.append(entry)
    return _response(ctx, topics)


def register(registry: ApiRegistry, catalog: TopicCatalog, backend: Any = None, cluster: Any = None) -> None:
    registry.register(
        API_KEY, MIN_VERSION, MAX_VERSION, MetadataHandler(catalog, backend, cluster),
        error_response=metadata_error_response, replace=backend is not None or cluster is not None,
    )
