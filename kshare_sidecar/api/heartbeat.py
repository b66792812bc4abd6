"""ShareGroupHeartbeat (key 76, v1): message <-> GroupService.

Authorization (``authorizer.class.name = backend``), as Kafka's KafkaApis: READ on the GROUP, else
GROUP_AUTHORIZATION_FAILED; then, when SubscribedTopicNames is sent, DESCRIBE on every one of
them, else TOPIC_AUTHORIZATION_FAILED (no message, the heartbeat is not applied — clients treat it
as non-fatal and report it to the application).
"""

from __future__ import annotations

import datetime
from typing import cast

from kio.schema.share_group_heartbeat.v1 import response as r1

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from ..auth.acls import Op, Res
from ..protocol.constants import ApiKey
from .context import RequestContext, acl_of

_ZERO = i32Timedelta.parse(datetime.timedelta(0))


def make_handler(groups):
    async def share_group_heartbeat(ctx: RequestContext, header, req):
        acl = await acl_of(ctx)
        if not await acl.permits(Op.READ, Res.GROUP, req.group_id):
            return _error(ErrorCode.group_authorization_failed)
        if req.subscribed_topic_names:
            wanted = set(req.subscribed_topic_names)
            if len(await acl.permitted(Op.DESCRIBE, Res.TOPIC, wanted)) < len(wanted):
                return _error(ErrorCode.topic_authorization_failed)
        result = await groups.heartbeat(
            group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, rack_id=req.rack_id,
            subscribed_topic_names=list(req.subscribed_topic_names) if req.subscribed_topic_names is not None
            else None, client_id=ctx.client_id or "", client_host=ctx.client_host)
        assignment = None
        if result.assignment is not None:
            assignment = r1.Assignment(topic_partitions=tuple(
                r1.TopicPartitions(topic_id=tid, partitions=tuple(sorted(ps)))
                for tid, ps in sorted(result.assignment.items())))
        if result.error:  # Kafka's error response: the code and message, every other field at its default
            return _error(result.error, result.message)
        return r1.ShareGroupHeartbeatResponse(
            throttle_time=_ZERO, error_code=result.error, error_message=result.message,
            member_id=result.member_id, member_epoch=i32(result.member_epoch),
            # share.heartbeat.interval.ms is validated to an int32 range: a cast, no check
            heartbeat_interval=cast(i32Timedelta, datetime.timedelta(milliseconds=result.heartbeat_interval_ms)),
            assignment=assignment)

    return share_group_heartbeat


def _error(code, message: str | None = None):
    return r1.ShareGroupHeartbeatResponse(
        throttle_time=_ZERO, error_code=code, error_message=message,
        member_id=None, member_epoch=i32(0), heartbeat_interval=_ZERO, assignment=None)


def register(registry, groups) -> None:
    registry.register(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1, make_handler(groups))
