"""Share-group administration: list, describe, offsets (describe/alter/delete), delete, configs.

The domain side of the admin APIs (see docs/admin.md); the handlers in ``api/admin.py`` and
``api/configs.py`` only translate messages. Kafka's rules:

- only share groups exist here; a group that has only per-group configs (set before any member
  joined) and no share-partition state is not listed or described (Kafka keeps group configs
  apart from groups);
- altering or deleting offsets and deleting a group need a group without members
  (NON_EMPTY_GROUP otherwise);
- an offsets reset re-initializes the share-partition with a higher state epoch: in-flight
  state and delivery counts are discarded, writers of the old state are fenced, and a loaded
  share-partition is unloaded so it reloads the new state on the next fetch;
- lag (KIP-1226) = partition end offset - StartOffset - DeliveryCompleteCount, -1 when unknown.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..config import (
    GROUP_CONFIG_NAMES,
    GROUP_CONFIGS,
    KSHARE_GROUP_CONFIGS,
    ConfigError,
    SidecarConfig,
    group_config_setting,
)
from .coordinator import ShareGroup, ShareGroupCoordinator
from ..backend.errors import BackendError
from ..backend.types import TopicInfo
from ..persist.errors import PersistError
from ..persist.model import SharePartitionKey
from ..protocol.constants import AlterConfigOp, ConfigSource, ConfigType
from .admin_model import (
    AdminError,
    ConfigValue,
    GroupDescription,
    GroupListing,
    MemberInfo,
    PartitionOffset,
    TopicOffsets,
)

if TYPE_CHECKING:
    from ..backend.backend import Backend
    from ..persist.records import StateSummary
    from ..persist.protocol import Persister
    from ..cluster.membership import GroupConfigTail, PeerConfigs
    from .service import GroupService
    from ..share.cache import SharePartitionCache

log = logging.getLogger("kshare.admin")

__all__ = ["AdminError", "AdminService", "ConfigValue", "GroupDescription", "GroupListing", "MemberInfo",
           "PartitionOffset", "TopicOffsets"]

_ZERO_UUID = uuid.UUID(int=0)


class AdminService:
    """Admin operations over the sidecar's coordinator, group service, partitions and persister."""

    def __init__(self, *, config: SidecarConfig, coordinator: ShareGroupCoordinator, groups: GroupService,
                 partitions: SharePartitionCache, persister: Persister, backend: Backend) -> None:
        self.config = config
        self.coordinator = coordinator
        self.groups = groups
        self.partitions = partitions
        self.persister = persister
        self.backend = backend
        self._locks: dict[str, asyncio.Lock] = {}
        #: a cluster of sidecars: per-group configs of groups coordinated elsewhere (cluster/membership.py)
        self.remote_group_configs: dict[str, dict[str, str]] | None = None
        self.remote_state: GroupConfigTail | None = None  # share-partition snapshots of other sidecars
        #: a cluster of sidecars: forwards config changes to the group's coordinator (cluster/membership.py)
        self.peer_configs: PeerConfigs | None = None

    # -- which groups exist ------------------------------------------------------------------
    def _group(self, group_id: str) -> ShareGroup | None:
        """The group if it exists as a share group (not just as a holder of per-group configs)."""
        group = self.coordinator.groups.get(group_id)
        if group is None or group.deleted:
            return None
        if group.group_epoch == 0 and not group.members and not self._state_keys(group_id):
            return None
        return group

    def _state_keys(self, group_id: str) -> list[SharePartitionKey]:
        try:
            keys = self.persister.keys(group_id)
        except PersistError:
            keys = []
        if self.remote_state is not None:  # a cluster: share-partitions led by other sidecars too
            keys = sorted(set(keys) | set(self.remote_state.snapshots.get(group_id, {})),
                          key=lambda k: (k.group_id, k.topic_id, k.partition))
        return keys

    def _remote_summary(self, key: SharePartitionKey) -> StateSummary | None:
        """A share-partition led by another sidecar: its newest snapshot read from the state topic."""
        return self.remote_state.summary(key) if self.remote_state is not None else None

    def _ready(self) -> None:
        if not self.persister.ready:
            raise AdminError(ErrorCode.coordinator_load_in_progress, "share state is still loading")

    def _coordinating(self, group_id: str) -> None:
        """In a cluster of sidecars, group administration happens at the group's
        coordinator: elsewhere NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while it is taken
        over here), as a broker that is not the coordinator answers; admin clients look it up."""
        coordinates = getattr(self.groups, "coordinates", None)
        code = coordinates(group_id) if coordinates is not None else ErrorCode.none
        if code != ErrorCode.none:
            raise AdminError(code, f"this sidecar does not coordinate share group {group_id}")

    def _lock(self, group_id: str) -> asyncio.Lock:
        return self._locks.setdefault(group_id, asyncio.Lock())

    # -- ListGroups / ShareGroupDescribe -----------------------------------------------------
    def list_groups(self, *, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        """Share groups, filtered by state and type names (case-insensitive, Kafka's rule)."""
        self._ready()
        states = {s.lower() for s in states}
        types = {t.lower() for t in types}
        if types and "share" not in types:
            return []
        out = []
        for group_id in sorted(self.coordinator.groups):
            group = self._group(group_id)
            if group is None:
                continue
            state = group.state.value
            if states and state.lower() not in states:
                continue
            out.append(GroupListing(group_id, state))
        return out

    def describe_group(self, group_id: str) -> GroupDescription:
        self._ready()
        try:
            self._coordinating(group_id)
        except AdminError as exc:
            return GroupDescription(group_id, exc.code, str(exc))
        group = self._group(group_id)
        if group is None:
            return GroupDescription(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        names = {tid: name for name, (tid, _n) in group.topics_seen.items()}
        members = []
        for m in sorted(group.members.values(), key=lambda m: m.member_id):
            assignment = tuple((tid, names.get(tid) or self._topic_name(tid) or "", tuple(sorted(ps)))
                               for tid, ps in sorted(m.assignment.items(), key=lambda kv: str(kv[0])))
            members.append(MemberInfo(m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                                      tuple(m.subscribed), assignment))
        return GroupDescription(group_id, state=group.state.value, group_epoch=group.group_epoch,
                                assignment_epoch=group.assignment_epoch,
                                assignor=self.coordinator.assignor_name(group),
                                members=tuple(members))

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        info = self.backend.topic_by_id(topic_id)
        if info is not None:
            return info.name
        return self.persister.topic_names().get(str(topic_id))

    # -- DescribeShareGroupOffsets -----------------------------------------------------------
    async def describe_offsets(self, group_id: str,
                               topics: Mapping[str, Iterable[int]] | None) -> list[TopicOffsets]:
        """SPSO and lag per share-partition; ``topics=None`` = every share-partition with state.

        An unknown (or deleted) group is not an error — Kafka 4.3 answers it as a group without
        state: no topics when all are asked for, StartOffset -1 / Lag -1 for named partitions.
        Partitions without state get StartOffset -1 (clients show "-")."""
        self._ready()
        self._coordinating(group_id)
        wanted: list[tuple[TopicOffsets, str | None]] = []  # (result, topic name known to the backend)
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for key in self._state_keys(group_id):
                by_topic.setdefault(key.topic_id, []).append(key.partition)
            for tid, parts in by_topic.items():
                name = self._topic_name(uuid.UUID(tid))
                if name is None:
                    continue  # the topic is gone; its state is cleaned up with delete-offsets
                wanted.append((TopicOffsets(name, uuid.UUID(tid), [PartitionOffset(p) for p in sorted(parts)]),
                               name))
        else:
            infos = await self._describe(list(topics))
            for name, asked in topics.items():
                info = infos.get(name)
                if info is None:
                    wanted.append((TopicOffsets(name, _ZERO_UUID, [
                        PartitionOffset(p, error=ErrorCode.unknown_topic_or_partition,
                                        message=f"topic {name} does not exist") for p in asked]), None))
                    continue
                res = TopicOffsets(name, info.topic_id)
                for p in asked:
                    po = PartitionOffset(p)
                    if not 0 <= p < info.partitions:
                        po.error, po.message = ErrorCode.unknown_topic_or_partition, \
                            f"topic {name} has no partition {p}"
                    res.partitions.append(po)
                wanted.append((res, name))
        keys = {SharePartitionKey(group_id, str(t.topic_id), po.partition): (t, name, po)
                for t, name in wanted for po in t.partitions if po.error == ErrorCode.none}
        summaries = await self.persister.read_summary(list(keys)) if keys else {}
        for key, summary in list(summaries.items()):
            if isinstance(summary, PersistError) and (remote := self._remote_summary(key)) is not None:
                summaries[key] = remote

        async def fill(key: SharePartitionKey) -> None:
            topic, name, po = keys[key]
            summary = summaries.get(key)
            if name is None or summary is None or isinstance(summary, PersistError) or summary.start_offset < 0:
                return  # no state: StartOffset -1, LeaderEpoch 0, Lag -1 (Kafka's answer)
            po.start_offset = summary.start_offset
            po.leader_epoch = max(0, summary.leader_epoch)
            try:
                end = await self.backend.high_watermark(name, po.partition)
            except BackendError as exc:
                log.info("lag of %s-%d unknown: %s", name, po.partition, exc)
                return
            lag = summary.lag(end)
            po.lag = -1 if lag is None else lag

        await asyncio.gather(*(fill(k) for k in keys))
        return [t for t, _ in wanted]

    async def _describe(self, names: list[str]) -> dict[str, TopicInfo]:
        try:
            return await self.backend.describe_topics(names)
        except BackendError as exc:
            raise AdminError(ErrorCode.coordinator_not_available, f"backend unavailable: {exc}") from exc

    # -- AlterShareGroupOffsets --------------------------------------------------------------
    async def alter_offsets(self, group_id: str, topics: Mapping[str, Mapping[int, int]]) -> list[TopicOffsets]:
        """Reset SPSOs (an empty or new group only). Per partition: error or success.

        Like Kafka, this may initialize a group that does not exist yet (KIP-932: "it can also be
        used to initialize the share group to the start of a topic")."""
        self._ready()
        if not group_id:
            raise AdminError(ErrorCode.invalid_group_id, "the group id must not be empty")
        self._coordinating(group_id)
        async with self._lock(group_id):
            group = self.coordinator.groups.get(group_id)
            if group is not None and group.members:
                raise AdminError(ErrorCode.non_empty_group,
                                 f"share group {group_id} has {len(group.members)} active member(s); "
                                 "offsets can only be altered in an empty group")
            infos = await self._describe(list(topics))
            results: list[TopicOffsets] = []
            todo: list[tuple[PartitionOffset, TopicInfo, int]] = []
            for name, parts in topics.items():
                info = infos.get(name)
                res = TopicOffsets(name, info.topic_id if info else _ZERO_UUID)
                for p, offset in sorted(parts.items()):
                    po = PartitionOffset(p)
                    if info is None:
                        po.error, po.message = ErrorCode.unknown_topic_or_partition, f"topic {name} does not exist"
                    elif not 0 <= p < info.partitions:
                        po.error, po.message = ErrorCode.unknown_topic_or_partition, \
                            f"topic {name} has no partition {p}"
                    elif offset < 0:
                        po.error, po.message = ErrorCode.invalid_request, f"start offset {offset} must be >= 0"
                    else:
                        todo.append((po, info, offset))
                    res.partitions.append(po)
                results.append(res)
            if todo:
                group = self.coordinator.ensure_group(group_id)
                for po, info, offset in todo:
                    key = SharePartitionKey(group_id, str(info.topic_id), po.partition)
                    try:
                        await self._reset(key, offset)
                        self.groups.mark_initialized(group_id, info.topic_id, po.partition)
                    except PersistError as exc:
                        po.error, po.message = exc.error_code, str(exc)
                self.partitions.unload_group(group_id)
                group.create()  # Kafka creates the group (epoch 1); a reset does not bump the epoch
                await self._save(group_id)
                log.info("share group %s: offsets altered for %d share-partition(s)", group_id, len(todo))
            return results

    async def _reset(self, key: SharePartitionKey, offset: int) -> None:
        current = (await self.persister.read([key])).get(key)
        epoch = current.state_epoch + 1 if current is not None and not isinstance(current, PersistError) else 0
        await self.persister.initialize(key, epoch, offset)

    # -- DeleteShareGroupOffsets -------------------------------------------------------------
    async def delete_offsets(self, group_id: str, topics: Iterable[str]) -> list[TopicOffsets]:
        self._ready()
        self._coordinating(group_id)
        async with self._lock(group_id):
            group = self._group(group_id)
            if group is None:
                raise AdminError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
            if group.members:
                raise AdminError(ErrorCode.non_empty_group,
                                 f"share group {group_id} has {len(group.members)} active member(s); "
                                 "offsets can only be deleted in an empty group")
            names = list(dict.fromkeys(topics))
            infos = await self._describe(names)
            known_ids = self.persister.topic_ids()
            state = self._state_keys(group_id)
            results = []
            deleted = 0
            for name in names:
                info = infos.get(name)
                tid = str(info.topic_id) if info else known_ids.get(name)
                keys = [k for k in state if tid is not None and k.topic_id == tid]
                res = TopicOffsets(name, uuid.UUID(tid) if tid else _ZERO_UUID)
                if not keys:
                    res.error = ErrorCode.unknown_topic_or_partition
                    res.message = (f"topic {name} does not exist" if tid is None
                                   else f"share group {group_id} has no state for topic {name}")
                else:
                    outcome = await self.persister.delete(keys)
                    errors = [e for e in outcome.values() if e is not None]
                    if errors:
                        res.error, res.message = errors[0].error_code, str(errors[0])
                    else:
                        self.groups.forget_initialized(group_id, uuid.UUID(tid))
                        deleted += len(keys)
                results.append(res)
            if deleted:
                self.partitions.unload_group(group_id)
                await self._save(group_id)
                log.info("share group %s: deleted state of %d share-partition(s)", group_id, deleted)
            return results

    # -- DeleteGroups ------------------------------------------------------------------------
    async def delete_groups(self, group_ids: Iterable[str]) -> list[tuple[str, ErrorCode]]:
        self._ready()
        out = []
        for group_id in group_ids:
            async with self._lock(group_id):
                group = self._group(group_id)
                if group is None:
                    out.append((group_id, ErrorCode.group_id_not_found))
                    continue
                if group.members:
                    out.append((group_id, ErrorCode.non_empty_group))
                    continue
                try:
                    code = await self.groups.delete_group(group_id)
                except PersistError as exc:
                    code = exc.error_code
                if code == ErrorCode.none:
                    log.info("share group %s deleted", group_id)
                out.append((group_id, code))
        return out

    # -- per-group configs -------------------------------------------------------------------
    def describe_configs(self, group_id: str, names: Iterable[str] | None = None) -> list[ConfigValue]:
        """Effective ``share.*`` configs of a group (it need not exist: then the defaults).

        Asked for all, kshare's own keys (``share.assignor``) are left out unless the group sets
        them: Kafka does not know them, and a default group must be described as Kafka does."""
        group = self.coordinator.groups.get(group_id)
        overrides = dict(group.configs) if group is not None else {}
        if group is None and self.remote_group_configs is not None:  # coordinated by another sidecar
            overrides = dict(self.remote_group_configs.get(group_id, {}))
        if names is None:
            wanted = [n for n in GROUP_CONFIG_NAMES if n not in KSHARE_GROUP_CONFIGS or n in overrides]
        else:
            wanted = [n for n in names if n in GROUP_CONFIG_NAMES]
        defaults = self.config.group_config()
        out = []
        for name in wanted:
            base = group_config_setting(name)
            default = _text(defaults[name])
            default_source = ConfigSource.STATIC_BROKER_CONFIG if GROUP_CONFIGS.get(name) in self.config.explicit \
                else ConfigSource.DEFAULT_CONFIG  # the operator set the broker-level default, or not
            if name in overrides:
                value, source = _text(overrides[name]), ConfigSource.GROUP_CONFIG
            else:
                value, source = default, default_source
            kind = ConfigType.INT if base.kind is int else ConfigType.BOOLEAN if base.kind is bool else \
                ConfigType.DOUBLE if base.kind is float else ConfigType.STRING
            out.append(ConfigValue(name, value, source, kind, base.doc, default, default_source))
        return out

    def check_config_ops(self, ops: Iterable[tuple[str, int, str | None]]) -> dict[str, object | None]:
        """Validate IncrementalAlterConfigs operations; the changes (None = back to default).

        Raises AdminError(INVALID_CONFIG) naming the key and its allowed values."""
        changes: dict[str, object | None] = {}
        for name, op, value in ops:
            if name not in GROUP_CONFIG_NAMES:
                raise AdminError(ErrorCode.invalid_config, f"Unknown group config name: {name} (allowed: "
                                 f"{', '.join(GROUP_CONFIG_NAMES)})")
            if name in changes:
                raise AdminError(ErrorCode.invalid_request, f"config {name} appears more than once")
            if op == AlterConfigOp.DELETE:
                changes[name] = None
            elif op == AlterConfigOp.SET:
                if value is None:
                    raise AdminError(ErrorCode.invalid_config, f"{name}: a value is required")
                try:
                    changes[name] = self.config.validate_group_config(
                        name, value, assignors=self.coordinator.assignors or None)
                except ConfigError as exc:
                    raise AdminError(ErrorCode.invalid_config, str(exc)) from None
            elif op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                raise AdminError(ErrorCode.invalid_config,
                                 f"{name}: APPEND/SUBTRACT apply to list configs only; use SET")
            else:
                raise AdminError(ErrorCode.invalid_request, f"{name}: unknown config operation {op}")
        return changes

    def check_group_consistency(self, group_id: str, changes: Mapping[str, object | None]) -> None:
        """Cross-key rule (Kafka's GroupConfig): the heartbeat interval must be below the session timeout."""
        group = self.coordinator.groups.get(group_id)
        overrides = dict(group.configs) if group is not None else {}
        for name, value in changes.items():
            if value is None:
                overrides.pop(name, None)
            else:
                overrides[name] = value
        effective = self.config.group_config(overrides)
        for kind in ("share", "consumer", "streams"):
            heartbeat = int(effective[f"{kind}.heartbeat.interval.ms"])
            session = int(effective[f"{kind}.session.timeout.ms"])
            if session <= heartbeat:
                raise AdminError(ErrorCode.invalid_config,
                                 f"{kind}.session.timeout.ms ({session}) must be greater than "
                                 f"{kind}.heartbeat.interval.ms ({heartbeat})")
        base, cap = int(effective["share.release.backoff.ms"]), int(effective["share.release.backoff.max.ms"])
        if cap < base:
            raise AdminError(ErrorCode.invalid_config, f"share.release.backoff.max.ms ({cap}) must not be below "
                             f"share.release.backoff.ms ({base})")

    async def alter_configs(self, group_id: str, changes: Mapping[str, object | None], *,
                            forwarded: bool = False) -> None:
        """Apply validated changes to a group's overrides and persist them.

        The group need not exist yet (configs may be set before the first member joins).
        Every config applies at once, as on Kafka (docs/admin.md): ``share.isolation.level`` to the
        next fetch, the session timeout and heartbeat interval to the next heartbeat,
        ``share.auto.offset.reset`` to share-partitions initialized from now on,
        ``share.assignor`` at the group's next assignment; the loaded share-partitions take the
        lock duration, delivery count limit, record-lock cap and extension keys now
        (SharePartitionCache.reconfigure_group; an empty group's are unloaded instead and
        reload on the next fetch)."""
        self._ready()
        if not group_id:
            raise AdminError(ErrorCode.invalid_group_id, "the group id must not be empty")
        if self.peer_configs is not None and not forwarded and \
                self.groups.coordinates(group_id) == ErrorCode.not_coordinator:
            code, message = await self.peer_configs.alter(group_id, changes, _text)
            if code:
                raise AdminError(ErrorCode(code), message)
            return
        self._coordinating(group_id)
        async with self._lock(group_id):
            group = self.coordinator.ensure_group(group_id)
            for name, value in changes.items():
                if value is None:
                    group.configs.pop(name, None)
                else:
                    group.configs[name] = value
            await self._save(group_id)
            if not group.members:  # nothing in flight: the next fetch loads them afresh
                self.partitions.unload_group(group_id)
            else:
                self.partitions.reconfigure_group(group_id)
            log.info("share group %s: configs changed: %s", group_id,
                     ", ".join(f"{k}={'(default)' if v is None else v}" for k, v in changes.items()))

    async def _save(self, group_id: str) -> None:
        try:
            await self.groups.save(group_id)
        except PersistError as exc:
            raise AdminError(exc.error_code, f"cannot persist share group {group_id}: {exc}") from exc


def _text(value: object) -> str:
    if isinstance(value, bool):  # Kafka writes booleans lowercase
        return "true" if value else "false"
    return str(value)
