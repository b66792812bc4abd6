"""Share-group admin APIs: message <-> :class:`kshare_sidecar.group.admin.AdminService`.

| key | API | versions |
|---|---|---|
| 2 | ListOffsets | 1–10 (the sidecar leads every partition in Metadata, so admin tools ask it) |
| 16 | ListGroups | 0–5 (states filter v4+, types filter v5+) |
| 42 | DeleteGroups | 0–2 |
| 77 | ShareGroupDescribe | 1 |
| 90 | DescribeShareGroupOffsets | 0–1 (Lag from v1) |
| 91 | AlterShareGroupOffsets | 0 |
| 92 | DeleteShareGroupOffsets | 0 |

Handlers return version-neutral dicts; the dispatcher converts them to the negotiated version.
See docs/admin.md for the rules.

Authorization (``authorizer.class.name = backend``) follows Kafka's KafkaApis, codes and all:
ListGroups lists only groups with DESCRIBE (all with DESCRIBE on CLUSTER); ShareGroupDescribe
needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every assigned topic
(else the group is TOPIC_AUTHORIZATION_FAILED); DescribeShareGroupOffsets DESCRIBE on the group,
topics without DESCRIBE are left out (all topics) or TOPIC_AUTHORIZATION_FAILED (named topics);
AlterShareGroupOffsets READ on the group and READ per topic; DeleteShareGroupOffsets DELETE on
the group and READ per topic; DeleteGroups DELETE per group.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ..auth.acls import CLUSTER_NAME, NOT_PROVIDED, Decider, Op, Res
from ..backend.errors import BackendError, UnknownTopicError
from ..protocol.constants import ApiKey, OffsetSpec
from ..group.admin import AdminError, AdminService, GroupDescription
from .context import KafkaError, RequestContext, acl_of
from .registry import ApiRegistry

log = logging.getLogger("kshare.api.admin")

_ZERO_UUID = uuid.UUID(int=0)
#: AuthorizedOperations "not provided" (Kafka's INT32_MIN default).
_NO_OPS = NOT_PROVIDED
#: Kafka's default messages (Errors.java) where KafkaApis sends them.
TOPIC_AUTH_MESSAGE = "Topic authorization failed."
GROUP_AUTH_MESSAGE = "Group authorization failed."


def visible_groups(acl: Decider, groups: list) -> list:
    """ListGroups' filter: everything with DESCRIBE on CLUSTER, else groups with DESCRIBE."""
    if acl.unrestricted or acl.allows(Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME):
        return list(groups)
    return [g for g in groups if acl.allows(Op.DESCRIBE, Res.GROUP, g["group_id"])]


def _raise(exc: AdminError) -> None:
    raise KafkaError(exc.code, exc.message) from exc


# -- ListGroups (16) ---------------------------------------------------------------------------
def make_list_groups(admin: AdminService):
    async def list_groups(ctx: RequestContext, header, req) -> dict[str, Any]:
        try:
            listings = admin.list_groups(states=getattr(req, "states_filter", ()) or (),
                                         types=getattr(req, "types_filter", ()) or ())
        except AdminError as exc:
            return {"throttle_time": 0, "error_code": exc.code, "groups": ()}
        return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": tuple(visible_groups(await acl_of(ctx), [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
             "group_type": g.group_type} for g in listings]))}

    return list_groups


# -- ShareGroupDescribe (77) -------------------------------------------------------------------
def _described(d) -> dict[str, Any]:
    return {
        "error_code": d.error, "error_message": d.message, "group_id": d.group_id, "group_state": d.state,
        "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch, "assignor_name": d.assignor,
        "members": tuple({
            "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
            "client_id": m.client_id, "client_host": m.client_host, "subscribed_topic_names": m.subscribed,
            "assignment": {"topic_partitions": tuple(
                {"topic_id": tid, "topic_name": name, "partitions": ps} for tid, name, ps in m.assignment)},
        } for m in d.members),
        "authorized_operations": _NO_OPS,
    }


def make_share_group_describe(admin: AdminService):
    async def share_group_describe(ctx: RequestContext, header, req) -> dict[str, Any]:
        acl = await acl_of(ctx)
        groups = []
        for group_id in req.group_ids:
            if not await acl.permits(Op.DESCRIBE, Res.GROUP, group_id):
                groups.append(_described(GroupDescription(group_id, ErrorCode.group_authorization_failed)))
                continue
            try:
                d = admin.describe_group(group_id)
            except AdminError as exc:
                d = GroupDescription(group_id, exc.code, exc.message)
            topics = {name for m in d.members for _, name, _ in m.assignment}
            if len(await acl.permitted(Op.DESCRIBE, Res.TOPIC, topics)) < len(topics):
                d = GroupDescription(group_id, ErrorCode.topic_authorization_failed, "The group has described "
                                     "topic(s) that the client is not authorized to describe.")
            described = _described(d)
            if getattr(req, "include_authorized_operations", False) and d.error == ErrorCode.none:
                described["authorized_operations"] = acl.operations(Res.GROUP, group_id)
            groups.append(described)
        return {"throttle_time": 0, "groups": tuple(groups)}

    return share_group_describe


def _share_group_describe_error(ctx, req, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "groups": tuple(
        {"error_code": code, "error_message": message, "group_id": g, "group_state": "Unknown", "group_epoch": -1,
         "assignment_epoch": -1, "assignor_name": "", "members": (), "authorized_operations": _NO_OPS}
        for g in req.group_ids)}


# -- DescribeShareGroupOffsets (90) ------------------------------------------------------------
def _offsets_topic(t) -> dict[str, Any]:
    return {"topic_name": t.name, "topic_id": t.topic_id, "partitions": tuple(
        {"partition_index": p.partition, "start_offset": p.start_offset, "leader_epoch": p.leader_epoch,
         "lag": p.lag, "error_code": p.error, "error_message": p.message} for p in t.partitions)}


def make_describe_offsets(admin: AdminService):
    async def describe_share_group_offsets(ctx: RequestContext, header, req) -> dict[str, Any]:
        acl = await acl_of(ctx)
        groups = []
        for g in req.groups:
            if not await acl.permits(Op.DESCRIBE, Res.GROUP, g.group_id):
                groups.append({"group_id": g.group_id, "topics": (), "error_code": ErrorCode.group_authorization_failed,
                               "error_message": None})
                continue
            topics = None if g.topics is None else {t.topic_name: list(t.partitions) for t in g.topics}
            denied: dict[str, list[int]] = {}
            if topics is not None:
                allowed = await acl.permitted(Op.DESCRIBE, Res.TOPIC, topics)
                denied = {n: ps for n, ps in topics.items() if n not in allowed}
                topics = {n: ps for n, ps in topics.items() if n in allowed}
            try:
                result = await admin.describe_offsets(g.group_id, topics) if topics or topics is None else []
            except AdminError as exc:
                groups.append({"group_id": g.group_id, "topics": (), "error_code": exc.code,
                               "error_message": exc.message})
                continue
            if g.topics is None:  # all topics: those without DESCRIBE are left out
                allowed = acl.allowed(Op.DESCRIBE, Res.TOPIC, {t.name for t in result})
                result = [t for t in result if t.name in allowed]
            groups.append({"group_id": g.group_id, "topics": tuple(_offsets_topic(t) for t in result) + tuple(
                {"topic_name": n, "topic_id": _ZERO_UUID, "partitions": tuple(
                    {"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                     "error_code": ErrorCode.topic_authorization_failed, "error_message": TOPIC_AUTH_MESSAGE}
                    for p in ps)} for n, ps in denied.items()),
                           "error_code": ErrorCode.none, "error_message": None})
        return {"throttle_time": 0, "groups": tuple(groups)}

    return describe_share_group_offsets


def _describe_offsets_error(ctx, req, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "groups": tuple(
        {"group_id": g.group_id, "topics": (), "error_code": code, "error_message": message} for g in req.groups)}


# -- AlterShareGroupOffsets (91) ---------------------------------------------------------------
def make_alter_offsets(admin: AdminService):
    async def alter_share_group_offsets(ctx: RequestContext, header, req) -> dict[str, Any]:
        acl = await acl_of(ctx)
        if not await acl.permits(Op.READ, Res.GROUP, req.group_id):
            raise KafkaError(ErrorCode.group_authorization_failed)
        topics: dict[str, dict[int, int]] = {}
        for t in req.topics:
            parts = topics.setdefault(t.topic_name, {})
            for p in t.partitions:
                parts[p.partition_index] = p.start_offset
        readable = await acl.permitted(Op.READ, Res.TOPIC, topics)
        denied = {n: ps for n, ps in topics.items() if n not in readable}
        try:
            result = await admin.alter_offsets(req.group_id, {n: ps for n, ps in topics.items() if n in readable})
        except AdminError as exc:
            _raise(exc)
        ids = await _topic_ids(admin, denied)
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": tuple(
            {"topic_name": t.name, "topic_id": t.topic_id, "partitions": tuple(
                {"partition_index": p.partition, "error_code": p.error, "error_message": p.message}
                for p in t.partitions)} for t in result) + tuple(
            {"topic_name": n, "topic_id": ids.get(n, _ZERO_UUID), "partitions": tuple(
                {"partition_index": p, "error_code": ErrorCode.topic_authorization_failed,
                 "error_message": TOPIC_AUTH_MESSAGE} for p in sorted(ps))} for n, ps in denied.items())}

    return alter_share_group_offsets


# -- DeleteShareGroupOffsets (92) --------------------------------------------------------------
def make_delete_offsets(admin: AdminService):
    async def delete_share_group_offsets(ctx: RequestContext, header, req) -> dict[str, Any]:
        acl = await acl_of(ctx)
        if not await acl.permits(Op.DELETE, Res.GROUP, req.group_id):
            raise KafkaError(ErrorCode.group_authorization_failed)
        names = [t.topic_name for t in req.topics]
        readable = await acl.permitted(Op.READ, Res.TOPIC, names)
        try:
            result = await admin.delete_offsets(req.group_id, [n for n in names if n in readable])
        except AdminError as exc:
            _raise(exc)
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": tuple(
            {"topic_name": n, "topic_id": _ZERO_UUID, "error_code": ErrorCode.topic_authorization_failed,
             "error_message": TOPIC_AUTH_MESSAGE} for n in dict.fromkeys(names) if n not in readable) + tuple(
            {"topic_name": t.name, "topic_id": t.topic_id, "error_code": t.error, "error_message": t.message}
            for t in result)}

    return delete_share_group_offsets


# -- DeleteGroups (42) -------------------------------------------------------------------------
def make_delete_groups(admin: AdminService):
    async def delete_groups(ctx: RequestContext, header, req) -> dict[str, Any]:
        acl = await acl_of(ctx)
        names = list(dict.fromkeys(req.groups_names))
        allowed = await acl.permitted(Op.DELETE, Res.GROUP, names)
        try:
            result = await admin.delete_groups([g for g in names if g in allowed]) if allowed else []
        except AdminError as exc:
            result = [(g, exc.code) for g in names if g in allowed]
        result = list(result) + [(g, ErrorCode.group_authorization_failed) for g in names if g not in allowed]
        return {"throttle_time": 0, "results": tuple({"group_id": g, "error_code": code} for g, code in result)}

    return delete_groups


def _delete_groups_error(ctx, req, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "results": tuple({"group_id": g, "error_code": code} for g in req.groups_names)}


async def _topic_ids(admin: AdminService, names) -> dict:
    """Topic ids for answers about topics the principal may not use (Kafka names the real id)."""
    if not names:
        return {}
    try:
        return {n: t.topic_id for n, t in (await admin.backend.describe_topics(list(names))).items()}
    except BackendError:
        return {}


# -- ListOffsets (2) ---------------------------------------------------------------------------
def make_list_offsets(backend):
    async def list_offsets(ctx: RequestContext, header, req) -> dict[str, Any]:
        isolation = int(getattr(req, "isolation_level", 0) or 0)

        async def one(topic: str, p) -> dict[str, Any]:
            out = {"partition_index": p.partition_index, "error_code": ErrorCode.none, "timestamp": -1,
                   "offset": -1, "leader_epoch": -1}
            ts = p.timestamp
            if ts in (OffsetSpec.LATEST, OffsetSpec.LATEST_TIERED):
                spec: Any = "latest"
            elif ts in (OffsetSpec.EARLIEST, OffsetSpec.EARLIEST_LOCAL):
                spec = "earliest"
            elif ts >= 0:
                spec = int(ts)
            else:  # MAX_TIMESTAMP and future specs: the backend facade cannot answer them
                out["error_code"] = ErrorCode.invalid_request
                return out
            try:
                offset = await backend.list_offsets(topic, p.partition_index, spec, isolation_level=isolation)
            except UnknownTopicError:
                out["error_code"] = ErrorCode.unknown_topic_or_partition
                return out
            except BackendError as exc:
                out["error_code"] = ErrorCode(exc.code) if exc.code in ErrorCode._value2member_map_ else \
                    ErrorCode.unknown_server_error
                return out
            out["offset"] = -1 if offset is None else offset
            return out

        topics = []
        for t in req.topics:
            parts = await asyncio.gather(*(one(t.name, p) for p in t.partitions))
            topics.append({"name": t.name, "partitions": tuple(parts)})
        return {"throttle_time": 0, "topics": tuple(topics)}

    return list_offsets


def _list_offsets_error(ctx, req, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": tuple(
        {"name": t.name, "partitions": tuple(
            {"partition_index": p.partition_index, "error_code": code, "timestamp": -1, "offset": -1,
             "leader_epoch": -1} for p in t.partitions)} for t in req.topics)}


def register(registry: ApiRegistry, admin: AdminService, backend) -> None:
    registry.register(ApiKey.LIST_OFFSETS, 1, 10, make_list_offsets(backend), error_response=_list_offsets_error)
    registry.register(ApiKey.LIST_GROUPS, 0, 5, make_list_groups(admin))
    registry.register(ApiKey.DELETE_GROUPS, 0, 2, make_delete_groups(admin), error_response=_delete_groups_error)
    registry.register(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1, make_share_group_describe(admin), error_response=_share_group_describe_error)
    registry.register(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1, make_describe_offsets(admin), error_response=_describe_offsets_error)
    registry.register(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0, make_alter_offsets(admin))
    registry.register(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0, make_delete_offsets(admin))
