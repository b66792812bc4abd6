"""Moving share groups between kshare and a Kafka cluster with native share groups, both ways.

To native (``kshare state migrate-to-native``): kshare's state of the group is read from the state
topic (migrate/kshare.py); the group's configs (IncrementalAlterConfigs on the GROUP resource,
the dead-letter settings included) and each share-partition's start offset
(AlterShareGroupOffsets) are written to the native cluster; then, when the native cluster is the
backend, the group is marked ``share.coordinator=backend`` at the sidecar, which from then on
passes the group's share requests to the backend (passthrough/native.py) and drops kshare's copy.

From native (``kshare state migrate-from-native``): DescribeShareGroupOffsets v1 (start offsets and
lag) and DescribeConfigs of the group are read from the native cluster; the sidecar is asked to
initialise kshare's state from them — the mark removed, the configs set, AlterShareGroupOffsets —
so its own persister writes them, under the fencing every write of a running sidecar has (a
second writer next to a running sidecar would be fenced by it, or fence it); then the native
group is deleted, so that no consumer can resume there.

Refused, one line each (:attr:`GroupPlan.refusal`), when the group still has consumers, when the
target already has state for it, or when the native side cannot serve share groups. What cannot
move is counted per share-partition (migrate/plan.py); ``wait_for_drain`` waits until nothing is
acknowledged beyond the start offsets, with the consumers still running, and the group is empty.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol.constants import AlterConfigOp
from .admin import AdminError, ClusterAdmin, GroupInfo
from .kshare import KshareGroup, KshareState
from .plan import (
    COORDINATOR_CONFIG,
    GroupPlan,
    PartitionPlan,
    configs_from_native,
    configs_to_native,
    kshare_partition,
    native_partition,
)

#: kshare's ``share.coordinator`` value for a group the backend serves natively
BACKEND = "backend"


@dataclass
class Sides:
    """Where a move reads and writes. ``backend``: the cluster holding kshare's state topic (and
    its user topics); ``native``: the cluster with native share groups, the backend itself after
    an upgrade; ``sidecar``: a sidecar serving that state topic (kshare's writes go through it)."""

    state: KshareState
    backend: ClusterAdmin
    native: ClusterAdmin
    sidecar: ClusterAdmin | None = None
    state_topic: str = "__kshare_state"


class Mover:
    """Plans (dry run) or carries out (``execute``) moves of share groups; one :class:`GroupPlan` each."""

    def __init__(self, sides: Sides, *, execute: bool = False, wait_for_drain: bool = False,
                 drain_timeout_s: float = 300.0, poll_s: float = 2.0, kshare_defaults: Mapping[str, Any] | None = None,
                 progress: Callable[[str], None] = lambda line: None) -> None:
        self.sides = sides
        #: the sidecar-wide defaults of every group config (SidecarConfig.group_config()): a group's
        #: effective configs in kshare when no sidecar is asked (--sidecar)
        self.kshare_defaults = dict(kshare_defaults or {})
        self.execute = execute
        self.wait_for_drain = wait_for_drain
        self.drain_timeout_s = drain_timeout_s
        self.poll_s = poll_s
        self.progress = progress
        self._names: dict[str, str] = {}  # topic id -> name
        self._same = True  # the native cluster is the backend (set by to_native / from_native)

    # -- shared checks ----------------------------------------------------------------------------
    async def _native_refusal(self) -> str | None:
        missing = await self.sides.native.share_groups_missing()
        return None if missing is None else f"the native cluster {self.sides.native.bootstrap} cannot serve share " \
                                            f"groups: {missing}"

    async def _same_cluster(self) -> bool:
        native, backend = await self.sides.native.cluster_id(), await self.sides.backend.cluster_id()
        return native is not None and native == backend

    async def _topic_names(self) -> dict[str, str]:
        if not self._names:
            self._names = {str(tid): name for name, (tid, _) in (await self.sides.backend.topics()).items()}
        return {**self.sides.state.topic_names, **self._names}

    # -- to native --------------------------------------------------------------------------------
    async def to_native(self, groups: list[str]) -> list[GroupPlan]:
        refusal = await self._native_refusal()
        same = self._same = await self._same_cluster()
        if self.execute and same and self.sides.sidecar is None and refusal is None:
            refusal = ("--execute needs --sidecar HOST:PORT, a sidecar serving this state topic: it marks each moved "
                       "group so that the sidecar passes it to the backend instead of serving it again")
        views = await self.sides.state.read(groups)
        return [await self._to_native_one(views[g], refusal, same) for g in groups]

    async def _to_native_one(self, view: KshareGroup, refusal: str | None, same: bool) -> GroupPlan:
        s, group = self.sides, view.group
        plan = GroupPlan(group, "to-native", f"kshare (state topic {s.state_topic} on {s.backend.bootstrap})",
                         f"native share groups at {s.native.bootstrap}")
        if refusal is None:
            refusal = await self._kshare_source_refusal(view) or await self._native_target_refusal(group)
        if refusal is not None:
            plan.refusal = refusal
            return plan
        await self._plan_kshare(view, plan)
        if plan.refusal is None and self.wait_for_drain:
            view = await self._drain_kshare(view, plan)
        elif plan.refusal is None and view.members:
            plan.refusal = _consumers_connected(group, "kshare", view.member_lines())
        if plan.refusal is not None or not self.execute:
            return plan
        await self._write_native(plan)
        if plan.moved:
            await self._mark_moved(plan, same)
        return plan

    async def _kshare_source_refusal(self, view: KshareGroup) -> str | None:
        group = view.group
        if view.configs.get(COORDINATOR_CONFIG) == BACKEND:
            return (f"share group {group} was already moved: the sidecar passes it to the backend "
                    f"({COORDINATOR_CONFIG}={BACKEND}); nothing of it is left in kshare to move")
        if not view.partitions:
            return (f"kshare has no state for share group {group} in state topic {self.sides.state_topic} "
                    f"on {self.sides.backend.bootstrap}: nothing to move (check the group name and --state-topic)")
        return None

    async def _native_target_refusal(self, group: str) -> str | None:
        native = self.sides.native
        info = await native.describe_group(group)
        offsets = [o for o in await native.describe_offsets(group) if o.start_offset >= 0]
        if info.exists or offsets:
            what = f"state {info.state}" if info.exists else "no members"
            return (f"the native cluster {native.bootstrap} already has share group {group} ({what}, start offsets "
                    f"for {len(offsets)} share-partitions): delete it there first (kafka-share-groups.sh "
                    f"--bootstrap-server {native.bootstrap} --delete --group {group}) or move it under another name")
        return None

    async def _plan_kshare(self, view: KshareGroup, plan: GroupPlan) -> None:
        names = await self._topic_names()
        plan.partitions, plan.notes = [], []
        for (tid, p), state in sorted(view.partitions.items(), key=lambda kv: (names.get(kv[0][0], kv[0][0]), kv[0][1])):
            name = names.get(tid)
            if name is None:
                plan.notes.append(f"topic id {tid} partition {p}: the topic no longer exists; its state is not moved")
                continue
            plan.partitions.append(kshare_partition(name, p, state))
        if not self._same:
            await self._check_topics(plan, self.sides.native)
        if plan.refusal is None and not plan.carried and not plan.not_carried:
            _, native_values = await self.sides.native.group_configs(plan.group)
            plan.carried, plan.not_carried = configs_to_native(view.configs, await self._kshare_values(view),
                                                               native_values)
            await self._validate(plan, self.sides.native)
        for part in plan.partitions:
            if part.start_offset < 0:
                plan.notes.append(f"{part.topic}-{part.partition}: no start offset yet (no record was acknowledged); the "
                                  f"target resolves it from share.auto.offset.reset, as kshare would have")

    async def _drain_kshare(self, view: KshareGroup, plan: GroupPlan) -> KshareGroup:
        deadline = time.monotonic() + self.drain_timeout_s
        said = 0.0
        while plan.redelivered or view.members:
            left = deadline - time.monotonic()
            if left <= 0:
                plan.refusal = _not_drained(plan.group, plan.redelivered, len(view.members), self.drain_timeout_s)
                return view
            if time.monotonic() - said >= 5:
                said = time.monotonic()
                self.progress(_draining(plan.group, plan.redelivered, len(view.members), left))
            await asyncio.sleep(self.poll_s)
            view = (await self.sides.state.read([plan.group], narrow={plan.group: view}))[plan.group]
            await self._plan_kshare(view, plan)
        return view

    async def _write_native(self, plan: GroupPlan) -> None:
        native = self.sides.native
        error = await native.alter_group_configs(plan.group, [(k, AlterConfigOp.SET, v) for k, v in plan.carried.items()])
        if error is not None:
            plan.refusal = f"the native cluster refused the group's configs ({error}); nothing was moved"
            return
        offsets = plan.offsets()
        failed = await native.alter_offsets(plan.group, offsets) if offsets else {}
        for i, p in enumerate(plan.partitions):
            if (p.topic, p.partition) in failed:
                plan.partitions[i] = _with_error(p, failed[(p.topic, p.partition)])
        if failed:
            plan.refusal = (f"the native cluster refused {len(failed)} share-partitions (listed above); kshare still "
                            f"serves the group: delete the native group, fix the cause and run again")
            return
        plan.moved = True

    async def _mark_moved(self, plan: GroupPlan, same: bool) -> None:
        group, sidecar = plan.group, self.sides.sidecar
        if not same:
            plan.notes.append(f"kshare keeps its copy of share group {group}: point its consumers at "
                              f"{self.sides.native.bootstrap}, then delete the copy (kshare groups delete --group {group})")
            return
        assert sidecar is not None  # to_native refuses --execute on the backend itself without one
        error = await sidecar.alter_group_configs(group, [(COORDINATOR_CONFIG, AlterConfigOp.SET, BACKEND)],
                                                  at_coordinator=True)
        if error is not None:
            plan.notes.append(f"the sidecar did not take {COORDINATOR_CONFIG}={BACKEND} ({error}): set it with kshare "
                              f"configs set -b {sidecar.bootstrap} --group {group} {COORDINATOR_CONFIG}={BACKEND}, or "
                              f"point the group's consumers at {self.sides.native.bootstrap}")
        else:
            plan.notes.append(f"the sidecar at {sidecar.bootstrap} now passes share group {group} to the backend: "
                              f"its consumers keep their bootstrap")

    # -- from native ------------------------------------------------------------------------------
    async def from_native(self, groups: list[str]) -> list[GroupPlan]:
        refusal = await self._native_refusal()
        self._same = await self._same_cluster()
        if refusal is None and self.execute and self.sides.sidecar is None:
            refusal = ("--execute needs --sidecar HOST:PORT, a sidecar serving this state topic: kshare's state is "
                       "written by the sidecar that serves it")
        if refusal is None and self.sides.sidecar is not None and (why := await self.sides.sidecar.share_groups_missing()):
            refusal = f"{self.sides.sidecar.bootstrap} is not a kshare sidecar serving share groups: {why}"
        views = await self.sides.state.read(groups)
        return [await self._from_native_one(views[g], refusal) for g in groups]

    async def _from_native_one(self, view: KshareGroup, refusal: str | None) -> GroupPlan:
        s, group = self.sides, view.group
        plan = GroupPlan(group, "from-native", f"native share groups at {s.native.bootstrap}",
                         f"kshare (state topic {s.state_topic} on {s.backend.bootstrap})")
        info = GroupInfo(False)
        if refusal is None:
            info = await s.native.describe_group(group)
            refusal = self._kshare_target_refusal(view) if info.exists else \
                f"the native cluster {s.native.bootstrap} has no share group {group}: nothing to move"
        if refusal is not None:
            plan.refusal = refusal
            return plan
        await self._plan_native(plan, view)
        if plan.refusal is None and self.wait_for_drain:
            await self._drain_native(plan, info, view)
        elif plan.refusal is None and info.members:
            plan.refusal = _consumers_connected(group, "the native cluster", list(info.members))
        if plan.refusal is None and self.execute:
            await self._write_kshare(plan, view)
        return plan

    def _kshare_target_refusal(self, view: KshareGroup) -> str | None:
        if view.configs.get(COORDINATOR_CONFIG) == BACKEND:
            return None  # moved before: the sidecar passes it through, kshare holds only its configs
        if view.partitions or view.members:
            where = f" -b {self.sides.sidecar.bootstrap}" if self.sides.sidecar is not None else ""
            return (f"kshare already has share group {view.group} ({len(view.partitions)} share-partitions, "
                    f"{len(view.members)} members in state topic {self.sides.state_topic}): delete it first "
                    f"(kshare groups delete{where} --group {view.group}) or move the native one under another name")
        return None

    async def _plan_native(self, plan: GroupPlan, view: KshareGroup) -> None:
        native = self.sides.native
        wanted: dict[str, list[int]] = {}
        for o in await native.describe_offsets(plan.group):
            wanted.setdefault(o.topic, []).append(o.partition)
        # the ends before the describe bound a lagging start offset; after it, the count (plan.py)
        before = await native.end_offsets(wanted) if wanted else {}
        offsets = [o for o in await native.describe_offsets(plan.group) if o.partition in wanted.get(o.topic, ())]
        ends = await native.end_offsets(wanted) if wanted else {}
        plan.partitions = [native_partition(o.topic, o.partition, o.start_offset, o.lag, ends[(o.topic, o.partition)],
                                            before[(o.topic, o.partition)])
                           for o in sorted(offsets, key=lambda o: (o.topic, o.partition))]
        if not self._same:
            await self._check_topics(plan, self.sides.backend)
        if plan.refusal is None and not plan.carried and not plan.not_carried:
            own, native_values = await native.group_configs(plan.group)
            plan.carried, plan.not_carried = configs_from_native(own, native_values, await self._kshare_values(view))
            if self.sides.sidecar is not None:
                await self._validate(plan, self.sides.sidecar)
        unknown = [f"{p.topic}-{p.partition}" for p in plan.partitions if p.error]
        if unknown:
            plan.refusal = (f"the native cluster did not report the lag of {', '.join(unknown)} (DescribeShareGroupOffsets "
                            f"v1 needs Kafka 4.2+): the records it would deliver again cannot be counted")

    async def _drain_native(self, plan: GroupPlan, info: GroupInfo, view: KshareGroup) -> None:
        deadline = time.monotonic() + self.drain_timeout_s
        said = 0.0
        while plan.redelivered or info.members:
            left = deadline - time.monotonic()
            if left <= 0:
                plan.refusal = _not_drained(plan.group, plan.redelivered, len(info.members), self.drain_timeout_s)
                return
            if time.monotonic() - said >= 5:
                said = time.monotonic()
                self.progress(_draining(plan.group, plan.redelivered, len(info.members), left))
            await asyncio.sleep(self.poll_s)
            info = await self.sides.native.describe_group(plan.group)
            await self._plan_native(plan, view)

    async def _write_kshare(self, plan: GroupPlan, view: KshareGroup) -> None:
        sidecar = self.sides.sidecar
        assert sidecar is not None  # from_native refuses --execute without one
        group = plan.group
        if view.configs.get(COORDINATOR_CONFIG) == BACKEND:
            error = await sidecar.alter_group_configs(group, [(COORDINATOR_CONFIG, AlterConfigOp.DELETE, None)],
                                                      at_coordinator=True)
            if error is not None:
                plan.refusal = f"the sidecar kept serving share group {group} from the backend ({error}); nothing was moved"
                return
            left = sorted({t for t, _ in view.partitions} & set((await self._topic_names()).keys()))
            if left:  # an older copy the mark did not drop (it is replaced, not merged)
                names = await self._topic_names()
                await sidecar.delete_offsets(group, [names[t] for t in left])
        error = await sidecar.alter_group_configs(group, [(k, AlterConfigOp.SET, v) for k, v in plan.carried.items()],
                                                  at_coordinator=True)
        if error is not None:
            plan.refusal = f"the sidecar refused the group's configs ({error}); kshare has no state for it yet"
            return
        offsets = plan.offsets()
        failed = await sidecar.alter_offsets(group, offsets) if offsets else {}
        for i, p in enumerate(plan.partitions):
            if (p.topic, p.partition) in failed:
                plan.partitions[i] = _with_error(p, failed[(p.topic, p.partition)])
        if failed:
            plan.refusal = (f"the sidecar refused {len(failed)} share-partitions (listed above); the native group is "
                            f"kept: fix the cause, delete kshare's copy and run again")
            return
        plan.moved = True
        try:
            await self.sides.native.delete_group(group)
            plan.notes.append(f"the native group {group} was deleted, so no consumer resumes there; its consumers "
                              f"connect to the sidecar")
        except AdminError as exc:
            plan.notes.append(f"the native group was not deleted ({exc}): delete it (kafka-share-groups.sh --delete "
                              f"--group {group}) before any consumer connects to {self.sides.native.bootstrap}")

    # -- both -------------------------------------------------------------------------------------
    async def _kshare_values(self, view: KshareGroup) -> dict[str, str]:
        """The group's effective configs in kshare: as the sidecar describes them, or from the
        sidecar-wide defaults of the tool's config and the group's overrides (no --sidecar, or
        a group the sidecar passes to the backend, whose configs it would describe from there)."""
        if self.sides.sidecar is not None and view.configs.get(COORDINATOR_CONFIG) != BACKEND:
            return (await self.sides.sidecar.group_configs(view.group))[1]
        return {k: str(v) for k, v in {**self.kshare_defaults, **view.configs}.items()}

    async def _check_topics(self, plan: GroupPlan, target: ClusterAdmin) -> None:
        wanted = sorted({p.topic for p in plan.partitions})
        found = await target.topics(wanted) if wanted else {}
        for topic in wanted:
            need = 1 + max(p.partition for p in plan.partitions if p.topic == topic)
            if topic not in found or found[topic][1] < need:
                plan.refusal = (f"topic {topic} does not exist with {need} partitions at {target.bootstrap}: the target "
                                f"serves the group on its own copy of the topic; create it there (same partitions, same "
                                f"records, e.g. with MirrorMaker 2) first")
                return

    async def _validate(self, plan: GroupPlan, target: ClusterAdmin) -> None:
        """Each carried config checked by the target (validate only); refused ones stay behind."""
        for key, value in list(plan.carried.items()):
            error = await target.alter_group_configs(plan.group, [(key, AlterConfigOp.SET, value)], validate_only=True)
            if error is not None:
                del plan.carried[key]
                plan.not_carried[key] = f"{value}: refused by {target.bootstrap}: {error}"


def _with_error(p: PartitionPlan, error: str) -> PartitionPlan:
    return dataclasses.replace(p, error=error)


def _consumers_connected(group: str, where: str, members: list[str]) -> str:
    shown = "; ".join(members[:3]) + (f"; and {len(members) - 3} more" if len(members) > 3 else "")
    return (f"share group {group} still has {len(members)} consumer(s) connected to {where} ({shown}): stop them "
            f"and run again (a consumer that died leaves when its share.session.timeout.ms has passed), or run with "
            f"--wait-for-drain")


def _draining(group: str, redelivered: int, members: int, left: float) -> str:
    return (f"share group {group}: {redelivered} records acknowledged beyond the start offsets, {members} consumer(s) "
            f"connected; waiting for the window to drain and the consumers to stop ({left:.0f} s left)")


def _not_drained(group: str, redelivered: int, members: int, timeout_s: float) -> str:
    return (f"share group {group} did not drain in {timeout_s:.0f} s ({redelivered} records acknowledged beyond the "
            f"start offsets would be delivered again, {members} consumer(s) connected): stop the producers or let "
            f"the consumers catch up, then stop the consumers; or run without --wait-for-drain to move anyway")


__all__ = ["BACKEND", "Mover", "Sides"]
