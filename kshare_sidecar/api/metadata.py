"""Metadata (key 3, v0–v13): the sidecar is the whole cluster, and leads every partition.

Clients resolve share assignments (topic IDs) through Metadata and route fetches and acks by
partition leader, so: one broker (the sidecar), every leader = its node id with epoch 0,
replicas/isr = [node id], and real, stable topic IDs (v10+). librdkafka also looks topics up *by
ID* (v12+, name null). Topics are never auto-created.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v13 import response as v13
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from ..protocol.constants import ApiKey
from ..auth.acls import CLUSTER_NAME, NOT_PROVIDED, Decider, Op, Res
from ..backend.types import TopicInfo
from ..cluster.peers import settle
from .catalog import TopicCatalog
from .context import KafkaError, RequestContext, acl_of
from .registry import ApiRegistry

API_KEY = ApiKey.METADATA
MIN_VERSION, MAX_VERSION = 0, 13
_FIRST_ID_LOOKUP_VERSION = 12
_ZERO_UUID = uuid.UUID(int=0)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


#: in a cluster of sidecars, how long Metadata waits for the backend's own answer (epochs,
#: auto-creation) before answering from what it has: clients of a sidecar cut off from its backend
#: must learn of the other sidecars' leadership promptly
BACKEND_WAIT_S = 3.0


class MetadataHandler:
    """``backend`` (pass-through, optional): an object with ``async metadata(names, auto_create=,
    authorized_operations=)`` returning the backend's own Metadata answer. With it, leader epochs
    are the backend's (clients send them back on forwarded Fetch/Produce, where a made-up epoch
    would be FENCED) and ``allow_auto_topic_creation`` reaches the backend; topic ids stay the
    catalog's. Authorized operations: :func:`operations_source`."""

    def __init__(self, catalog: TopicCatalog, backend: Any = None, cluster: Any = None,
                 backend_operations: bool = True) -> None:
        self._catalog = catalog
        self._backend = backend
        #: a cluster of sidecars: a ``ClusterView`` — every live sidecar is a broker and
        #: each partition's leader is the sidecar leading its share-partitions
        self._cluster = cluster
        #: passthrough.credentials = sidecar: the backend's authorized operations (computed for the
        #: sidecar's principal) are the client's, as everything forwarded runs as that principal
        self._backend_operations = backend_operations

    async def __call__(self, ctx: RequestContext, header: Any, request: Any) -> Any:
        topics = await self._topics(ctx, request)
        acl = await acl_of(ctx)
        if not acl.unrestricted:
            if request.topics:  # named topics: a refusal is confirmed on fresh ACLs (Decider.confirm)
                await acl.confirm(*((Op.DESCRIBE, Res.TOPIC, t.name) for t in topics if t.name is not None))
            topics = _authorized(acl, ctx, request, topics)
        source = operations_source(ctx, self._backend, self._backend_operations)
        if self._backend is not None and not self._lapsed:
            topics = await self._from_backend(ctx, request, topics, operations=source == "backend")
        if getattr(request, "include_topic_authorized_operations", False) and source == "acl":
            topics = [_with_operations(acl, t) for t in topics]
        cluster_ops = NOT_PROVIDED
        if getattr(request, "include_cluster_authorized_operations", False) and 8 <= ctx.api_version <= 10:
            cluster_ops = await cluster_operations(ctx, self._backend, self._backend_operations)
        if self._cluster is not None:
            await settle(self._cluster)  # lapsed: name only peers it can reach (cluster/peers.py)
            return _response(ctx, [_led_by(self._cluster, t) for t in topics],
                             brokers=self._cluster.nodes(ctx.listener), cluster_ops=cluster_ops)
        return _response(ctx, topics, cluster_ops=cluster_ops)

    @property
    def _lapsed(self) -> bool:
        """This sidecar's lease lapsed (cluster/view.py): answer from what it has, at once — its
        backend may be what is cut off, and the client must learn to go elsewhere now, not after
        a backend timeout (measured: 40 s, during which the client asked nobody else)."""
        return self._cluster is not None and self._cluster.lapsed

    async def _from_backend(self, ctx: RequestContext, request: Any, topics: list[v13.MetadataResponseTopic], *,
                            operations: bool) -> list[v13.MetadataResponseTopic]:
        """Epochs, leaderless partitions and auto-creation from the backend's own answer (and, with
        ``operations``, each topic's authorized operations when the client asked for them)."""
        auto = bool(getattr(request, "allow_auto_topic_creation", False))
        operations = operations and bool(getattr(request, "include_topic_authorized_operations", False))
        names = [t.name for t in topics if t.name is not None and (
            t.error_code == ErrorCode.none or (auto and t.error_code == ErrorCode.unknown_topic_or_partition))]
        if not names:
            return topics
        try:
            answer = await asyncio.wait_for(self._backend.metadata(names, auto_create=auto,
                                                                   authorized_operations=operations),
                                            BACKEND_WAIT_S if self._cluster is not None else None)
        except TimeoutError:  # a sidecar of a cluster answers without the backend's epochs then (see _lapsed)
            return topics
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
                continue
            if found.error_code != ErrorCode.none:  # e.g. LEADER_NOT_AVAILABLE while auto-creating
                topic = _unknown_name(topic.name, ErrorCode(found.error_code))
            elif topic.error_code != ErrorCode.none:  # created a moment ago: the client asks again
                topic = _unknown_name(topic.name, ErrorCode.leader_not_available)
            else:
                epochs = {int(p.partition_index): (int(p.leader_id), int(getattr(p, "leader_epoch", 0)),
                                                   ErrorCode(p.error_code)) for p in found.partitions}
                topic = dataclasses.replace(topic, partitions=tuple(
                    _with_backend(p, epochs.get(p.partition_index), node) for p in topic.partitions))
            if operations:
                topic = dataclasses.replace(topic, topic_authorized_operations=found.topic_authorized_operations)
            out.append(topic)
        return out

    async def _topics(self, ctx: RequestContext, request: Any) -> list[v13.MetadataResponseTopic]:
        node = ctx.node.node_id
        requested = request.topics
        # v0: an empty list means "all topics"; v1+: null means all, empty means none.
        if requested is None or (ctx.api_version == 0 and not requested):
            if self._backend is not None and not self._lapsed:  # the backend's list is current; the catalog may lag
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


def operations_source(ctx: RequestContext, backend: Any, backend_operations: bool) -> str | None:
    """Where a client's authorized operations come from (Metadata, DescribeCluster,
    DescribeTopicPartitions), the principal they are Kafka's answer for being the one its requests
    are authorized as:

    - ``"acl"``: the sidecar authorizes its clients (``authorizer.class.name = backend``): the
      backend's ACLs for the client's principal, evaluated here (Kafka's answer for it); also
      without pass-through, where the sidecar answers everything and checks nothing (all of
      them, as a broker without an authorizer answers);
    - ``"backend"``: no authorizer here and forwarded requests run as the sidecar's principal
      (``passthrough.credentials = sidecar``): the backend's answer, computed for that principal;
    - ``None`` ("not provided"): no authorizer here but the backend authorizes each client as
      itself (``passthrough.credentials = client``) — the backend's answer would be the
      sidecar's, not the client's."""
    if ctx.authorizer is not None or backend is None:
        return "acl"
    return "backend" if backend_operations else None


async def cluster_operations(ctx: RequestContext, backend: Any, backend_operations: bool) -> int:
    """A client's AuthorizedOperations on the cluster, by :func:`operations_source`; 0 without
    DESCRIBE on the cluster, as Kafka (KafkaApis / AuthHelper) answers."""
    source = operations_source(ctx, backend, backend_operations)
    if source == "backend":
        return int(await backend.cluster_authorized_operations())
    if source is None:
        return NOT_PROVIDED
    acl = await acl_of(ctx)
    return acl.operations(Res.CLUSTER, CLUSTER_NAME) if acl.allows(Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME) else 0


def _with_operations(acl: Decider, topic: v13.MetadataResponseTopic) -> v13.MetadataResponseTopic:
    """Kafka sets a topic's operations on the topics the client may describe, found or not (not on
    unknown ids nor on TOPIC_AUTHORIZATION_FAILED)."""
    if topic.name is None or topic.error_code == ErrorCode.topic_authorization_failed:
        return topic
    return dataclasses.replace(topic, topic_authorized_operations=i32(acl.operations(Res.TOPIC, topic.name)))


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
        if leader < 0:  # lapsed and knowing no other sidecar (cluster/view.py): as a broker names an offline partition
            parts.append(dataclasses.replace(p, error_code=ErrorCode.leader_not_available, leader_id=BrokerId(-1),
                                             replica_nodes=(), isr_nodes=()))
            continue
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
              brokers: list | None = None, cluster_ops: int = NOT_PROVIDED) -> Any:
    """The v13 answer; a dict with ``cluster_authorized_operations`` when it is provided (a field
    of v8–v10 only, which the dispatcher's conversion keeps)."""
    node = ctx.node
    listed: tuple[v13.MetadataResponseBroker, ...] = (v13.MetadataResponseBroker(
        node_id=BrokerId(node.node_id), host=node.host, port=i32(node.port), rack=node.rack),)
    if brokers:
        listed += tuple(v13.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=None)
                        for b in brokers if b.node_id != node.node_id)
    response = v13.MetadataResponse(
        throttle_time=_NO_THROTTLE,
        brokers=listed,
        cluster_id=node.cluster_id,
        controller_id=BrokerId(node.effective_controller_id),
        topics=tuple(topics),
        error_code=ErrorCode.none,
    )
    if cluster_ops == NOT_PROVIDED:
        return response
    fields = {f.name: getattr(response, f.name) for f in dataclasses.fields(response)}
    return {**fields, "cluster_authorized_operations": cluster_ops}


def metadata_error_response(ctx: RequestContext, request: Any, code: ErrorCode, message: str | None,
                            cluster: Any = None) -> Any:
    """Kafka's Metadata error form: every requested topic carries the error; in a cluster of
    sidecars every live sidecar is still listed (a client told of one broker forgets the others).

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
    return _response(ctx, topics, brokers=cluster.nodes(ctx.listener) if cluster is not None else None)


def register(registry: ApiRegistry, catalog: TopicCatalog, backend: Any = None, cluster: Any = None,
             backend_operations: bool = True) -> None:
    def error_response(ctx: RequestContext, request: Any, code: ErrorCode, message: str | None) -> Any:
        return metadata_error_response(ctx, request, code, message, cluster)

    registry.register(
        API_KEY, MIN_VERSION, MAX_VERSION, MetadataHandler(catalog, backend, cluster, backend_operations),
        error_response=error_response, replace=backend is not None or cluster is not None,
    )
