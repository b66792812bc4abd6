"""A small blocking Kafka admin client for the CLI, over kio.

It speaks to the sidecar (or to any Kafka 4.x broker with share groups) with fixed request
versions every share-group-capable server serves, routes group requests to the coordinator found
with FindCoordinator, and ListOffsets to partition leaders found with Metadata. One TCP
connection per node, requests one at a time. Errors surface as :class:`ClientError` (cannot
connect or protocol trouble) or are returned in the responses for callers to report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.alter_share_group_offsets.v0 import request as alter_req
from kio.schema.delete_groups.v2 import request as delete_groups_req
from kio.schema.delete_share_group_offsets.v0 import request as delete_offsets_req
from kio.schema.describe_configs.v4 import request as describe_configs_req
from kio.schema.describe_share_group_offsets.v1 import request as describe_offsets_req
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as find_req
from kio.schema.incremental_alter_configs.v1 import request as alter_configs_req
from kio.schema.list_groups.v5 import request as list_groups_req
from kio.schema.list_offsets.v7 import request as list_offsets_req
from kio.schema.metadata.v12 import request as metadata_req
from kio.schema.share_group_describe.v1 import request as describe_req
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from ..protocol.address import parse_bootstrap
from ..protocol.blocking import BlockingConnection
from ..protocol.constants import SHARE_GROUP_TYPE, ConfigResourceType, CoordinatorType, OffsetSpec

#: ListOffsets specs the CLI asks for (``kshare groups reset-offsets --to-earliest/--to-latest``).
EARLIEST, LATEST = OffsetSpec.EARLIEST, OffsetSpec.LATEST

__all__ = ["EARLIEST", "LATEST", "AdminClient", "ClientError", "Node", "parse_bootstrap"]


class ClientError(Exception):
    """The cluster could not be reached or answered something unusable."""


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int


class _Connection:
    """A :class:`BlockingConnection` whose failures are :class:`ClientError` lines for the user."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str) -> None:
        self.address = f"{host}:{port}"
        try:
            self._conn = BlockingConnection(host, port, timeout=timeout, client_id=client_id)
        except OSError as exc:
            raise ClientError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None

    def call(self, request: Any) -> Any:
        try:
            return self._conn.call(request)
        except TimeoutError:
            raise ClientError(f"{self.address} did not answer {type(request).__name__} in time") from None
        except OSError as exc:
            raise ClientError(f"{self.address}: {exc.strerror or exc} (does it serve "
                              f"{type(request).__name__} v{request.__version__}?)") from None

    def close(self) -> None:
        self._conn.close()


class AdminClient:
    """Blocking admin client; use as a context manager."""

    def __init__(self, bootstrap: str, *, timeout: float = 15.0, client_id: str = "kshare-cli") -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.timeout = timeout
        self.client_id = client_id
        self._conns: dict[tuple[str, int], _Connection] = {}
        self._nodes: dict[int, Node] = {}

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # -- plumbing -------------------------------------------------------------------------------
    def _conn(self, host: str, port: int) -> _Connection:
        conn = self._conns.get((host, port))
        if conn is None:
            conn = self._conns[(host, port)] = _Connection(host, port, self.timeout, self.client_id)
        return conn

    def _any(self, request: Any) -> Any:
        errors = []
        for host, port in self.bootstrap:
            try:
                return self._conn(host, port).call(request)
            except ClientError as exc:
                self._conns.pop((host, port), None)
                errors.append(str(exc))
        raise ClientError("; ".join(errors))

    def _coordinator(self, group_id: str) -> _Connection:
        resp = self._any(find_req.FindCoordinatorRequest(key=group_id, key_type=i8(CoordinatorType.GROUP)))
        if resp.error_code != ErrorCode.none:
            raise ClientError(f"no coordinator for group {group_id}: {resp.error_code.name}"
                              + (f" ({resp.error_message})" if resp.error_message else ""))
        return self._conn(resp.host, resp.port)

    def metadata(self, topics: list[str] | None) -> Any:
        req = metadata_req.MetadataRequest(
            topics=None if topics is None else tuple(metadata_req.MetadataRequestTopic(topic_id=None, name=TopicName(t))
                                                     for t in topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        resp = self._any(req)
        for b in resp.brokers:
            self._nodes[b.node_id] = Node(b.node_id, b.host, b.port)
        return resp

    # -- groups ---------------------------------------------------------------------------------
    def list_groups(self, states: list[str] | None = None) -> list[Any]:
        """Share groups of every node (ListGroups v5 with the types filter)."""
        meta = self.metadata([])
        groups: dict[str, Any] = {}
        req = list_groups_req.ListGroupsRequest(states_filter=tuple(states or ()), types_filter=(SHARE_GROUP_TYPE,))
        for b in meta.brokers:
            resp = self._conn(b.host, b.port).call(req)
            if resp.error_code != ErrorCode.none:
                raise ClientError(f"ListGroups failed on node {b.node_id}: {resp.error_code.name}")
            for g in resp.groups:
                groups[g.group_id] = g
        return [groups[k] for k in sorted(groups)]

    def describe_group(self, group_id: str) -> Any:
        resp = self._coordinator(group_id).call(describe_req.ShareGroupDescribeRequest(
            group_ids=(GroupId(group_id),), include_authorized_operations=False))
        return resp.groups[0]

    def describe_offsets(self, group_id: str, topics: dict[str, list[int]] | None = None) -> Any:
        req = describe_offsets_req.DescribeShareGroupOffsetsRequest(groups=(
            describe_offsets_req.DescribeShareGroupOffsetsRequestGroup(
                group_id=GroupId(group_id),
                topics=None if topics is None else tuple(
                    describe_offsets_req.DescribeShareGroupOffsetsRequestTopic(
                        topic_name=TopicName(t), partitions=tuple(i32(p) for p in ps))
                    for t, ps in topics.items())),))
        return self._coordinator(group_id).call(req).groups[0]

    def alter_offsets(self, group_id: str, offsets: dict[str, dict[int, int]]) -> Any:
        req = alter_req.AlterShareGroupOffsetsRequest(group_id=GroupId(group_id), topics=tuple(
            alter_req.AlterShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(
                alter_req.AlterShareGroupOffsetsRequestPartition(partition_index=i32(p), start_offset=i64(o))
                for p, o in sorted(parts.items())))
            for t, parts in offsets.items()))
        return self._coordinator(group_id).call(req)

    def delete_offsets(self, group_id: str, topics: list[str]) -> Any:
        req = delete_offsets_req.DeleteShareGroupOffsetsRequest(group_id=GroupId(group_id), topics=tuple(
            delete_offsets_req.DeleteShareGroupOffsetsRequestTopic(topic_name=TopicName(t)) for t in topics))
        return self._coordinator(group_id).call(req)

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        out: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            resp = self._coordinator(group_id).call(delete_groups_req.DeleteGroupsRequest(groups_names=(GroupId(group_id),)))
            for r in resp.results:
                out[r.group_id] = r.error_code
        return out

    # -- configs --------------------------------------------------------------------------------
    def describe_group_configs(self, group_id: str, keys: list[str] | None = None) -> Any:
        req = describe_configs_req.DescribeConfigsRequest(resources=(describe_configs_req.DescribeConfigsResource(
            resource_type=i8(ConfigResourceType.GROUP), resource_name=group_id,
            configuration_keys=None if not keys else tuple(keys)),), include_synonyms=False,
            include_documentation=True)
        return self._any(req).results[0]

    def alter_group_configs(self, group_id: str, ops: list[tuple[str, int, str | None]],
                            validate_only: bool = False) -> Any:
        req = alter_configs_req.IncrementalAlterConfigsRequest(resources=(alter_configs_req.AlterConfigsResource(
            resource_type=i8(ConfigResourceType.GROUP), resource_name=group_id, configs=tuple(
                alter_configs_req.AlterableConfig(name=n, config_operation=i8(op), value=v) for n, op, v in ops)),),
            validate_only=validate_only)
        return self._any(req).responses[0]

    # -- offsets of the log ---------------------------------------------------------------------
    def partitions(self, topics: list[str]) -> dict[str, list[int] | ErrorCode]:
        """topic -> its partition ids, or the error Metadata gave for it."""
        meta = self.metadata(topics)
        out: dict[str, list[int] | ErrorCode] = {}
        for t in meta.topics:
            out[t.name] = t.error_code if t.error_code != ErrorCode.none else sorted(
                p.partition_index for p in t.partitions)
        return out

    def list_offsets(self, wanted: dict[str, list[int]], spec: int) -> dict[tuple[str, int], int | ErrorCode]:
        """(topic, partition) -> offset for ``spec`` (EARLIEST, LATEST or a timestamp in ms), asked of
        each partition's leader; -1 when no record has a timestamp that recent."""
        meta = self.metadata(list(wanted))
        leaders: dict[tuple[str, int], int] = {}
        for t in meta.topics:
            for p in t.partitions:
                leaders[(t.name, p.partition_index)] = p.leader_id
        by_node: dict[int, dict[str, list[int]]] = {}
        out: dict[tuple[str, int], int | ErrorCode] = {}
        for topic, parts in wanted.items():
            for p in parts:
                node = leaders.get((topic, p), -1)
                if node < 0 or node not in self._nodes:
                    out[(topic, p)] = ErrorCode.unknown_topic_or_partition if (topic, p) not in leaders \
                        else ErrorCode.leader_not_available
                    continue
                by_node.setdefault(node, {}).setdefault(topic, []).append(p)
        for node, topics in by_node.items():
            n = self._nodes[node]
            req = list_offsets_req.ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(
                list_offsets_req.ListOffsetsTopic(name=TopicName(t), partitions=tuple(
                    list_offsets_req.ListOffsetsPartition(partition_index=i32(p), current_leader_epoch=i32(-1),
                                                       timestamp=i64(spec))
                    for p in ps)) for t, ps in topics.items()))
            resp = self._conn(n.host, n.port).call(req)
            for t in resp.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = p.error_code if p.error_code != ErrorCode.none else p.offset
        return out
