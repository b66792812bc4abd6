"""ShareFetch (key 78) and ShareAcknowledge (key 79), v1–v2: message <-> SharePartitionManager.

ShareFetch answers are encoded by hand (:mod:`.shareresponse`: the acquired batches are written
as views of the backend's buffers, never copied); ShareAcknowledge answers are built in the v2
shape and converted by the registry for v1 clients. Every partition that carried
acknowledgements is answered, and `Records` is never null.
Authorization (``authorizer.class.name = backend``): see :func:`_authorize`.
Client quotas (``client.quota.enable``; quota/client_quotas.py): a throttled connection's next
request waits for the end of its throttle, MaxBytes is capped at what the client may still receive
within its quota (nothing acquired at the quota), and each ShareFetch answer's bytes are recorded
once — an answer over the quota carries ThrottleTimeMs.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import cast

from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v2 import response as a2
from kio.static.primitive import i32Timedelta

from ..auth.acls import Op, Res
from ..metrics import REQUEST_TIME
from ..protocol.constants import ApiKey
from ..share.manager import FetchParams, ShareOut
from ..share.engine.types import AckBatch
from .context import KafkaError, RequestContext, acl_of
from .shareresponse import share_fetch_body

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
    if not await acl.permits(Op.READ, Res.GROUP, group_id):
        raise KafkaError(ErrorCode.group_authorization_failed)
    return lambda topic: acl.permits(Op.READ, Res.TOPIC, topic)


def _leader(ctx: RequestContext, mod, cluster=None, topic_id=None, partition: int = 0):
    """The partition's leader: this sidecar, or in a cluster the sidecar leading it —
    a NOT_LEADER_OR_FOLLOWER answer then names where to go, as a broker's does (KIP-951)."""
    leader, epoch = _leader_of(ctx, cluster)(topic_id, partition)
    return mod.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)


def _leader_of(ctx: RequestContext, cluster=None):
    """``leader(topic_id, partition) -> (leader_id, leader_epoch)``.

    A move between sidecars has no leader epoch of its own (Metadata passes the backend's epochs
    through, which regular consumers' Fetch and OffsetsForLeaderEpoch must carry back unchanged),
    so a hint naming *another* sidecar carries epoch -1: Kafka's Java share consumer follows a
    hint only when its epoch is newer than the one it cached, and keeps fetching from a live old
    leader otherwise (every answer NOT_LEADER_OR_FOLLOWER, for good); with -1 it drops its cached
    leader and asks Metadata, which names the same sidecar. librdkafka refreshes Metadata on the
    error and reads no hint; kshare's client follows the leader id."""
    node = ctx.node.node_id
    if cluster is None:
        return lambda _topic_id, _partition: (node, 0)

    def leader(topic_id, partition: int) -> tuple[int, int]:
        led = cluster.leader(str(topic_id), partition)
        return led, 0 if led == node else -1
    return leader


def _endpoint_rows(ctx: RequestContext, cluster=None) -> list[tuple[int, str, int, str | None]]:
    n = ctx.node
    out = [(n.node_id, n.host, n.port, n.rack)]
    if cluster is not None:
        out += [(b.node_id, b.host, b.port, None) for b in cluster.nodes(ctx.listener) if b.node_id != n.node_id]
    return out


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


def _watch_connection(ctx: RequestContext, shares, watched: set[int], quotas=None) -> None:
    """A TCP disconnect closes the connection's share sessions (releasing their records)."""
    if ctx.connection is not None and ctx.conn_id not in watched:
        watched.add(ctx.conn_id)

        def closed(conn) -> None:
            watched.discard(conn.conn_id)
            shares.connection_closed(conn.conn_id)
            if quotas is not None:
                quotas.connection_closed(conn.conn_id)

        ctx.on_close(closed)


def _throttle_ms(quotas, ctx: RequestContext, out: ShareOut, at_least_ms: int) -> int:
    """Record the answer's bytes on the client's fetch quota (one check per response, the bytes
    summed over the partitions' record views); its ThrottleTimeMs."""
    if quotas is None:
        return 0
    size = sum(len(view) for p in out.partitions for view in p.records)
    return quotas.record(ctx.principal, ctx.client_id or "", size, ctx.conn_id, at_least_ms)


_FETCH_TIME = REQUEST_TIME.labels("ShareFetch")
_ACK_TIME = REQUEST_TIME.labels("ShareAcknowledge")


def make_fetch_handler(shares, cluster=None, quotas=None):
    watched: set[int] = set()

    async def share_fetch(ctx: RequestContext, header, req):
        started = time.monotonic()
        try:
            return await _share_fetch(ctx, req)
        finally:
            _FETCH_TIME.observe(time.monotonic() - started)

    async def _share_fetch(ctx: RequestContext, req):
        if quotas is not None:  # a throttled connection is muted until its throttle ends (KIP-219)
            await quotas.unmuted(ctx.conn_id)
        _check_ids(req)
        readable = await _authorize(ctx, req.group_id)
        _watch_connection(ctx, shares, watched, quotas)
        max_bytes, wait_ms = (req.max_bytes, 0) if quotas is None else \
            quotas.admit(ctx.principal, ctx.client_id or "", req.max_bytes)  # 0: acknowledgements only
        params = FetchParams(
            max_wait_ms=int(req.max_wait.total_seconds() * 1000), min_bytes=min(req.min_bytes, max_bytes),
            max_bytes=max_bytes, max_records=req.max_records, batch_size=req.batch_size,
            mode=getattr(req, "share_acquire_mode", 0))
        out = await shares.share_fetch(
            conn_id=ctx.conn_id, group_id=req.group_id, member_id=req.member_id, epoch=req.share_session_epoch,
            params=params, topics=_topics(req.topics),
            forgotten=[(_id(t.topic_id), p) for t in req.forgotten_topics_data for p in t.partitions],
            is_renew=bool(getattr(req, "is_renew_ack", False)), on_park=ctx.release_ordering, readable=readable)
        return share_fetch_body(
            throttle_ms=_throttle_ms(quotas, ctx, out, wait_ms), error_code=int(out.error), error_message=out.message, lock_timeout_ms=out.lock_timeout_ms,
            topics=_by_topic(out).items() if not out.error else (), leader=_leader_of(ctx, cluster),
            endpoints=_endpoint_rows(ctx, cluster))

    return share_fetch


def make_ack_handler(shares, cluster=None, quotas=None):
    async def share_acknowledge(ctx: RequestContext, header, req):
        started = time.monotonic()
        try:
            return await _share_acknowledge(ctx, req)
        finally:
            _ACK_TIME.observe(time.monotonic() - started)

    async def _share_acknowledge(ctx: RequestContext, req):
        if quotas is not None:  # muted with its connection (no bytes recorded: Kafka's fetch quota
            await quotas.unmuted(ctx.conn_id)  # counts ShareFetch answers only)
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


def register(registry, shares, cluster=None, quotas=None) -> None:
    registry.register(ApiKey.SHARE_FETCH, 1, 2, make_fetch_handler(shares, cluster, quotas))
    registry.register(ApiKey.SHARE_ACKNOWLEDGE, 1, 2, make_ack_handler(shares, cluster, quotas))
