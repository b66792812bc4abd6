"""The two procedures (migrate/moves.py) against in-memory stand-ins for the clusters and the state
topic: what each refuses, in which order it writes, the drain wait. The real clusters are in
tests/e2e/test_migration.py."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from kshare_sidecar.migrate.admin import GroupInfo, Offset
from kshare_sidecar.migrate.kshare import KshareGroup
from kshare_sidecar.migrate.moves import Mover, Sides
from kshare_sidecar.persist.model import DeliveryState, PartitionState, StateBatch
from kshare_sidecar.persist.records import GroupRecord, MemberRecord

TID = uuid.UUID(int=7)
DEFAULTS = {"share.auto.offset.reset": "latest", "share.record.lock.duration.ms": "30000"}


@dataclass
class FakeCluster:
    """A cluster (native Kafka or a sidecar) as the mover sees it; ``calls`` records the writes."""

    bootstrap: str = "native:9092"
    cid: str = "native"
    missing: str | None = None
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    offsets: dict[str, list[Offset]] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    calls: list[tuple] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)

    async def share_groups_missing(self) -> str | None:
        return self.missing

    async def cluster_id(self) -> str:
        return self.cid

    async def topics(self, names: Any = None) -> dict[str, tuple[uuid.UUID, int]]:
        return {"orders": (TID, 2)}

    async def describe_group(self, group: str) -> GroupInfo:
        return self.groups.get(group, GroupInfo(False))

    async def describe_offsets(self, group: str) -> list[Offset]:
        return list(self.offsets.get(group, []))

    async def end_offsets(self, wanted: dict) -> dict[tuple[str, int], int]:
        return {(t, p): self.ends[(t, p)] for t, ps in wanted.items() for p in ps}

    async def group_configs(self, group: str) -> tuple[dict[str, str], dict[str, str]]:
        own = self.configs.get(group, {})
        return own, {**DEFAULTS, **own}

    async def alter_group_configs(self, group: str, ops: list, *, validate_only: bool = False,
                                  at_coordinator: bool = False) -> str | None:
        if not ops:
            return None
        if not validate_only:
            self.calls.append(("configs", group, tuple(ops), at_coordinator))
        return self.refuse.get(ops[0][0]) if ops else None

    async def alter_offsets(self, group: str, offsets: dict) -> dict:
        self.calls.append(("offsets", group, offsets))
        return {}

    async def delete_offsets(self, group: str, topics: list) -> None:
        self.calls.append(("delete offsets", group, tuple(topics)))

    async def delete_group(self, group: str) -> None:
        self.calls.append(("delete group", group))


class FakeState:
    def __init__(self, *views: KshareGroup) -> None:
        self.views = [{v.group: v for v in views}]
        self.topic_names = {str(TID): "orders"}
        self.reads = 0

    def then(self, *views: KshareGroup) -> FakeState:
        self.views.append({v.group: v for v in views})
        return self

    async def read(self, groups: list[str], *, narrow: Any = None) -> dict[str, KshareGroup]:
        view = self.views[min(self.reads, len(self.views) - 1)]
        self.reads += 1
        return {g: view.get(g, KshareGroup(g)) for g in groups}


def _state(spso: int, acked: int = 0) -> PartitionState:
    batches = (StateBatch(spso, spso, DeliveryState.AVAILABLE, 1),) + (
        (StateBatch(spso + 1, spso + acked, DeliveryState.ACKNOWLEDGED, 1),) if acked else ())
    return PartitionState(1, 1, spso, batches)


def _kshare(group: str = "g", *, acked: int = 3, members: int = 0, configs: dict | None = None) -> KshareGroup:
    return KshareGroup(group, GroupRecord(group, configs=configs or {}),
                       {f"m{i}": MemberRecord(group, f"m{i}", client_id="c") for i in range(members)},
                       {(str(TID), 0): _state(10, acked), (str(TID), 1): _state(20)})


def _mover(state: FakeState, native: FakeCluster, sidecar: FakeCluster | None = None, *, backend: Any = None,
           **kw: Any) -> Mover:
    sides = Sides(state, backend or native, native, sidecar)  # type: ignore[arg-type]
    return Mover(sides, kshare_defaults={"share.auto.offset.reset": "earliest"}, poll_s=0, **kw)


async def test_dry_run_plans_and_writes_nothing():
    native = FakeCluster()
    (plan,) = await _mover(FakeState(_kshare()), native).to_native(["g"])
    assert plan.refusal is None and not plan.moved and native.calls == []
    assert [(p.topic, p.partition, p.start_offset, p.redelivered, p.counts_reset) for p in plan.partitions] == \
        [("orders", 0, 10, 3, 1), ("orders", 1, 20, 0, 1)]
    assert plan.carried == {"share.auto.offset.reset": "earliest"}  # kshare's default differs from native's


@pytest.mark.parametrize(("case", "expected"), [
    ("no share groups", "cannot serve share groups: too old"),
    ("moved", "was already moved"),
    ("empty", "kshare has no state for share group g"),
    ("native has it", "already has share group g"),
    ("members", "still has 2 consumer(s) connected to kshare"),
])
async def test_to_native_refuses_in_one_line(case, expected):
    native = FakeCluster(missing="too old" if case == "no share groups" else None)
    view = _kshare(members=2 if case == "members" else 0,
                   configs={"share.coordinator": "backend"} if case == "moved" else None)
    if case == "empty":
        view = KshareGroup("g")
    if case == "native has it":
        native.groups["g"] = GroupInfo(True, "Empty")
    (plan,) = await _mover(FakeState(view), native, FakeCluster(), execute=True).to_native(["g"])
    assert expected in plan.refusal and "\n" not in plan.refusal
    assert native.calls == []


async def test_execute_to_the_backend_needs_a_sidecar_to_mark_the_group():
    (plan,) = await _mover(FakeState(_kshare()), FakeCluster(), None, execute=True).to_native(["g"])
    assert "--execute needs --sidecar" in plan.refusal


async def test_execute_writes_configs_then_offsets_then_marks():
    native, sidecar = FakeCluster(), FakeCluster("sidecar:9192")
    sidecar.configs["g"] = {"share.auto.offset.reset": "earliest"}  # the group's effective configs in kshare
    (plan,) = await _mover(FakeState(_kshare()), native, sidecar, execute=True).to_native(["g"])
    assert plan.moved and plan.refusal is None
    assert native.calls == [("configs", "g", (("share.auto.offset.reset", 0, "earliest"),), False),
                            ("offsets", "g", {"orders": {0: 10, 1: 20}})]
    assert sidecar.calls == [("configs", "g", (("share.coordinator", 0, "backend"),), True)]


async def test_to_another_cluster_kshare_keeps_its_copy_unmarked():
    native, sidecar = FakeCluster(), FakeCluster("sidecar:9192")
    backend = FakeCluster("backend:9092", cid="backend")
    (plan,) = await _mover(FakeState(_kshare()), native, sidecar, backend=backend, execute=True).to_native(["g"])
    assert plan.moved and sidecar.calls == []
    assert any("kshare keeps its copy" in n for n in plan.notes)


async def test_a_refused_config_stays_behind_with_the_reason():
    native = FakeCluster(refuse={"share.record.lock.duration.ms": "INVALID_CONFIG: out of range"})
    view = _kshare(configs={"share.record.lock.duration.ms": 6000})
    (plan,) = await _mover(FakeState(view), native).to_native(["g"])
    assert "share.record.lock.duration.ms" not in plan.carried
    assert "out of range" in plan.not_carried["share.record.lock.duration.ms"]


async def test_wait_for_drain_moves_once_nothing_is_acknowledged_beyond_the_start():
    state = FakeState(_kshare(acked=3, members=1)).then(_kshare(acked=1, members=1)).then(_kshare(acked=0))
    progress: list[str] = []
    native, sidecar = FakeCluster(), FakeCluster("sidecar:9192")
    mover = _mover(state, native, sidecar, execute=True, wait_for_drain=True, progress=progress.append)
    (plan,) = await mover.to_native(["g"])
    assert plan.moved and plan.redelivered == 0 and state.reads == 3
    assert progress and "3 records acknowledged beyond the start offsets, 1 consumer(s)" in progress[0]


async def test_wait_for_drain_gives_up_after_its_timeout():
    mover = _mover(FakeState(_kshare(acked=3)), FakeCluster(), FakeCluster("s:1"), execute=True, wait_for_drain=True,
                   drain_timeout_s=0.05)
    (plan,) = await mover.to_native(["g"])
    assert not plan.moved and "did not drain" in plan.refusal and "3 records" in plan.refusal


def _native_group(native: FakeCluster, *, members: tuple[str, ...] = (), lag: int = 5) -> None:
    native.groups["g"] = GroupInfo(True, "Stable" if members else "Empty", members)
    native.offsets["g"] = [Offset("orders", TID, 0, 100, lag), Offset("orders", TID, 1, -1, -1)]
    native.ends.update({("orders", 0): 110, ("orders", 1): 40})


async def test_from_native_moves_a_marked_group_back_through_the_sidecar():
    native, sidecar = FakeCluster(), FakeCluster("sidecar:9192")
    _native_group(native)
    marked = _kshare(configs={"share.coordinator": "backend"})  # its old copy, left behind
    (plan,) = await _mover(FakeState(marked), native, sidecar, execute=True).from_native(["g"])
    assert plan.moved and plan.redelivered == 5  # 110 - 100 - 5
    assert [c[0] for c in sidecar.calls] == ["configs", "delete offsets", "configs", "offsets"]
    assert sidecar.calls[0] == ("configs", "g", (("share.coordinator", 1, None),), True)
    assert sidecar.calls[-1] == ("offsets", "g", {"orders": {0: 100}})
    assert native.calls == [("delete group", "g")]


@pytest.mark.parametrize(("case", "expected"), [
    ("no group", "has no share group g"),
    ("kshare has it", "kshare already has share group g"),
    ("members", "connected to the native cluster"),
    ("lag unknown", "did not report the lag"),
    ("no sidecar", "--execute needs --sidecar"),
])
async def test_from_native_refuses_in_one_line(case, expected):
    native = FakeCluster()
    if case != "no group":
        _native_group(native, members=("c (m) on h",) if case == "members" else (),
                      lag=-1 if case == "lag unknown" else 5)
    view = _kshare() if case == "kshare has it" else KshareGroup("g")
    sidecar = None if case == "no sidecar" else FakeCluster("sidecar:9192")
    (plan,) = await _mover(FakeState(view), native, sidecar, execute=True).from_native(["g"])
    assert expected in plan.refusal and "\n" not in plan.refusal
    assert native.calls == [] and (sidecar is None or sidecar.calls == [])


async def test_another_cluster_without_the_topic_is_refused():
    class NoTopics(FakeCluster):
        async def topics(self, names: Any = None) -> dict[str, tuple[uuid.UUID, int]]:
            return {}

    native, backend = NoTopics(), FakeCluster("backend:9092", cid="backend")
    (plan,) = await _mover(FakeState(_kshare()), native, FakeCluster("s:1"), backend=backend).to_native(["g"])
    assert "topic orders does not exist with 2 partitions at native:9092" in plan.refusal
