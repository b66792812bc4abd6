"""APIs answered by the sidecar and the backend together.

The sidecar owns share groups and their GROUP configs; the backend owns everything else. A
request naming both (ListGroups, DeleteGroups, Describe/IncrementalAlterConfigs) is split, each
part answered by its owner, and the answers joined in the request's order. DescribeCluster and
DescribeTopicPartitions are the backend's answers with the sidecar as the cluster's only broker
(the same view Metadata gives, so admin tools route everything through it).

These handlers wrap the sidecar's own handlers (which answer in version-neutral dicts) and use
the pool's control connections for the backend part.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from typing import Any

from kio.schema.errors import ErrorCode

from ..api.admin import visible_groups
from ..api.context import KafkaError, RequestContext, acl_of
from ..api.metadata import cluster_operations, operations_source
from ..auth.acls import CLUSTER_NAME, NOT_PROVIDED, Op, Res
from ..api.registry import ApiRegistry
from ..protocol.constants import ApiKey, ConfigResourceType
from .pool import GROUP_KEY, BackendPool, BackendUnavailable, CoordinatorError, make

_NO_OPS = NOT_PROVIDED

LocalHandler = Callable[[RequestContext, Any, Any], Awaitable[Any]]


def _entity_dict(entity: Any) -> Any:
    """A kio entity as the dispatcher's version-neutral dict form (nested, recursively)."""
    if dataclasses.is_dataclass(entity):
        return {f.name: _entity_dict(getattr(entity, f.name)) for f in dataclasses.fields(entity)}
    if isinstance(entity, tuple):
        return tuple(_entity_dict(e) for e in entity)
    return entity


def _unavailable(exc: Exception) -> KafkaError:
    return KafkaError(ErrorCode.coordinator_not_available, f"the backend is unavailable: {exc}")


# -- ListGroups (16): share groups + every backend broker's groups -------------------------------------
def list_groups(local: LocalHandler, pool: BackendPool, native: Callable[[str], bool] = lambda g: False) -> LocalHandler:
    """The backend's own share groups are listed only when ``native`` says the sidecar passes them
    through (passthrough/native.py); the others are not the sidecar's to show."""
    async def handler(ctx: RequestContext, header: Any, req: Any) -> Any:
        mine = await local(ctx, header, req)
        # a moved group is listed as the backend has it, not as kshare's empty record of it
        mine = {**mine, "groups": tuple(g for g in mine["groups"] if not native(g["group_id"]))}
        types = tuple(getattr(req, "types_filter", ()) or ())
        backend_types = tuple(t for t in types if t.lower() != "share")
        # the backend's share groups, when it has any (known at start: a sidecar restarted after
        # the backend's upgrade lists them)
        share_too = bool(types) and len(backend_types) < len(types) and ApiKey.SHARE_GROUP_HEARTBEAT in pool.versions
        if types and not backend_types and not share_too:
            return mine
        version = pool.version(16, ctx.api_version)
        request = make(16, version, states_filter=tuple(getattr(req, "states_filter", ()) or ()),
                       types_filter=backend_types + (("share",) if share_too else ()))
        try:
            answers = await asyncio.gather(*(pool.call(node, request) for node in sorted(pool.brokers)))
        except BackendUnavailable as exc:
            raise _unavailable(exc) from exc
        groups = list(mine["groups"])
        seen = {g["group_id"] for g in groups}
        acl = await acl_of(ctx)  # the backend answered the sidecar's principal: filter for the client's
        wanted = {t.lower() for t in types}
        for answer in answers:
            if answer.error_code != ErrorCode.none:
                return {**mine, "error_code": answer.error_code}
            for g in answer.groups:
                group_type = getattr(g, "group_type", None) or ("classic" if g.protocol_type else "")
                if group_type.lower() == "share" and not native(g.group_id):
                    continue
                if g.group_id in seen or (wanted and group_type.lower() not in wanted):
                    continue
                seen.add(g.group_id)
                groups.append({"group_id": g.group_id, "protocol_type": g.protocol_type,
                               "group_state": getattr(g, "group_state", ""), "group_type": group_type})
        return {**mine, "groups": tuple(visible_groups(acl, groups))}

    return handler


# -- DeleteGroups (42): share groups here, the rest at their backend coordinators ----------------
def delete_groups(local: LocalHandler, pool: BackendPool, is_share_group: Callable[[str], bool]) -> LocalHandler:
    async def handler(ctx: RequestContext, header: Any, req: Any) -> Any:
        names = list(dict.fromkeys(req.groups_names))
        acl = await acl_of(ctx)  # the backend would be asked as the sidecar: Kafka's DELETE check here
        allowed = await acl.permitted(Op.DELETE, Res.GROUP, names)
        results: dict[str, Any] = {g: ErrorCode.group_authorization_failed for g in names if g not in allowed}
        ours = [g for g in names if is_share_group(g) and g not in results]
        if ours:
            answer = await local(ctx, header, dataclasses.replace(req, groups_names=tuple(ours)))
            results |= {r["group_id"]: r["error_code"] for r in answer["results"]}
        by_node: dict[int, list[str]] = {}
        for group in names:
            if group in results:
                continue
            try:
                by_node.setdefault(await pool.coordinator(GROUP_KEY, group), []).append(group)
            except CoordinatorError as exc:
                results[group] = exc.code
            except BackendUnavailable:
                results[group] = ErrorCode.coordinator_not_available
        version = pool.version(42, ctx.api_version)

        async def ask(node: int, groups: list[str]) -> None:
            try:
                answer = await pool.call(node, make(42, version, groups_names=tuple(groups)))
            except BackendUnavailable:
                results.update({g: ErrorCode.coordinator_not_available for g in groups})
                return
            for r in answer.results:
                results[r.group_id] = r.error_code
                if r.error_code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                    pool.forget_coordinator(GROUP_KEY, r.group_id)

        await asyncio.gather(*(ask(n, g) for n, g in by_node.items()))
        return {"throttle_time": 0, "results": tuple(
            {"group_id": g, "error_code": results.get(g, ErrorCode.unknown_server_error)} for g in names)}

    return handler


# -- DescribeConfigs (32) / IncrementalAlterConfigs (44): GROUP here, the rest at the backend -----
def configs(local: LocalHandler, pool: BackendPool, api_key: int, out_list: str,
            node_id: Callable[[], int], hidden: AbstractSet[str] = frozenset()) -> LocalHandler:
    async def handler(ctx: RequestContext, header: Any, req: Any) -> Any:
        resources = list(req.resources)
        answers: dict[int, Any] = {}
        ours = [i for i, r in enumerate(resources) if r.resource_type == ConfigResourceType.GROUP]
        if ours:
            mine = await local(ctx, header, dataclasses.replace(req, resources=tuple(resources[i] for i in ours)))
            answers |= dict(zip(ours, mine[out_list]))
        routed: dict[int, list[tuple[int, Any, str | None]]] = {}
        acl = await acl_of(ctx)  # the backend is asked as the sidecar: Kafka's checks for the client here
        for i, r in enumerate(resources):
            if i in answers:
                continue
            denied = await _config_denied(acl, api_key, r)
            if denied is not None:
                answers[i] = {"error_code": denied[0], "error_message": denied[1], "resource_type": r.resource_type,
                              "resource_name": r.resource_name, **({"configs": ()} if api_key == ApiKey.DESCRIBE_CONFIGS else {})}
                continue
            if r.resource_type == ConfigResourceType.TOPIC and r.resource_name in hidden:  # kshare's state topic
                answers[i] = {"error_code": ErrorCode.unknown_topic_or_partition, "error_message": None,
                              "resource_type": r.resource_type, "resource_name": r.resource_name,
                              **({"configs": ()} if api_key == ApiKey.DESCRIBE_CONFIGS else {})}
                continue
            node, renamed = _config_node(r, pool, node_id())
            routed.setdefault(node, []).append((i, r, renamed))
        version = pool.version(api_key, ctx.api_version)

        async def ask(node: int, items: list[tuple[int, Any, str | None]]) -> None:
            sent = tuple(r if renamed is None else dataclasses.replace(r, resource_name=renamed)
                         for _, r, renamed in items)
            request = make(api_key, version, **{**_entity_dict_shallow(req), "resources": sent})
            try:
                answer = await pool.call(node if node >= 0 else None, request)
            except BackendUnavailable as exc:
                for i, r, _ in items:
                    answers[i] = {"error_code": ErrorCode.request_timed_out, "error_message": str(exc),
                                  "resource_type": r.resource_type, "resource_name": r.resource_name,
                                  **({"configs": ()} if api_key == ApiKey.DESCRIBE_CONFIGS else {})}
                return
            for (i, r, _), result in zip(items, getattr(answer, out_list)):
                answers[i] = {**_entity_dict(result), "resource_name": r.resource_name}

        await asyncio.gather(*(ask(n, items) for n, items in routed.items()))
        return {"throttle_time": 0, out_list: tuple(answers[i] for i in range(len(resources)))}

    return handler


_CLUSTER_CONFIG_TYPES = (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER, ConfigResourceType.CLIENT_METRICS)


async def _config_denied(acl: Any, api_key: int, resource: Any) -> tuple[ErrorCode, str | None] | None:
    """Kafka's ConfigHelper / ControllerApis rules for backend resources: DESCRIBE_CONFIGS (32) or
    ALTER_CONFIGS (44) on the TOPIC, or on the CLUSTER for broker, broker-logger and client-metrics
    resources."""
    op = Op.DESCRIBE_CONFIGS if api_key == ApiKey.DESCRIBE_CONFIGS else Op.ALTER_CONFIGS
    if resource.resource_type == ConfigResourceType.TOPIC and not await acl.permits(op, Res.TOPIC, resource.resource_name):
        return ErrorCode.topic_authorization_failed, "Topic authorization failed." if api_key == ApiKey.DESCRIBE_CONFIGS else None
    if resource.resource_type in _CLUSTER_CONFIG_TYPES and not await acl.permits(op, Res.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed, "Cluster authorization failed." if api_key == ApiKey.DESCRIBE_CONFIGS else None
    return None


def _entity_dict_shallow(entity: Any) -> dict[str, Any]:
    return {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}


def _config_node(resource: Any, pool: BackendPool, sidecar_id: int) -> tuple[int, str | None]:
    """Which backend broker answers for a resource, and the name to ask it with.

    BROKER / BROKER_LOGGER resources name one broker; clients know only the sidecar's node id,
    which maps to the backend's lowest broker id (and back, in the answer).
    """
    if resource.resource_type not in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) or not resource.resource_name:
        return -1, None
    try:
        wanted = int(resource.resource_name)
    except ValueError:
        return -1, None
    if wanted in pool.brokers:
        return wanted, None
    if wanted == sidecar_id and pool.brokers:
        node = pool.any_node()
        return node, str(node)
    return -1, None


# -- DescribeCluster (60): the sidecar is the cluster's only broker --------------------------------
def describe_cluster(pool: BackendPool, backend_operations: bool) -> LocalHandler:
    """Authorized operations as Metadata's (api.metadata.cluster_operations)."""
    async def handler(ctx: RequestContext, header: Any, req: Any) -> Any:
        node = ctx.node
        ops = _NO_OPS
        if getattr(req, "include_cluster_authorized_operations", False):
            try:
                ops = await cluster_operations(ctx, pool, backend_operations)
            except BackendUnavailable as exc:
                raise KafkaError(ErrorCode.request_timed_out, str(exc)) from exc
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "endpoint_type": 1,
                "cluster_id": node.cluster_id or pool.cluster_id or "",
                "controller_id": node.effective_controller_id,
                "brokers": ({"broker_id": node.node_id, "host": node.host, "port": node.port, "rack": node.rack,
                             "is_fenced": False},),
                "cluster_authorized_operations": ops}

    return handler


# -- DescribeTopicPartitions (75): the backend's answer, leaders rewritten to the sidecar ------------
def describe_topic_partitions(pool: BackendPool, hidden: AbstractSet[str], backend_operations: bool) -> LocalHandler:
    """The backend's authorized operations are for the sidecar's principal: replaced by the client's
    where they differ (api.metadata.operations_source)."""
    async def handler(ctx: RequestContext, header: Any, req: Any) -> Any:
        try:
            answer = await pool.call(None, req)
        except BackendUnavailable as exc:
            raise KafkaError(ErrorCode.request_timed_out, str(exc)) from exc
        me = ctx.node.node_id
        one = lambda ids: (me,) if ids else ()  # noqa: E731
        acl = await acl_of(ctx)  # asked as the sidecar: Kafka's DESCRIBE rule for the client here
        named = bool(getattr(req, "topics", None))
        source = operations_source(ctx, pool, backend_operations)
        if named:  # a refusal is confirmed on fresh ACLs (Decider.confirm)
            await acl.confirm(*((Op.DESCRIBE, Res.TOPIC, t.name) for t in answer.topics if t.name not in hidden))
        topics = []
        for t in answer.topics:
            if t.name in hidden:
                continue
            if not acl.allows(Op.DESCRIBE, Res.TOPIC, t.name):
                if named:  # asked by name: TOPIC_AUTHORIZATION_FAILED, nothing else disclosed
                    topics.append(dataclasses.replace(t, error_code=ErrorCode.topic_authorization_failed,
                                                      topic_id=None, is_internal=False, partitions=()))
                continue
            parts = tuple(dataclasses.replace(
                p, leader_id=me if p.leader_id >= 0 else -1, replica_nodes=one(p.replica_nodes),
                isr_nodes=one(p.isr_nodes), eligible_leader_replicas=None if p.eligible_leader_replicas is None
                else one(p.eligible_leader_replicas), last_known_elr=None if p.last_known_elr is None
                else one(p.last_known_elr), offline_replicas=()) for p in t.partitions)
            ops = t.topic_authorized_operations if source == "backend" else \
                acl.operations(Res.TOPIC, t.name) if source == "acl" else _NO_OPS
            topics.append(dataclasses.replace(t, partitions=parts, topic_authorized_operations=ops))
        return dataclasses.replace(answer, topics=tuple(topics))

    return handler


def register(registry: ApiRegistry, pool: BackendPool, *, is_share_group: Callable[[str], bool],
             node_id: Callable[[], int], hidden: AbstractSet[str], backend_operations: bool = True,
             native: Callable[[str], bool] = lambda g: False) -> None:
    """Wrap the sidecar's own ListGroups, DeleteGroups and config handlers; add DescribeCluster
    and DescribeTopicPartitions. Ranges are clamped to what the backend speaks (ListGroups: only
    from below)."""
    def wrap(api_key: int, make_handler: Callable[[LocalHandler], LocalHandler], *, own_top: bool = False) -> None:
        entry = registry.get(api_key)
        if entry is None or api_key not in pool.versions:
            return
        lo, hi = pool.versions[api_key]
        lo, hi = max(lo, entry.min_version), entry.max_version if own_top else min(hi, entry.max_version)
        if lo <= hi:
            registry.register(api_key, lo, hi, make_handler(entry.handler), error_response=entry.error_response,
                              replace=True)

    # ListGroups up to the sidecar's own v5 whatever the backend speaks: kafka-share-groups.sh lists
    # with v5's type filter, which Kafka 3.7 and older lack (v4); list_groups asks such a backend at
    # its highest version and filters the types itself (its groups are all classic).
    wrap(16, lambda h: list_groups(h, pool, native), own_top=True)
    wrap(42, lambda h: delete_groups(h, pool, is_share_group))
    wrap(32, lambda h: configs(h, pool, 32, "results", node_id, hidden))
    wrap(44, lambda h: configs(h, pool, 44, "responses", node_id, hidden))
    for api_key, handler in ((60, describe_cluster(pool, backend_operations)),
                             (75, describe_topic_partitions(pool, hidden, backend_operations))):
        if api_key in pool.versions:
            from . import kio_range
            lo, hi = pool.versions[api_key]
            found = kio_range(api_key, lo, hi)
            if found is not None:
                registry.register(api_key, *found, handler, replace=True)
