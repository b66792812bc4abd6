"""The ``share.assignor`` group config (kshare's own): validation, describe, persistence
through the memory persister and a restart, and the recomputed assignment after a change."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.describe_configs.v4 import request as dc
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as iac

from kshare_sidecar.api import configs as configs_api
from kshare_sidecar.assignors import SimpleAssignor, UniformAssignor
from kshare_sidecar.config import load_config
from kshare_sidecar.group.assign import assign_with
from kshare_sidecar.group.coordinator import ShareGroupCoordinator
from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.persist.memory import MemoryLog, MemoryPersister
from kshare_sidecar import app
from kshare_sidecar.protocol.constants import AlterConfigOp, ConfigSource, ConfigType
from kshare_sidecar.group.admin import AdminError, AdminService
from kshare_sidecar.group.service import GroupService
from kshare_sidecar.share.cache import SharePartitionCache

T = TopicInfo("t", uuid.UUID(int=7), 2)


class FakeBackend:
    async def describe_topics(self, names=None, stale_ok=False):
        return {n: T for n in (names or ["t"]) if n == "t"}

    def topic_by_id(self, topic_id):
        return T if topic_id == T.topic_id else None


async def make_admin(log: MemoryLog, **settings) -> AdminService:
    """A sidecar's admin side on ``log`` (pass the same log again to simulate a restart)."""
    cfg = load_config(env={}, overrides={"bootstrap.servers": "x:1", "persister": "memory", **settings})
    persister = MemoryPersister(log=log)
    await persister.start()
    fns = {"simple": assign_with(SimpleAssignor()), "uniform": assign_with(UniformAssignor())}
    coordinator = ShareGroupCoordinator(assign=fns[cfg["assignor"]], assignors=fns, default_assignor=cfg["assignor"],
                                        clock=lambda: 0)
    backend = FakeBackend()
    partitions = SharePartitionCache(persister=persister, backend=backend, clock=lambda: 0,
                                       group_config=lambda g: cfg.group_config(
                                           coordinator.groups[g].configs if g in coordinator.groups else None))
    groups = GroupService(coordinator=coordinator, partitions=partitions, backend=backend, persister=persister)
    groups.restore()
    return AdminService(config=cfg, coordinator=coordinator, groups=groups, partitions=partitions,
                        persister=persister, backend=backend)


@pytest.fixture
async def admin():
    a = await make_admin(MemoryLog())
    yield a
    await a.persister.close()


async def join(admin: AdminService, group: str, member: str, epoch: int = 0):
    result = await admin.groups.heartbeat(group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                                          subscribed_topic_names=["t"] if epoch == 0 else None,
                                          client_id="c", client_host="h")
    assert result.error == ErrorCode.none, result
    return result


def shape(admin: AdminService, group: str) -> tuple[list[int], list[int]]:
    """Partitions per member and members per partition, sorted."""
    target = admin.coordinator.groups[group].target
    return (sorted(len(a.get(T.topic_id, ())) for a in target.values()),
            sorted(sum(p in a.get(T.topic_id, ()) for a in target.values()) for p in range(T.partitions)))


def test_unknown_assignor_is_invalid_config_naming_key_and_allowed_values(admin):
    assert admin.check_config_ops([("share.assignor", AlterConfigOp.SET, "uniform")]) == {"share.assignor": "uniform"}
    assert admin.check_config_ops([("share.assignor", AlterConfigOp.DELETE, None)]) == {"share.assignor": None}
    for bad in ("sticky", "", "Uniform"):
        with pytest.raises(AdminError) as err:
            admin.check_config_ops([("share.assignor", AlterConfigOp.SET, bad)])
        assert err.value.code == ErrorCode.invalid_config
        assert "share.assignor" in err.value.message and "allowed values are simple, uniform" in err.value.message
        assert "\n" not in err.value.message


async def test_alter_handler_rejects_unknown_assignor_and_validate_only_stores_nothing(admin):
    handler = configs_api.make_incremental_alter_configs(admin)

    def request(value, validate_only=False):
        return iac.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=(
            iac.AlterConfigsResource(resource_type=32, resource_name="g", configs=(
                iac.AlterableConfig(name="share.assignor", config_operation=0, value=value),)),))

    (bad,) = (await handler(None, None, request("range")))["responses"]
    assert bad["error_code"] == ErrorCode.invalid_config and "share.assignor" in bad["error_message"]
    (ok,) = (await handler(None, None, request("uniform", validate_only=True)))["responses"]
    assert ok["error_code"] == ErrorCode.none
    assert "share.assignor" not in admin.coordinator.ensure_group("g").configs


async def test_describe_hides_an_unset_assignor_from_describe_all_only(admin):
    names = [v.name for v in admin.describe_configs("g")]
    assert "share.assignor" not in names and len(names) == 21  # exactly Kafka 4.4.0's keys
    (asked,) = admin.describe_configs("g", ["share.assignor"])
    assert (asked.value, asked.source, asked.config_type) == ("simple", ConfigSource.DEFAULT_CONFIG, ConfigType.STRING)
    await admin.alter_configs("g", {"share.assignor": "uniform"})
    values = {v.name: v for v in admin.describe_configs("g")}
    assert (values["share.assignor"].value, values["share.assignor"].source) == ("uniform", ConfigSource.GROUP_CONFIG)
    handler = configs_api.make_describe_configs(admin)
    req = dc.DescribeConfigsRequest(include_synonyms=True, include_documentation=True, resources=(
        dc.DescribeConfigsResource(resource_type=32, resource_name="g", configuration_keys=("share.assignor",)),))
    (entry,) = (await handler(None, None, req))["results"][0]["configs"]
    # the sidecar setting behind it, not set: DEFAULT_CONFIG, as Kafka names a broker synonym left at its default
    assert [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]] == [
        ("share.assignor", "uniform", ConfigSource.GROUP_CONFIG), ("assignor", "simple", ConfigSource.DEFAULT_CONFIG)]
    assert "assignor" in entry["documentation"]


async def test_operator_default_is_static_broker_config():
    a = await make_admin(MemoryLog(), assignor="uniform")
    try:
        (asked,) = a.describe_configs("g", ["share.assignor"])
        assert (asked.value, asked.source) == ("uniform", ConfigSource.STATIC_BROKER_CONFIG)
        assert "share.assignor" not in [v.name for v in a.describe_configs("g")]
    finally:
        await a.persister.close()


async def test_change_recomputes_the_assignment_and_describe_reports_it(admin):
    for m in ("a", "b", "c"):
        await join(admin, "g", m)
    assert shape(admin, "g") == ([1, 1, 2], [2, 2]) and admin.describe_group("g").assignor == "simple"
    before = admin.coordinator.groups["g"].group_epoch
    await admin.alter_configs("g", {"share.assignor": "uniform"})
    assert admin.describe_group("g").assignor == "simple"  # the members still hold simple's assignment
    result = await join(admin, "g", "a", admin.coordinator.groups["g"].members["a"].member_epoch)
    assert result.member_epoch == before + 1 == admin.coordinator.groups["g"].assignment_epoch
    assert shape(admin, "g") == ([1, 1, 1], [1, 2])
    described = admin.describe_group("g")
    assert described.assignor == "uniform" and described.group_epoch == before + 1
    assert admin.persister.get_group("g").group_epoch == before + 1  # the bump is saved like any other


async def test_choice_survives_a_restart_through_the_memory_persister():
    log = MemoryLog()
    first = await make_admin(log)
    await first.alter_configs("g", {"share.assignor": "uniform", "share.delivery.count.limit": 3})
    assert first.persister.get_group("g").configs == {"share.assignor": "uniform", "share.delivery.count.limit": "3"}
    await first.persister.close()
    second = await make_admin(log)  # replays the log, as a restarted sidecar does
    try:
        group = second.coordinator.groups["g"]
        assert group.configs["share.assignor"] == "uniform"
        assert {v.name: v.value for v in second.describe_configs("g")}["share.assignor"] == "uniform"
        for m in ("a", "b", "c"):
            await join(second, "g", m)
        assert shape(second, "g") == ([1, 1, 1], [1, 2]) and second.describe_group("g").assignor == "uniform"
        await second.alter_configs("g", {"share.assignor": None})  # DELETE: back to the sidecar default
        assert "share.assignor" not in second.persister.get_group("g").configs
    finally:
        await second.persister.close()


def test_sidecar_builds_every_registered_assignor_and_skips_a_broken_one(monkeypatch, caplog):
    def broken():
        raise RuntimeError("no licence")

    factories = {"simple": SimpleAssignor, "uniform": UniformAssignor, "broken": broken}
    monkeypatch.setattr(app.plugins, "get_assignors", lambda: dict(factories))
    monkeypatch.setattr(app.plugins, "get_assignor", lambda name: factories[name]())
    built = app._load_assignors("uniform")
    assert set(built) == {"simple", "uniform"}
    assert "broken" in caplog.text and "no licence" in caplog.text
