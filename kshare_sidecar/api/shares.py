"""ShareFetch (key 78) and ShareAcknowledge (key 79), v1–v2: message <-> ShareService.

Responses are built in the v2 shape and converted by the registry for v1 clients. Every
partition that carried acknowledgements is answered, and `Records` is never null.
Authorization (``authorizer.class.name = backend``): see :func:`_authorize`.
"""

from __future__ import annotations

import datetime
import uuid
from typing import cast

from kio.schema.errors import ErrorCode

from kio.schema.share_acknowledge.v2 import response as a2
from kio.schema.share_fetch.v2 import response as f2
from kio.static.primitive import i32Timedelta

from ..auth.acls import Op, Res
from ..protocol.constants import ApiKey
from ..service.shares import FetchParams, ShareOut
from ..share.types import AckBatch
from .context import KafkaError, RequestContext, acl_of

_ZERO = i32Timedelta.parse(datetime.timedelta(0))


def _lock_timeout(ms: int) -> i32Timedelta:
    """The response's AcquisitionLockTimeoutMs (a group config bounded to int32 by its validation,
    so a cast: no per-response range check)."""
    return cast(i32Timedelta, datetime.timedelta(milliseconds=ms))


#: kio reads the all-zero TopicId as ``None``; Kafka carries it as Uuid.ZERO_UUID, an id no topic
#: has, so it is answered UNKNOWN_TOPIC_ID like any unknown id (and sorts with the real ones).
ZERO_UUID = uuid.UUID(int=0)


def _id(topic_id: uuid.UUID | None) -> uuid.UUID:
    return ZERO_UUID if topic_id is None else topic_id


def _check_ids(req) -> None:
    """GroupId and MemberId are nullable in the schema but required here (Kafka: INVALID_REQUEST)."""
    if not req.group_id:
        raise KafkaError(ErrorCode.invalid_request, "GroupId must be a non-empty string")
    if req.member_id is None:
        raise KafkaError(ErrorCode.invalid_request, "MemberId must not be null")


def _topics(req_topics) -> list:
    return [(_id(t.topic_id), p.partition_index,
             [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in p.acknowledgement_batches])
            for t in req_topics for p in t.partitions]


async def _authorize(ctx: RequestContext, group_id: str):
    """Kafka's rules: READ on the GROUP or the whole request is GROUP_AUTHORIZATION_FAILED; READ on
    each TOPIC, else that topic's partitions are TOPIC_AUTHORIZATION_FAILED (the returned
    ``readable`` predicate; ``None`` when nothing is restricted)."""
    acl = await acl_of(ctx)
    if acl.unrestricted:
        return None
    if not acl.allows(Op.READ, Res.GROUP, group_id):
        raise KafkaError(ErrorCode.group_authorization_failed)
    return lambda topic: acl.allows(Op.READ, Res.TOPIC, topic)


def _leader(ctx: RequestContext, mod, cluster=None, topic_id=None, partition: int = 0):
    """The partition's leader: this sidecar, or in a cluster (issue 15) the sidecar leading it —
    a NOT_LEADER_OR_FOLLOWER answer then names where to go, as a broker's does (KIP-951)."""
    if cluster is not None and topic_id is not None:
        leader = cluster.leader(str(topic_id), partition)
        return mod.LeaderIdAndEpoch(leader_id=leader, leader_epoch=0 if leader >= 0 else -1)
    return mod.LeaderIdAndEpoch(leader_id=ctx.node.node_id, leader_epoch=0)


def _endpoints(ctx: RequestContext, mod, cluster=None):
    n = ctx.node
    out = [mod.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)]
    if cluster is not None:
        out += [mod.NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=None)
                for b in cluster.nodes(ctx.listener) if b.node_id != n.node_id]
    return tuple(out)


def _by_topic(out: ShareOut) -> dict:
    topics: dict = {}
    for part in out.partitions:
        topics.setdefault(part.topic_id, []).append(part)
    return topics


def _watch_connection(ctx: RequestContext, shares, watched: set[int]) -> None:
    """A TCP disconnect closes the connection's share sessions (releasing their records)."""
    if ctx.connection is not None and ctx.conn_id not in watched:
        watched.add(ctx.conn_id)

        def closed(conn) -> None:
            watched.discard(conn.conn_id)
            shares.connection_closed(conn.conn_id)

        ctx.on_close(closed)


def make_fetch_handler(shares, cluster=None):
    watched: set[int] = set()

    async def share_fetch(ctx: RequestContext, header, req):
        _check_ids(req)
        readable = await _authorize(ctx, req.group_id)
        _watch_connection(ctx, shares, watched)
        params = FetchParams(
            max_wait_ms=int(req.max_wait.total_seconds() * 1000), min_bytes=req.min_bytes,
            max_bytes=req.max_bytes, max_records=req.max_records, batch_size=req.batch_size,
            mode=getattr(req, "share_acquire_mode", 0))
        out = await shares.share_fetch(
            conn_id=ctx.conn_id, group_id=req.group_id, member_id=req.member_id, epoch=req.share_session_epoch,
            params=params, topics=_topics(req.topics),
            forgotten=[(_id(t.topic_id), p) for t in req.forgotten_topics_data for p in t.partitions],
            is_renew=bool(getattr(req, "is_renew_ack", False)), on_park=ctx.release_ordering, readable=readable)
        responses = tuple(
            f2.ShareFetchableTopicResponse(topic_id=topic_id, partitions=tuple(
                f2.PartitionData(
                    partition_index=p.partition, error_code=p.error, error_message=p.message,
                    # kio types acknowledge_error_code int16 (not ErrorCode): the code's i16 value
                    acknowledge_error_code=(p.ack_error or ErrorCode.none).value,
                    acknowledge_error_message=p.ack_message,
                    current_leader=_leader(ctx, f2, cluster, topic_id, p.partition), records=p.records,
                    acquired_records=tuple(f2.AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset,
                                                              delivery_count=a.delivery_count) for a in p.acquired))
                for p in parts))
            for topic_id, parts in _by_topic(out).items())
        return f2.ShareFetchResponse(
            throttle_time=_ZERO, error_code=out.error, error_message=out.message,
            acquisition_lock_timeout=_lock_timeout(out.lock_timeout_ms),
            responses=responses if not out.error else (), node_endpoints=_endpoints(ctx, f2, cluster))

    return share_fetch


def make_ack_handler(shares, cluster=None):
    async def share_acknowledge(ctx: RequestContext, header, req):
        _check_ids(req)
        readable = await _authorize(ctx, req.group_id)
        out = await shares.share_acknowledge(
            conn_id=ctx.conn_id, group_id=req.group_id, member_id=req.member_id, epoch=req.share_session_epoch,
            topics=_topics(req.topics), is_renew=bool(getattr(req, "is_renew_ack", False)), readable=readable)
        responses = tuple(
            a2.ShareAcknowledgeTopicResponse(topic_id=topic_id, partitions=tuple(
                a2.PartitionData(partition_index=p.partition, error_code=p.error, error_message=p.message,
                                 current_leader=_leader(ctx, a2, cluster, topic_id, p.partition))
                for p in parts))
            for topic_id, parts in _by_topic(out).items())
        return a2.ShareAcknowledgeResponse(
            throttle_time=_ZERO, error_code=out.error, error_message=out.message,
            acquisition_lock_timeout=_lock_timeout(out.lock_timeout_ms),
            responses=responses if not out.error else (), node_endpoints=_endpoints(ctx, a2, cluster))

    return share_acknowledge


def register(registry, shares, cluster=None) -> None:
    registry.register(ApiKey.SHARE_FETCH, 1, 2, make_fetch_handler(shares, cluster))
    registry.register(ApiKey.SHARE_ACKNOWLEDGE, 1, 2, make_ack_handler(shares, cluster))
