"""passthrough/native.py: which requests of a group the backend serves are passed through, and when
kshare's ``share.coordinator`` may say so. Real Kafka: tests/integration/test_native_passthrough.py
and tests/e2e/test_migration.py."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kio.schema.api_versions.v4 import response as versions
from kio.schema.describe_configs.v4 import request as dreq
from kio.schema.describe_configs.v4 import response as dresp
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as areq
from kio.schema.incremental_alter_configs.v1 import response as aresp
from kio.schema.share_fetch.v1.request import ShareFetchRequest
from kio.schema.share_group_describe.v1 import request as sgd
from kio.schema.share_group_describe.v1 import response as sgd_resp

from kshare_sidecar.api import NodeIdentity, RequestContext
from kshare_sidecar.passthrough.native import NativeGroups, Passage
from kshare_sidecar.protocol.constants import AlterConfigOp, ApiKey, ConfigResourceType, ConfigSource

NODE = NodeIdentity(node_id=7, host="sidecar.test", port=19092, cluster_id="kshare-test", controller_id=7)
MARKED = {"moved": {"share.coordinator": "backend"}, "kept": {"share.auto.offset.reset": "earliest"}}


@dataclass
class Pool:
    brokers: dict[int, tuple[str, int]] = field(default_factory=lambda: {1: ("backend", 9092)})
    share_apis: bool = True
    calls: list[Any] = field(default_factory=list)

    @property
    def single_node(self) -> int | None:
        return next(iter(self.brokers)) if len(self.brokers) == 1 else None

    def version(self, api_key: int, highest: int) -> int:
        return highest

    async def coordinator(self, key_type: int, key: str) -> int:
        return 1

    def forget_coordinator(self, key_type: int, key: str) -> None:
        pass

    async def call(self, node: Any, request: Any) -> Any:
        self.calls.append(request)
        key = type(request).__api_key__
        if key == ApiKey.API_VERSIONS:
            keys = (76, 77, 78, 79, 90, 91) if self.share_apis else (0, 1)
            return versions.ApiVersionsResponse(
                error_code=ErrorCode.none, throttle_time=datetime.timedelta(0),
                api_keys=tuple(versions.ApiVersion(api_key=k, min_version=0, max_version=1) for k in keys),
                finalized_features=(versions.FinalizedFeatureKey(name="share.version", max_version_level=2,
                                                                 min_version_level=2),))
        if key == ApiKey.DESCRIBE_CONFIGS:
            return dresp.DescribeConfigsResponse(throttle_time=datetime.timedelta(0), results=tuple(
                dresp.DescribeConfigsResult(error_code=ErrorCode.none, error_message=None, resource_type=r.resource_type,
                                            resource_name=r.resource_name, configs=(dresp.DescribeConfigsResourceResult(
                                                name="share.auto.offset.reset", value="earliest", read_only=False,
                                                config_source=ConfigSource.GROUP_CONFIG, is_sensitive=False,
                                                synonyms=(), config_type=2, documentation=None),))
                for r in request.resources))
        if key == ApiKey.SHARE_GROUP_DESCRIBE:
            return sgd_resp.ShareGroupDescribeResponse(throttle_time=datetime.timedelta(0), groups=(
                sgd_resp.DescribedGroup(error_code=ErrorCode.none, error_message=None, group_id=request.group_ids[0],
                                        group_state="Empty", group_epoch=3, assignment_epoch=3, assignor_name="simple",
                                        members=(), authorized_operations=0),))
        return aresp.IncrementalAlterConfigsResponse(throttle_time=datetime.timedelta(0), responses=tuple(
            aresp.AlterConfigsResourceResponse(error_code=ErrorCode.none, error_message=None,
                                               resource_type=r.resource_type, resource_name=r.resource_name)
            for r in request.resources))


class Group:
    def __init__(self, members: int = 0) -> None:
        self.members = {f"m{i}": object() for i in range(members)}


class Admin:
    def __init__(self, **groups: Group) -> None:
        self.coordinator = type("C", (), {"groups": groups})()
        self.groups = object()
        self.dropped: list[tuple[str, list[str]]] = []

    async def describe_offsets(self, group: str, topics: Any) -> list[Any]:
        return [type("T", (), {"name": "orders"})()]

    async def delete_offsets(self, group: str, topics: list[str]) -> None:
        self.dropped.append((group, topics))


def _passage(pool: Pool | None = None, admin: Admin | None = None) -> tuple[Passage, list[bytes]]:
    forwarded: list[bytes] = []

    async def forwarder(conn: Any, frame: bytes, release: Any) -> bytes:
        forwarded.append(frame)
        return b"forwarded"

    return Passage(NativeGroups(MARKED.get), forwarder, pool or Pool(), admin or Admin()), forwarded


def _ctx(api_key: int, version: int) -> RequestContext:
    return RequestContext(conn_id=1, client_id="c", client_host="h", client_port=1, node=NODE, api_key=api_key,
                          api_version=version, correlation_id=1)


def _fetch(group: str) -> ShareFetchRequest:
    return ShareFetchRequest(group_id=group, member_id="m", share_session_epoch=0, max_wait=datetime.timedelta(0),
                             min_bytes=1, max_records=10, batch_size=10, topics=(), forgotten_topics_data=())


def test_only_marked_groups_are_diverted():
    passage, _ = _passage()
    assert passage.divert(ApiKey.SHARE_FETCH)(_fetch("moved")) is passage.forwarder
    assert passage.divert(ApiKey.SHARE_FETCH)(_fetch("kept")) is None
    assert passage.divert(ApiKey.SHARE_FETCH)(_fetch("unknown")) is None
    assert NativeGroups(MARKED.get)(None) is False


def test_share_fetches_of_a_marked_group_are_split_on_a_backend_of_several_brokers():
    passage, _ = _passage(Pool(brokers={1: ("a", 1), 2: ("b", 1)}))
    passage.split = object()  # type: ignore[assignment]  # passthrough/sessions.py, tests/unit/passthrough/test_split_sessions.py
    assert passage.divert(ApiKey.SHARE_FETCH)(_fetch("moved")) is passage.split
    assert passage.divert(ApiKey.SHARE_GROUP_HEARTBEAT)(_fetch("moved")) is passage.forwarder  # to the coordinator


def _alter(group: str, *ops: tuple[str, int, str | None], validate_only: bool = False) -> Any:
    return areq.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=(areq.AlterConfigsResource(
        resource_type=ConfigResourceType.GROUP, resource_name=group,
        configs=tuple(areq.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops)),))


async def _alter_answer(passage: Passage, request: Any) -> tuple[dict[str, Any], list[Any]]:
    local_seen: list[Any] = []

    async def local(ctx: Any, header: Any, req: Any) -> dict[str, Any]:
        local_seen.append(req)
        return {"throttle_time": 0, "responses": tuple(
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": r.resource_type,
             "resource_name": r.resource_name} for r in req.resources)}

    handler = passage.configs(local, ApiKey.INCREMENTAL_ALTER_CONFIGS, "responses")
    answer = await handler(_ctx(44, 1), None, request)
    return answer["responses"][0], local_seen


SET_BACKEND = ("share.coordinator", AlterConfigOp.SET, "backend")


async def test_marking_is_refused_with_the_reason():
    cases = [
        (_passage(admin=Admin(g=Group(members=2)))[0], "has 2 member(s)"),
        (_passage(Pool(share_apis=False))[0], "cannot serve share groups"),
    ]
    for passage, why in cases:
        result, local = await _alter_answer(passage, _alter("g", SET_BACKEND))
        assert result["error_code"] == ErrorCode.invalid_config and why in result["error_message"]
        assert local == []
    passage, _ = _passage()
    result, local = await _alter_answer(passage, _alter("g", SET_BACKEND, ("share.auto.offset.reset", 0, "latest")))
    assert result["error_code"] == ErrorCode.invalid_request and "alone" in result["error_message"]


async def test_marking_applies_the_change_and_drops_kshares_copy():
    admin = Admin(g=Group())
    passage, _ = _passage(admin=admin)
    result, local = await _alter_answer(passage, _alter("g", SET_BACKEND, validate_only=True))
    assert result["error_code"] == ErrorCode.none and local == [] and admin.dropped == []
    result, local = await _alter_answer(passage, _alter("g", SET_BACKEND))
    assert result["error_code"] == ErrorCode.none and len(local) == 1
    assert admin.dropped == [("g", ["orders"])]


async def test_a_marked_groups_configs_are_the_backends():
    pool = Pool()
    passage, _ = _passage(pool)
    result, local = await _alter_answer(passage, _alter("moved", ("share.auto.offset.reset", 0, "earliest")))
    assert result["error_code"] == ErrorCode.none and local == []
    assert [r.resource_name for r in pool.calls[-1].resources] == ["moved"]
    result, local = await _alter_answer(passage, _alter("moved", ("share.coordinator", AlterConfigOp.DELETE, None)))
    assert len(local) == 1  # moving back is kshare's own change

    async def local_describe(ctx: Any, header: Any, req: Any) -> dict[str, Any]:
        return {"throttle_time": 0, "results": tuple({"error_code": ErrorCode.none, "error_message": None,
                                                      "resource_type": r.resource_type, "resource_name": r.resource_name,
                                                      "configs": ()} for r in req.resources)}

    describe = passage.configs(local_describe, ApiKey.DESCRIBE_CONFIGS, "results")
    answer = await describe(_ctx(32, 4), None, dreq.DescribeConfigsRequest(resources=(
        dreq.DescribeConfigsResource(resource_type=ConfigResourceType.GROUP, resource_name="moved",
                                     configuration_keys=None),
        dreq.DescribeConfigsResource(resource_type=ConfigResourceType.GROUP, resource_name="kept",
                                     configuration_keys=None)), include_synonyms=False, include_documentation=False))
    moved, kept = answer["results"]
    assert [c["name"] for c in moved["configs"]] == ["share.auto.offset.reset", "share.coordinator"]
    assert kept["configs"] == ()


async def test_a_batched_describe_asks_the_backend_for_marked_groups_only():
    pool = Pool()
    passage, _ = _passage(pool)

    async def local(ctx: Any, header: Any, req: Any) -> dict[str, Any]:
        return {"throttle_time": 0, "groups": tuple({"group_id": g, "group_state": "Stable"} for g in req.group_ids)}

    handler = passage.split_groups(local, ApiKey.SHARE_GROUP_DESCRIBE, "group_ids", str, lambda g, c, m: {})
    answer = await handler(_ctx(77, 1), None, sgd.ShareGroupDescribeRequest(
        group_ids=("kept", "moved", "other"), include_authorized_operations=False))
    states = [g["group_state"] if isinstance(g, dict) else g.group_state for g in answer["groups"]]
    assert states == ["Stable", "Empty", "Stable"]
    assert [r.group_ids for r in pool.calls] == [("moved",)]


async def test_list_groups_shows_the_backends_share_groups_only_when_moved():
    from kio.schema.list_groups.v5 import request as lreq
    from kio.schema.list_groups.v5 import response as lresp

    from kshare_sidecar.passthrough.mixed import list_groups

    class ListPool(Pool):
        versions: ClassVar = {16: (0, 5), 76: (1, 1)}

        async def call(self, node: Any, request: Any) -> Any:
            self.calls.append(request)
            return lresp.ListGroupsResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, groups=tuple(
                lresp.ListedGroup(group_id=g, protocol_type=p, group_state="Empty", group_type=t)
                for g, p, t in (("moved", "share", "share"), ("elsewhere", "share", "share"),
                                ("app", "consumer", "consumer"))))

    async def local(ctx: Any, header: Any, req: Any) -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": (
            {"group_id": "kept", "protocol_type": "share", "group_state": "Stable", "group_type": "share"},
            {"group_id": "moved", "protocol_type": "share", "group_state": "Empty", "group_type": "share"})}

    pool = ListPool()
    handler = list_groups(local, pool, NativeGroups(MARKED.get))  # type: ignore[arg-type]
    for types, expected, sent in ((("share",), ["kept", "moved"], ("share",)), ((), ["kept", "moved", "app"], ()),
                                  (("consumer",), ["kept", "app"], ("consumer",))):
        answer = await handler(_ctx(16, 5), None, lreq.ListGroupsRequest(states_filter=(), types_filter=types))
        assert [g["group_id"] for g in answer["groups"]] == expected
        assert pool.calls[-1].types_filter == sent


async def test_without_pass_through_marking_is_refused():
    from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest

    from kshare_sidecar.api.registry import ApiRegistry
    from kshare_sidecar.passthrough.native import refuse_marking

    async def local(ctx: Any, header: Any, req: Any) -> dict[str, Any]:
        return {"throttle_time": 0, "responses": tuple(
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": r.resource_type,
             "resource_name": r.resource_name} for r in req.resources)}

    registry = ApiRegistry()
    registry.register(44, 0, 1, local)
    refuse_marking(registry)
    request = _alter("g", SET_BACKEND)
    request = IncrementalAlterConfigsRequest(validate_only=False, resources=request.resources + _alter(
        "h", ("share.auto.offset.reset", 0, "earliest")).resources)
    answer = await registry.get(44).handler(_ctx(44, 1), None, request)
    (g, h) = answer["responses"]
    assert g["error_code"] == ErrorCode.invalid_config and "passthrough.enable" in g["error_message"]
    assert h["error_code"] == ErrorCode.none
