"""AdminService and the admin/config handlers, with the memory persister and a fake backend."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.describe_configs.v4 import request as dc
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.list_groups.v5 import request as lg

from kshare_sidecar.api import admin as admin_api
from kshare_sidecar.api import configs as configs_api
from kshare_sidecar.config import load_config
from kshare_sidecar.group.assign import assign_with
from kshare_sidecar.group.coordinator import ShareGroupCoordinator
from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.protocol.constants import AlterConfigOp
from kshare_sidecar.group.admin import AdminError, AdminService
from kshare_sidecar.group.service import GroupService
from kshare_sidecar.share.cache import SharePartitionCache

T = TopicInfo("t", uuid.UUID(int=7), 2)


class FakeBackend:
    def __init__(self):
        self.hw = {("t", 0): 10, ("t", 1): 4}

    async def describe_topics(self, names=None, stale_ok=False):
        return {n: T for n in (names or ["t"]) if n == "t"}

    def topic_by_id(self, topic_id):
        return T if topic_id == T.topic_id else None

    async def high_watermark(self, topic, partition):
        return self.hw[(topic, partition)]

    async def list_offsets(self, topic, partition, spec, isolation_level=0):
        return 0 if spec == "earliest" else self.hw[(topic, partition)]


@pytest.fixture
async def env():
    cfg = load_config(env={}, overrides={"bootstrap.servers": "x:1", "persister": "memory"})
    persister = MemoryPersister()
    await persister.start()
    backend = FakeBackend()
    coordinator = ShareGroupCoordinator(assign=assign_with(_Everything()), clock=lambda: 0)
    partitions = SharePartitionCache(persister=persister, backend=backend, clock=lambda: 0,
                                       group_config=lambda g: cfg.group_config(
                                           coordinator.groups[g].configs if g in coordinator.groups else None))
    groups = GroupService(coordinator=coordinator, partitions=partitions, backend=backend, persister=persister)
    admin = AdminService(config=cfg, coordinator=coordinator, groups=groups, partitions=partitions,
                         persister=persister, backend=backend)
    yield admin
    await persister.close()


class _Everything:
    name = "everything"

    def assign(self, spec, *_a, **_k):  # pragma: no cover - only joins with a member use it
        raise NotImplementedError


def _join(admin, group="g"):
    return admin.coordinator.heartbeat(group, "m1", 0, rack_id=None, subscribed_topic_names=["t"], topics={"t": T})


async def test_config_ops_validate_bounds_and_keys(env):
    admin = env
    assert admin.check_config_ops([("share.delivery.count.limit", AlterConfigOp.SET, "3")]) == {"share.delivery.count.limit": 3}
    assert admin.check_config_ops([("share.isolation.level", AlterConfigOp.DELETE, None)]) == {"share.isolation.level": None}
    for ops, key in [([("share.delivery.count.limit", AlterConfigOp.SET, "50")], "share.delivery.count.limit"),
                     ([("share.auto.offset.reset", AlterConfigOp.SET, "sometimes")], "share.auto.offset.reset"),
                     ([("share.nope", AlterConfigOp.SET, "1")], "share.nope"),
                     ([("share.isolation.level", AlterConfigOp.APPEND, "x")], "share.isolation.level")]:
        with pytest.raises(AdminError) as err:
            admin.check_config_ops(ops)
        assert err.value.code == ErrorCode.invalid_config and key in err.value.message
    with pytest.raises(AdminError):
        admin.check_group_consistency("g", {"share.heartbeat.interval.ms": 50000})


async def test_configs_persist_and_describe_sources(env):
    admin = env
    await admin.alter_configs("g", {"share.auto.offset.reset": "earliest"})
    values = {v.name: v for v in admin.describe_configs("g")}
    assert values["share.auto.offset.reset"].value == "earliest" and values["share.auto.offset.reset"].source == 8
    assert values["share.delivery.count.limit"].source == 5
    assert admin.persister.get_group("g").configs == {"share.auto.offset.reset": "earliest"}
    # a config-only group is not listed or described
    assert admin.list_groups() == []
    assert admin.describe_group("g").error == ErrorCode.group_id_not_found


async def test_describe_configs_handler_other_resource_types(env):
    handler = configs_api.make_describe_configs(env)
    req = dc.DescribeConfigsRequest(resources=(
        dc.DescribeConfigsResource(resource_type=2, resource_name="t", configuration_keys=None),
        dc.DescribeConfigsResource(resource_type=32, resource_name="g", configuration_keys=("share.isolation.level",)),
    ), include_synonyms=False, include_documentation=False)
    out = await handler(None, None, req)
    topic, group = out["results"]
    assert topic["error_code"] == ErrorCode.invalid_request and "GROUP" in topic["error_message"]
    assert [c["name"] for c in group["configs"]] == ["share.isolation.level"]


async def test_incremental_alter_handler_is_per_resource(env):
    handler = configs_api.make_incremental_alter_configs(env)
    req = iac.IncrementalAlterConfigsRequest(resources=(
        iac.AlterConfigsResource(resource_type=32, resource_name="a", configs=(
            iac.AlterableConfig(name="share.record.lock.duration.ms", config_operation=0, value="1"),)),
        iac.AlterConfigsResource(resource_type=32, resource_name="b", configs=(
            iac.AlterableConfig(name="share.record.lock.duration.ms", config_operation=0, value="20000"),)),
    ), validate_only=False)
    out = await handler(None, None, req)
    a, b = out["responses"]
    assert a["error_code"] == ErrorCode.invalid_config and "share.record.lock.duration.ms" in a["error_message"]
    assert b["error_code"] == ErrorCode.none
    assert env.coordinator.groups["b"].configs == {"share.record.lock.duration.ms": 20000}
    assert "a" not in env.coordinator.groups or not env.coordinator.groups["a"].configs


async def test_alter_offsets_rules_and_state_epoch(env):
    admin = env
    key = SharePartitionKey("g", str(T.topic_id), 0)
    await admin.persister.initialize(key, 0, 3)
    admin.coordinator.ensure_group("g").group_epoch = 1
    result = await admin.alter_offsets("g", {"t": {0: 1, 5: 0}, "missing": {0: 0}})
    errors = {(t.name, p.partition): p.error for t in result for p in t.partitions}
    assert errors == {("t", 0): ErrorCode.none, ("t", 5): ErrorCode.unknown_topic_or_partition,
                      ("missing", 0): ErrorCode.unknown_topic_or_partition}
    state = (await admin.persister.read([key]))[key]
    assert state.state_epoch == 1 and state.start_offset == 1
    offsets = await admin.describe_offsets("g", None)
    (p0,) = offsets[0].partitions
    assert (p0.partition, p0.start_offset, p0.lag) == (0, 1, 10 - 1)

    admin.coordinator.groups["g"].members["m"] = object()  # any member makes the group non-empty
    with pytest.raises(AdminError) as err:
        await admin.alter_offsets("g", {"t": {0: 0}})
    assert err.value.code == ErrorCode.non_empty_group
    with pytest.raises(AdminError) as err:
        await admin.delete_offsets("g", ["t"])
    assert err.value.code == ErrorCode.non_empty_group
    assert await admin.delete_groups(["g", "nope"]) == [("g", ErrorCode.non_empty_group),
                                                        ("nope", ErrorCode.group_id_not_found)]
    del admin.coordinator.groups["g"].members["m"]
    assert await admin.delete_groups(["g"]) == [("g", ErrorCode.none)]
    assert admin.persister.keys("g") == [] and admin.persister.get_group("g") is None


async def test_list_groups_filters_and_handler(env):
    admin = env
    await admin.persister.initialize(SharePartitionKey("a", str(T.topic_id), 0), 0, 0)
    admin.coordinator.ensure_group("a").group_epoch = 2
    admin.coordinator.ensure_group("b").group_epoch = 1
    admin.coordinator.groups["b"].members["m"] = object()
    assert [(g.group_id, g.state) for g in admin.list_groups()] == [("a", "Empty"), ("b", "Stable")]
    assert [g.group_id for g in admin.list_groups(states=["stable"])] == ["b"]
    assert admin.list_groups(types=["consumer"]) == []
    out = await admin_api.make_list_groups(admin)(None, None, lg.ListGroupsRequest(states_filter=(),
                                                                                   types_filter=("Share",)))
    assert [(g["group_id"], g["group_type"]) for g in out["groups"]] == [("a", "share"), ("b", "share")]
