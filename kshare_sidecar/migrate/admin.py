"""The admin requests a migration sends, over raw connections with the backend's security.

One small asyncio client speaks to both ends of a move: a Kafka 4.2+ cluster with native share
groups, and a kshare sidecar (it answers the same share-group admin APIs). Why not the CLI's
blocking client (``cli/kclient.py``): a migration reaches the backend the way the sidecar does —
TLS, SASL PLAIN/SCRAM/OAUTHBEARER from the ``backend.*`` settings — which :class:`BrokerConn`
with a :class:`BackendSecurity` already does, and the rest of the tool (the state-topic replay)
is asyncio anyway. Requests are kio's at fixed versions every share-group server speaks (as
kclient's). Group requests go to the coordinator found with FindCoordinator and are asked again
while it is loading or moving (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
NOT_COORDINATOR: a fresh 4.x cluster answers the first while it creates ``__consumer_offsets``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from kio.schema.alter_share_group_offsets.v0 import request as alter_offsets_req
from kio.schema.api_versions.v3 import request as versions3_req
from kio.schema.api_versions.v4 import request as versions4_req
from kio.schema.delete_groups.v2 import request as delete_groups_req
from kio.schema.delete_share_group_offsets.v0 import request as delete_offsets_req
from kio.schema.describe_configs.v4 import request as describe_configs_req
from kio.schema.describe_share_group_offsets.v1 import request as describe_offsets_req
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as find_req
from kio.schema.incremental_alter_configs.v1 import request as alter_configs_req
from kio.schema.list_offsets.v7 import request as list_offsets_req
from kio.schema.metadata.v12 import request as metadata_req
from kio.schema.share_group_describe.v1 import request as describe_group_req
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from ..backend.brokerconn import BrokerConn, BrokerConnError
from ..backend.security import BackendSecurity
from ..protocol.address import parse_bootstrap
from ..protocol.constants import ApiKey, ConfigResourceType, ConfigSource, CoordinatorType, OffsetSpec
from ..protocol.requests import decode_response_to, request_payload

T = TypeVar("T")

#: The share-group APIs a migration needs at either end, by the names a refusal gives them.
SHARE_APIS = {ApiKey.SHARE_GROUP_HEARTBEAT: "ShareGroupHeartbeat", ApiKey.SHARE_FETCH: "ShareFetch",
              ApiKey.SHARE_GROUP_DESCRIBE: "ShareGroupDescribe",
              ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: "DescribeShareGroupOffsets",
              ApiKey.ALTER_SHARE_GROUP_OFFSETS: "AlterShareGroupOffsets"}
_RETRY = {ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator}


class AdminError(Exception):
    """The cluster could not be reached, or refused what it was asked (the message says which)."""


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """ShareGroupDescribe's answer for one group; ``exists`` False for GROUP_ID_NOT_FOUND."""

    exists: bool
    state: str = ""
    members: tuple[str, ...] = ()  # "client id (member id) on host"


@dataclass(frozen=True, slots=True)
class Offset:
    """One share-partition of a DescribeShareGroupOffsets v1 answer (start offset -1: none)."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    lag: int
    error: ErrorCode = ErrorCode.none


class ClusterAdmin:
    """An admin client for one cluster (a Kafka cluster or a kshare sidecar); ``async with``."""

    def __init__(self, bootstrap: str, *, security: BackendSecurity | None = None, timeout_s: float = 30.0,
                 client_id: str = "kshare-migrate") -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._boot = parse_bootstrap(bootstrap)
        self._conns: dict[tuple[str, int], BrokerConn] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._cluster_id: str | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()

    # -- plumbing ---------------------------------------------------------------------------------
    async def _call(self, address: tuple[str, int], request: Any) -> Any:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._conns[address] = BrokerConn(*address, security=self.security,
                                                     connect_timeout_s=self.timeout_s)
        try:
            payload = await conn.request(request_payload(request, 0, self.client_id), timeout_s=self.timeout_s)
        except (BrokerConnError, TimeoutError) as exc:
            self._conns.pop(address, None)
            await conn.close()
            raise AdminError(f"{address[0]}:{address[1]}: {exc or type(exc).__name__}") from None
        return decode_response_to(request, payload)

    async def _any(self, request: Any) -> Any:
        errors = []
        for address in [*self._boot, *(a for a in self._nodes.values() if a not in self._boot)]:
            try:
                return await self._call(address, request)
            except AdminError as exc:
                errors.append(str(exc))
        raise AdminError(f"no broker of {self.bootstrap} answered: {'; '.join(errors)}")

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[tuple[ErrorCode, T]]]) -> T:
        """``attempt()`` → (error code, result) again while the coordinator is loading or moving."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            code, result = await attempt()
            if code not in _RETRY:
                return result
            if time.monotonic() > deadline:
                raise AdminError(f"{what}: {code.name.upper()} for {self.timeout_s:.0f} s")
            await asyncio.sleep(0.5)

    async def _coordinator(self, group: str) -> tuple[ErrorCode, tuple[str, int] | None]:
        resp = await self._any(find_req.FindCoordinatorRequest(key=group, key_type=i8(CoordinatorType.GROUP)))
        if resp.error_code != ErrorCode.none:
            return resp.error_code, None
        return ErrorCode.none, (resp.host, resp.port)

    async def _group_call(self, group: str, request: Any, code_of: Callable[[Any], ErrorCode]) -> Any:
        async def attempt() -> tuple[ErrorCode, Any]:
            code, address = await self._coordinator(group)
            if address is None:
                if code in _RETRY:
                    return code, None
                raise AdminError(f"no coordinator for group {group}: {code.name.upper()}")
            resp = await self._call(address, request)
            return code_of(resp), resp
        return await self._retrying(f"group {group}", attempt)

    # -- the cluster ------------------------------------------------------------------------------
    async def share_groups_missing(self) -> str | None:
        """Why this cluster cannot serve share groups (None: it can): an API missing from its
        ApiVersions, or the ``share.version`` feature not finalized at 1 or above."""
        resp = await self._any(versions3_req.ApiVersionsRequest(client_software_name="kshare-migrate",
                                                                client_software_version="1"))
        keys = {int(k.api_key): int(k.max_version) for k in resp.api_keys}
        if keys.get(ApiKey.API_VERSIONS, 0) >= 4:  # KIP-1022: v4 lists every feature
            resp = await self._any(versions4_req.ApiVersionsRequest(client_software_name="kshare-migrate",
                                                                    client_software_version="1"))
        missing = [name for key, name in SHARE_APIS.items() if key not in keys]
        if missing:
            return f"its ApiVersions lacks {', '.join(missing)} (share groups need Kafka 4.2 or later)"
        finalized = {str(f.name): int(f.max_version_level) for f in resp.finalized_features}
        if finalized.get("share.version", 0) < 1:
            return ("the share.version feature is not finalized (kafka-features.sh --bootstrap-server "
                    f"{self.bootstrap} upgrade --feature share.version=2)")
        return None

    async def topics(self, names: Iterable[str] | None = None) -> dict[str, tuple[uuid.UUID, int]]:
        """topic name -> (topic id, partition count), of ``names`` (all when None); unknown names left out."""
        req = metadata_req.MetadataRequest(
            topics=None if names is None else tuple(metadata_req.MetadataRequestTopic(topic_id=None, name=TopicName(n))
                                                    for n in names),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        resp = await self._any(req)
        self._cluster_id = resp.cluster_id
        for b in resp.brokers:
            self._nodes[int(b.node_id)] = (b.host, int(b.port))
        self._leaders = {(t.name, int(p.partition_index)): int(p.leader_id)
                         for t in resp.topics if t.error_code == ErrorCode.none for p in t.partitions}
        return {t.name: (t.topic_id, len(t.partitions)) for t in resp.topics
                if t.error_code == ErrorCode.none and t.name is not None}

    async def cluster_id(self) -> str | None:
        """The cluster id Metadata names (None: the cluster has none)."""
        await self.topics([])
        return self._cluster_id

    async def end_offsets(self, wanted: dict[str, list[int]]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the log end offset (high watermark), asked of each leader."""
        await self.topics(list(wanted))
        by_node: dict[int, dict[str, list[int]]] = {}
        for topic, parts in wanted.items():
            for p in parts:
                node = self._leaders.get((topic, p), -1)
                if node not in self._nodes:
                    raise AdminError(f"no leader for {topic}-{p}")
                by_node.setdefault(node, {}).setdefault(topic, []).append(p)
        out: dict[tuple[str, int], int] = {}
        for node, topics in by_node.items():
            req = list_offsets_req.ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(
                list_offsets_req.ListOffsetsTopic(name=TopicName(t), partitions=tuple(
                    list_offsets_req.ListOffsetsPartition(partition_index=i32(p), current_leader_epoch=i32(-1),
                                                          timestamp=i64(OffsetSpec.LATEST)) for p in ps))
                for t, ps in topics.items()))
            resp = await self._call(self._nodes[node], req)
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise AdminError(f"end offset of {t.name}-{p.partition_index}: {p.error_code.name.upper()}")
                    out[(t.name, int(p.partition_index))] = int(p.offset)
        return out

    # -- share groups -----------------------------------------------------------------------------
    async def describe_group(self, group: str) -> GroupInfo:
        req = describe_group_req.ShareGroupDescribeRequest(group_ids=(GroupId(group),),
                                                           include_authorized_operations=False)
        resp = await self._group_call(group, req, lambda r: r.groups[0].error_code)
        g = resp.groups[0]
        if g.error_code == ErrorCode.group_id_not_found:
            return GroupInfo(False)
        if g.error_code != ErrorCode.none:
            raise AdminError(f"describing share group {group}: {g.error_code.name.upper()}"
                             + (f" ({g.error_message})" if g.error_message else ""))
        return GroupInfo(True, g.group_state,
                         tuple(f"{m.client_id} ({m.member_id}) on {m.client_host}" for m in g.members))

    async def describe_offsets(self, group: str) -> list[Offset]:
        """Every share-partition the group has state for (DescribeShareGroupOffsets v1: with lag)."""
        req = describe_offsets_req.DescribeShareGroupOffsetsRequest(groups=(
            describe_offsets_req.DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(group), topics=None),))
        resp = await self._group_call(group, req, lambda r: r.groups[0].error_code)
        g = resp.groups[0]
        if g.error_code != ErrorCode.none:
            raise AdminError(f"describing the offsets of share group {group}: {g.error_code.name.upper()}")
        return [Offset(t.topic_name, t.topic_id, int(p.partition_index), int(p.start_offset), int(p.lag),
                       p.error_code) for t in g.topics for p in t.partitions]

    async def alter_offsets(self, group: str, offsets: dict[str, dict[int, int]]) -> dict[tuple[str, int], str]:
        """Set start offsets (an empty or new group); (topic, partition) -> error text, for failures."""
        req = alter_offsets_req.AlterShareGroupOffsetsRequest(group_id=GroupId(group), topics=tuple(
            alter_offsets_req.AlterShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(
                alter_offsets_req.AlterShareGroupOffsetsRequestPartition(partition_index=i32(p), start_offset=i64(o))
                for p, o in sorted(parts.items())))
            for t, parts in sorted(offsets.items())))
        resp = await self._group_call(group, req, lambda r: r.error_code)
        if resp.error_code != ErrorCode.none:
            raise AdminError(f"altering the offsets of share group {group}: {resp.error_code.name.upper()}"
                             + (f" ({resp.error_message})" if resp.error_message else ""))
        return {(t.topic_name, int(p.partition_index)): f"{p.error_code.name.upper()}"
                + (f" ({p.error_message})" if p.error_message else "")
                for t in resp.responses for p in t.partitions if p.error_code != ErrorCode.none}

    async def delete_offsets(self, group: str, topics: Iterable[str]) -> None:
        req = delete_offsets_req.DeleteShareGroupOffsetsRequest(group_id=GroupId(group), topics=tuple(
            delete_offsets_req.DeleteShareGroupOffsetsRequestTopic(topic_name=TopicName(t)) for t in topics))
        resp = await self._group_call(group, req, lambda r: r.error_code)
        errors = [f"{t.topic_name}: {t.error_code.name.upper()}" for t in resp.responses if t.error_code != ErrorCode.none]
        if resp.error_code != ErrorCode.none or errors:
            raise AdminError(f"deleting the offsets of share group {group}: "
                             f"{resp.error_code.name.upper() if resp.error_code else '; '.join(errors)}")

    async def delete_group(self, group: str) -> None:
        req = delete_groups_req.DeleteGroupsRequest(groups_names=(GroupId(group),))
        resp = await self._group_call(group, req, lambda r: r.results[0].error_code)
        code = resp.results[0].error_code
        if code != ErrorCode.none:
            raise AdminError(f"deleting share group {group}: {code.name.upper()}")

    # -- group configs ----------------------------------------------------------------------------
    async def group_configs(self, group: str) -> tuple[dict[str, str], dict[str, str]]:
        """(the group's own overrides, the effective value of every GROUP config this cluster knows)."""
        req = describe_configs_req.DescribeConfigsRequest(resources=(describe_configs_req.DescribeConfigsResource(
            resource_type=i8(ConfigResourceType.GROUP), resource_name=group, configuration_keys=None),),
            include_synonyms=False, include_documentation=False)
        res = (await self._any(req)).results[0]
        if res.error_code != ErrorCode.none:
            raise AdminError(f"describing the configs of group {group}: {res.error_code.name.upper()}"
                             + (f" ({res.error_message})" if res.error_message else ""))
        own = {c.name: c.value or "" for c in res.configs if c.config_source == ConfigSource.GROUP_CONFIG}
        return own, {c.name: c.value or "" for c in res.configs}

    async def alter_group_configs(self, group: str, ops: list[tuple[str, int, str | None]], *,
                                  validate_only: bool = False, at_coordinator: bool = False) -> str | None:
        """IncrementalAlterConfigs on the GROUP resource; the refusal's text, or None when accepted.
        ``at_coordinator``: sent to the group's coordinator — kshare's own ``share.coordinator`` is
        checked where the group's members are known (in a cluster of sidecars another sidecar
        refuses it, naming the coordinator)."""
        if not ops:
            return None
        req = alter_configs_req.IncrementalAlterConfigsRequest(resources=(alter_configs_req.AlterConfigsResource(
            resource_type=i8(ConfigResourceType.GROUP), resource_name=group, configs=tuple(
                alter_configs_req.AlterableConfig(name=n, config_operation=i8(op), value=v) for n, op, v in ops)),),
            validate_only=validate_only)
        if at_coordinator:
            res = (await self._group_call(group, req, lambda r: ErrorCode.none)).responses[0]
        else:
            res = (await self._any(req)).responses[0]
        if res.error_code == ErrorCode.none:
            return None
        return f"{res.error_code.name.upper()}" + (f": {res.error_message}" if res.error_message else "")


__all__ = ["SHARE_APIS", "AdminError", "ClusterAdmin", "GroupInfo", "Offset"]
