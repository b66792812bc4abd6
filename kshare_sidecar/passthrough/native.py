"""Share groups the backend serves natively, passed through per group (docs/migration.md).

What a sidecar does in front of a backend with share groups of its own (Kafka 4.2+ with
``share.version`` finalized): it keeps serving every share group itself — a backend upgrade
changes nothing for kshare's groups, their state stays in its topic — except the groups marked
with kshare's group config ``share.coordinator=backend`` (``kshare state migrate-to-native`` sets
it once the group's state is on the backend). Those are passed through: their share requests go
to the backend's coordinator and partition leaders as the bytes they came in, so their consumers
move to the native coordinator without a new bootstrap, and a consumer that still points at the
sidecar can never be served a second time from kshare's old state. Native share groups made
directly on the backend (never through a migration) are the backend's business alone: the sidecar
neither lists nor serves them.

Why per group, by a mark in kshare's state, and not every group at once: kshare's groups have
state that native Kafka cannot take over as it is (the in-flight window; kshare's own configs), so
each group moves when its consumers are stopped; and the mark lives where every sidecar of a
cluster already reads a group's configs (its group record, tailed by the others).

Where: single-group requests (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge, Alter- and
DeleteShareGroupOffsets) are diverted by the dispatcher before the sidecar's handler sees them
(``ApiEntry.divert``) to the forwarder; batched ones (ShareGroupDescribe,
DescribeShareGroupOffsets) and GROUP configs are split, the marked groups asked at the backend.

With one backend broker, ShareFetch and ShareAcknowledge go through as bytes. With several, the
client's one share session with "the sidecar" is spread over sessions the sidecar keeps on each
backend broker (:mod:`.sessions`): the request is split by the partitions' leaders and the answers
merged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ..api.context import KafkaError, RequestContext
from ..api.convert import convert_to_version
from ..api.registry import ApiRegistry, RawHandler
from ..protocol.constants import AlterConfigOp, ApiKey, ConfigResourceType, ConfigSource, ConfigType
from .forwarder import Forwarder
from .mixed import _entity_dict, _entity_dict_shallow
from .pool import GROUP_KEY, BackendPool, BackendUnavailable, CoordinatorError, make
from .sessions import SplitSessions

log = logging.getLogger("kshare.forward.native")

COORDINATOR = "share.coordinator"
BACKEND = "backend"
#: Requests naming one group in ``group_id``: diverted whole.
SINGLE_GROUP = (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE,
                ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS)
_SESSIONS = (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)
#: Share APIs the backend must serve for a group to be passed to it.
_NEEDED = (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE, ApiKey.SHARE_GROUP_DESCRIBE)

LocalHandler = Callable[[RequestContext, Any, Any], Awaitable[Any]]


class NativeGroups:
    """Which share groups the backend serves (``share.coordinator=backend`` in their configs)."""

    def __init__(self, configs_of: Callable[[str], Mapping[str, Any] | None]) -> None:
        self.configs_of = configs_of  # a group's overrides: this sidecar's, or another's in a cluster

    def __call__(self, group_id: str | None) -> bool:
        if not group_id:
            return False
        configs = self.configs_of(group_id)
        return configs is not None and configs.get(COORDINATOR) == BACKEND


class Passage:
    """The pass-through of marked groups: diverts, split handlers, and the checks of marking."""

    def __init__(self, native: NativeGroups, forwarder: RawHandler, pool: BackendPool, admin: Any,
                 split: RawHandler | None = None) -> None:
        self.native = native
        self.forwarder = forwarder
        self.pool = pool
        self.admin = admin  # service.admin.AdminService: members of a group, dropping its state
        #: ShareFetch / ShareAcknowledge on a backend of several brokers (sessions.SplitSessions)
        self.split = split

    # -- single-group requests: diverted as bytes -------------------------------------------------
    def divert(self, api_key: int) -> Callable[[Any], RawHandler | None]:
        def divert(body: Any) -> RawHandler | None:
            if not self.native(getattr(body, "group_id", None)):
                return None
            if api_key in _SESSIONS and self.pool.single_node is None and self.split is not None:
                return self.split  # one session with the sidecar, one per backend broker behind it
            return self.forwarder
        return divert

    # -- batched requests: the marked groups asked at the backend ---------------------------------
    def split_groups(self, local: LocalHandler, api_key: int, ids_field: str, id_of: Callable[[Any], str],
                     error_item: Callable[[str, ErrorCode, str], dict[str, Any]]) -> LocalHandler:
        """ShareGroupDescribe / DescribeShareGroupOffsets: kshare's groups answered here, the
        marked ones by their backend coordinator; answers in the request's order."""
        async def handler(ctx: RequestContext, header: Any, req: Any) -> Any:
            items = list(getattr(req, ids_field))
            theirs = [i for i, item in enumerate(items) if self.native(id_of(item))]
            if not theirs:
                return await local(ctx, header, req)
            answers: dict[int, Any] = {}
            ours = [i for i in range(len(items)) if i not in theirs]
            mine: dict[str, Any] = {"throttle_time": 0, "groups": ()}
            if ours:
                mine = await local(ctx, header, dataclasses.replace(req, **{ids_field: tuple(items[i] for i in ours)}))
                answers |= dict(zip(ours, mine["groups"]))
            version = self.pool.version(api_key, ctx.api_version)

            async def ask(i: int) -> None:
                group = id_of(items[i])
                try:
                    node = await self.pool.coordinator(GROUP_KEY, group)
                    one = convert_to_version(dataclasses.replace(req, **{ids_field: (items[i],)}), version)
                    answer = await self.pool.call(node, one)
                    answers[i] = answer.groups[0]
                    if answer.groups[0].error_code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                        self.pool.forget_coordinator(GROUP_KEY, group)
                except CoordinatorError as exc:
                    answers[i] = error_item(group, exc.code, "the backend has no coordinator for the group")
                except BackendUnavailable as exc:
                    answers[i] = error_item(group, ErrorCode.coordinator_not_available, str(exc))

            await asyncio.gather(*(ask(i) for i in theirs))
            return {**mine, "groups": tuple(answers[i] for i in range(len(items)))}
        return handler

    # -- GROUP configs ----------------------------------------------------------------------------
    def configs(self, local: LocalHandler, api_key: int, out_list: str) -> LocalHandler:
        """Describe/IncrementalAlterConfigs: a marked group's configs are the backend's (its
        ``share.coordinator`` is added to a describe); changing ``share.coordinator`` itself is
        kshare's, checked here before the sidecar's handler applies it."""
        describe = api_key == ApiKey.DESCRIBE_CONFIGS

        async def handler(ctx: RequestContext, header: Any, req: Any) -> Any:
            resources = list(req.resources)
            answers: dict[int, Any] = {}
            theirs: list[int] = []
            for i, r in enumerate(resources):
                if r.resource_type != ConfigResourceType.GROUP:
                    continue
                ops = {c.name: c for c in getattr(r, "configs", ())}
                if COORDINATOR in ops:
                    refusal = await self._coordinator_change(r.resource_name, ops, bool(req.validate_only))
                    if refusal is not None or req.validate_only:
                        code, message = refusal or (ErrorCode.none, None)
                        answers[i] = {"error_code": code, "error_message": message, "resource_type": r.resource_type,
                                      "resource_name": r.resource_name}
                elif self.native(r.resource_name):
                    theirs.append(i)
            ours = [i for i in range(len(resources)) if i not in answers and i not in theirs]
            if ours:
                mine = await local(ctx, header, dataclasses.replace(req, resources=tuple(resources[i] for i in ours)))
                answers |= dict(zip(ours, mine[out_list]))
                await self._marked(resources, ours, mine[out_list], describe)
            if theirs:
                version = self.pool.version(api_key, ctx.api_version)
                request = make(api_key, version, **{**_entity_dict_shallow(req),
                                                    "resources": tuple(resources[i] for i in theirs)})
                try:
                    answer = await self.pool.call(None, request)
                except BackendUnavailable as exc:
                    raise KafkaError(ErrorCode.request_timed_out, str(exc)) from exc
                for i, result in zip(theirs, getattr(answer, out_list)):
                    item = _entity_dict(result)
                    if describe and (resources[i].configuration_keys is None
                                     or COORDINATOR in resources[i].configuration_keys):
                        item["configs"] = tuple(item["configs"]) + (_coordinator_entry(),)
                    answers[i] = item
            return {"throttle_time": 0, out_list: tuple(answers[i] for i in range(len(resources)))}
        return handler

    async def _coordinator_change(self, group: str, ops: Mapping[str, Any],
                                  validate_only: bool) -> tuple[ErrorCode, str] | None:
        """Why ``share.coordinator`` cannot change now (None: it can)."""
        if len(ops) > 1:
            return ErrorCode.invalid_request, f"{COORDINATOR} is changed alone, not with other configs"
        op = ops[COORDINATOR]
        if not (op.config_operation == AlterConfigOp.SET and op.value == BACKEND):
            return None  # back to the sidecar (migrate-from-native): checked by the tool on both sides
        coordinates = getattr(self.admin.groups, "coordinates", None)
        if coordinates is not None and coordinates(group) != ErrorCode.none:
            return ErrorCode.invalid_config, (f"{COORDINATOR}={BACKEND}: this sidecar does not coordinate share group "
                                              f"{group}; send it to the group's coordinator (FindCoordinator)")
        group_state = self.admin.coordinator.groups.get(group)
        if group_state is not None and group_state.members:
            return ErrorCode.invalid_config, (f"{COORDINATOR}={BACKEND}: share group {group} has "
                                              f"{len(group_state.members)} member(s); stop its consumers first")
        missing = await self._backend_share_groups_missing()
        if missing is not None:
            return ErrorCode.invalid_config, f"{COORDINATOR}={BACKEND}: the backend cannot serve share groups: {missing}"
        return None

    async def _backend_share_groups_missing(self) -> str | None:
        """Asked afresh: the backend may have been upgraded since this sidecar started."""
        try:
            answer = await self.pool.call(None, make(ApiKey.API_VERSIONS, 4, client_software_name="kshare",
                                                     client_software_version="1"))
        except BackendUnavailable as exc:
            return f"it did not answer ApiVersions ({exc})"
        keys = {int(k.api_key) for k in answer.api_keys}
        missing = [ApiKey(k).name for k in _NEEDED if k not in keys]
        if missing:
            return f"its ApiVersions lacks {', '.join(missing)} (Kafka 4.2 or later)"
        finalized = {str(f.name): int(f.max_version_level) for f in answer.finalized_features}
        if finalized.get("share.version", 0) < 1:
            return "its share.version feature is not finalized (kafka-features.sh upgrade --feature share.version=2)"
        return None

    async def _marked(self, resources: list[Any], done: list[int], results: Any, describe: bool) -> None:
        """A group just marked for the backend: kshare's copy of its state is dropped (the backend's
        is the group's now; a consumer is never served from the old one). Best effort: a copy left
        behind is never served, and ``migrate-from-native`` replaces it."""
        if describe:
            return
        for i, result in zip(done, results):
            r = resources[i]
            ops = {c.name: c for c in getattr(r, "configs", ())}
            op = ops.get(COORDINATOR)
            if op is None or op.value != BACKEND or result.get("error_code", ErrorCode.none) != ErrorCode.none:
                continue
            try:
                topics = [t.name for t in await self.admin.describe_offsets(r.resource_name, None)]
                if topics:
                    await self.admin.delete_offsets(r.resource_name, topics)
                log.info("share group %s is served by the backend now; kshare's state of %d topic(s) dropped",
                         r.resource_name, len(topics))
            except Exception as exc:  # noqa: BLE001 - the mark is set; a copy left behind is never served
                log.warning("share group %s is served by the backend now; dropping kshare's copy failed: %r",
                            r.resource_name, exc)


def _coordinator_entry() -> dict[str, Any]:
    return {"name": COORDINATOR, "value": BACKEND, "read_only": False, "config_source": ConfigSource.GROUP_CONFIG,
            "is_sensitive": False, "synonyms": (), "config_type": ConfigType.STRING, "documentation": None}


def _describe_error(group: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "group_id": group, "group_state": "Unknown",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": ()}


def _offsets_error(group: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"group_id": group, "topics": (), "error_code": code, "error_message": message}


def install(registry: ApiRegistry, native: NativeGroups, forwarder: Forwarder, pool: BackendPool, admin: Any) -> Passage:
    """Divert the marked groups' single-group share requests; split the batched ones and GROUP configs."""
    passage = Passage(native, forwarder, pool, admin, SplitSessions(pool, forwarder.upstream, forwarder.node))
    for api_key in SINGLE_GROUP:
        if api_key in registry:
            registry.set_divert(api_key, passage.divert(api_key))

    def wrap(api_key: int, make_handler: Callable[[LocalHandler], LocalHandler]) -> None:
        entry = registry.get(api_key)
        if entry is not None:
            registry.register(api_key, entry.min_version, entry.max_version, make_handler(entry.handler),
                              error_response=entry.error_response, replace=True)

    wrap(ApiKey.SHARE_GROUP_DESCRIBE, lambda h: passage.split_groups(
        h, ApiKey.SHARE_GROUP_DESCRIBE, "group_ids", str, _describe_error))
    wrap(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, lambda h: passage.split_groups(
        h, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, "groups", lambda g: g.group_id, _offsets_error))
    wrap(ApiKey.DESCRIBE_CONFIGS, lambda h: passage.configs(h, ApiKey.DESCRIBE_CONFIGS, "results"))
    wrap(ApiKey.INCREMENTAL_ALTER_CONFIGS, lambda h: passage.configs(h, ApiKey.INCREMENTAL_ALTER_CONFIGS, "responses"))
    return passage


def refuse_marking(registry: ApiRegistry) -> None:
    """Without pass-through (``passthrough.enable = false``) nothing can be passed to the backend:
    ``share.coordinator=backend`` is refused, naming the setting."""
    entry = registry.get(ApiKey.INCREMENTAL_ALTER_CONFIGS)
    if entry is None:
        return
    local = entry.handler

    async def handler(ctx: RequestContext, header: Any, req: Any) -> Any:
        refused = {i for i, r in enumerate(req.resources) if r.resource_type == ConfigResourceType.GROUP and any(
            c.name == COORDINATOR and c.value == BACKEND for c in getattr(r, "configs", ()))}
        if not refused:
            return await local(ctx, header, req)
        rest = [r for i, r in enumerate(req.resources) if i not in refused]
        mine = await local(ctx, header, dataclasses.replace(req, resources=tuple(rest))) if rest else {"responses": ()}
        answers = iter(mine["responses"])
        return {"throttle_time": 0, "responses": tuple(
            {"error_code": ErrorCode.invalid_config, "error_message": f"{COORDINATOR}={BACKEND} needs the pass-through "
             "(passthrough.enable = true)", "resource_type": r.resource_type, "resource_name": r.resource_name}
            if i in refused else next(answers) for i, r in enumerate(req.resources))}

    registry.register(entry.api_key, entry.min_version, entry.max_version, handler,
                      error_response=entry.error_response, replace=True)


__all__ = ["BACKEND", "COORDINATOR", "NativeGroups", "Passage", "install", "refuse_marking"]
