"""Heartbeats and group administration around the pure coordinator.

Resolves subscribed topics through the backend, initializes the share-partitions the coordinator
asks for (those of newly subscribed topics: start offset unset, resolved at the first fetch, as
Kafka does) and tells it when they are, and keeps each group's durable record (epoch,
initialized share-partitions, per-group configs) in the persister so a restarted sidecar knows
its groups (subscriptions come back with the members' heartbeats).

Kafka answers the heartbeat first and initializes afterwards; the coordinator only assigns
initialized partitions, so either way they reach the members at a later heartbeat, one group
epoch later (group/initialization.py). kshare initializes before answering, so that the next
heartbeat — seconds later for a real client — always finds them initialized, as it does on
Kafka, and the epochs a member passes through are the same.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, cast

from kio.schema.errors import ErrorCode

from ..group.coordinator import HeartbeatResult, ShareGroupCoordinator
from ..log.errors import BackendError
from ..persist.codec import KIND_GROUP
from ..persist.errors import PersistError
from ..persist.ownership import group_home
from ..persist.records import GroupRecord
from ..ratelog import RateLimitedLog, backend_failures
from .partitions import SharePartitionManager

if TYPE_CHECKING:
    from ..log.backend import Backend
    from ..log.types import TopicInfo
    from ..persist.base import BasePersister
    from ..persist.ownership import EntityKey
    from ..persist.protocol import Persister

log = logging.getLogger("kshare.groups")
_rejections = RateLimitedLog(log)
_backend_failures = backend_failures(log)


class GroupService:
    def __init__(self, *, coordinator: ShareGroupCoordinator, partitions: SharePartitionManager, backend: Backend,
                 persister: Persister) -> None:
        self.coordinator = coordinator
        self.partitions = partitions
        self.backend = backend
        self.persister = persister
        #: a cluster of sidecars (issue 15): this sidecar coordinates the groups whose record's
        #: state partition it owns; they come and go with those partitions
        self.cluster = bool(getattr(persister, "cluster", False))
        #: in a cluster, the persister's ownership of state partitions (BasePersister's, persist/cluster.py)
        self._owner = cast("BasePersister", persister) if self.cluster else None
        if self._owner is not None:
            self._owner.acquired_listeners.append(self._acquired)
            self._owner.released_listeners.append(self._released)

    def coordinates(self, group_id: str) -> ErrorCode:
        """NONE when this sidecar coordinates ``group_id``; else what a broker that is not (or not
        yet) its coordinator answers: NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while the
        group's state partition is being taken over here."""
        owner = self._owner
        if owner is None:
            return ErrorCode.none
        p = group_home(group_id, owner.partitions)
        if owner.owns(p):
            return ErrorCode.none
        if owner.blocked.get(p) == "acquiring":
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.not_coordinator

    def _acquired(self, p: int, keys: Iterable[EntityKey]) -> None:
        """A state partition was taken over: coordinate its groups (members rejoin, as after a restart)."""
        names = [ident for kind, ident in keys if kind == KIND_GROUP]
        for group_id in names:
            self.coordinator.groups.pop(group_id, None)
            record = self.persister.get_group(group_id)
            if record is not None:
                self.restore_record(record)  # epoch, configs and the initialized share-partitions
        if names:
            log.info("state partition %d taken over: coordinating %d share groups", p, len(names))

    def _released(self, p: int, _keys: Iterable[EntityKey]) -> None:
        """A state partition was given up: its groups are coordinated elsewhere now."""
        if self._owner is None:  # only a cluster's persister releases state partitions
            return
        gone = [g for g in self.coordinator.groups if group_home(g, self._owner.partitions) == p]
        for group_id in gone:
            del self.coordinator.groups[group_id]
        if gone:
            log.info("state partition %d released: %d share groups are coordinated by another sidecar", p,
                     len(gone))

    def restore(self) -> int:
        """Recreate groups from their persisted records (members rejoin after a restart)."""
        groups = self.persister.list_groups()
        known = self.coordinator.assignors
        for record in groups.values():
            self.restore_record(record)
            chosen = record.configs.get("share.assignor")
            if chosen and known and chosen not in known:  # its plugin was uninstalled or failed to build
                log.warning("share group %s chose assignor %r, which no loaded plugin registers: it is assigned "
                            "by %r until the plugin is back or share.assignor is changed", record.group_id,
                            chosen, self.coordinator.default_assignor)
        return len(groups)

    def restore_record(self, record: GroupRecord) -> None:
        """Recreate one group from its persisted record: epoch, configs and the share-partitions it
        had initialized (so members rejoining are assigned them without a new initialization)."""
        initialized = {uuid.UUID(t): ps for t, ps in record.initialized.items()}
        self.coordinator.restore_group(record.group_id, record.group_epoch, dict(record.configs),
                                       initialized=initialized)

    async def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        subscribed_topic_names: list[str] | None, client_id: str,
                        client_host: str) -> HeartbeatResult:
        if not self.persister.ready:
            return HeartbeatResult(ErrorCode.coordinator_load_in_progress, "share state is still loading",
                                   member_id, member_epoch)
        code = self.coordinates(group_id)
        if code != ErrorCode.none:
            return HeartbeatResult(code, "this sidecar does not coordinate the group (cluster of sidecars)",
                                   member_id, member_epoch)
        group = self.coordinator.groups.get(group_id)
        names = set(subscribed_topic_names or ())
        if group is not None:
            names |= group.subscribed_topics()
        try:
            topics = await self.backend.describe_topics(sorted(names)) if names else {}
        except BackendError as exc:
            # Heartbeat errors other than the coordinator ones are fatal to share clients: report
            # backend trouble as COORDINATOR_NOT_AVAILABLE, which they retry.
            _backend_failures.log("metadata", logging.WARNING, "heartbeat of group=%.100s member=%.40s: backend "
                                  "metadata unavailable: %s", group_id, member_id, exc)
            return HeartbeatResult(ErrorCode.coordinator_not_available, f"backend unavailable: {exc}",
                                   member_id, member_epoch)
        before = group.group_epoch if group is not None else None
        result = self.coordinator.heartbeat(group_id, member_id, member_epoch, rack_id=rack_id,
                                            subscribed_topic_names=subscribed_topic_names, topics=topics,
                                            client_id=client_id, client_host=client_host)
        if result.error != ErrorCode.none:
            # Client-caused and repeatable at will: rate-limited per error (kshare_sidecar/ratelog.py).
            _rejections.log(result.error.name, logging.INFO, "heartbeat rejected with %s: group=%.100s "
                            "member=%.40s: %s", result.error.name, group_id, member_id, result.message)
            return result
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return result
        initialized = bool(result.initialize) and await self._initialize(group_id, result.initialize, topics)
        if initialized or group.group_epoch != before:
            try:
                await self.save(group_id)
            except PersistError as exc:
                log.warning("heartbeat of group=%s member=%s: saving the group failed: %s",
                            group_id, member_id, exc)
                return HeartbeatResult(ErrorCode.coordinator_not_available, f"share state unavailable: {exc}",
                                       member_id, member_epoch)
        return result

    async def _initialize(self, group_id: str, parts: Mapping[uuid.UUID, Iterable[int]],
                          topics: Mapping[str, TopicInfo]) -> bool:
        """Initialize the share-partitions the coordinator asked for and report the outcome to it.

        A failure does not fail the heartbeat (as in Kafka, whose initialization runs after the
        answer): the partitions are handed back, stay unassigned, and a later heartbeat asks
        again. Returns whether any was initialized."""
        names = {info.topic_id: name for name, info in topics.items()}
        todo = [(tid, p) for tid, ps in parts.items() for p in sorted(ps)]
        done: dict[uuid.UUID, set[int]] = {}
        failed: dict[uuid.UUID, set[int]] = {}

        async def one(tid: uuid.UUID, p: int) -> None:
            try:
                if tid not in names:
                    raise BackendError(int(ErrorCode.unknown_topic_or_partition),
                                       f"topic {tid} is not known to the backend any more")
                if not self.partitions.leads(tid, p):
                    # a cluster of sidecars: another sidecar leads it and initializes it at its
                    # first fetch (its state partition is not ours to write)
                    done.setdefault(tid, set()).add(p)
                    return
                await self.partitions.initialize(group_id, tid, names[tid], p)
                done.setdefault(tid, set()).add(p)
            except (PersistError, BackendError) as exc:
                failed.setdefault(tid, set()).add(p)
                _backend_failures.log(
                    "initialize", logging.WARNING, "group=%.100s: initializing share-partition %s-%d failed "
                    "(retried at a later heartbeat): %s", group_id, names.get(tid, tid), p, exc)

        try:
            await asyncio.gather(*(one(tid, p) for tid, p in todo))
        finally:
            # Whatever happened (a cancelled heartbeat included), nothing stays "initializing".
            self.coordinator.initialized(group_id, done)
            left = {tid: set(ps) - done.get(tid, set()) for tid, ps in parts.items()}
            self.coordinator.initialization_failed(group_id, {t: ps for t, ps in left.items() if ps})
        return bool(done)

    async def save(self, group_id: str) -> None:
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return
        initialized = self.coordinator.initialized_partitions(group_id)
        await self.persister.put_group(GroupRecord(
            group_id, group_epoch=group.group_epoch,
            initialized={str(t): tuple(sorted(ps))
                         for t, ps in sorted(initialized.items(), key=lambda kv: str(kv[0]))},
            configs={k: str(v) for k, v in group.configs.items()}))

    # -- administration (used by service/admin.py) -------------------------------------------
    def mark_initialized(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        """Record that a share-partition's state was initialized by an admin offsets reset (Kafka's
        AlterShareGroupOffsets initializes them too): members that subscribe get it at once."""
        self.coordinator.initialized(group_id, {topic_id: (partition,)})

    def forget_initialized(self, group_id: str, topic_id: uuid.UUID | None = None) -> None:
        """Forget that a group's share-partitions (of one topic, or all) are initialized after their
        state was deleted: they are initialized again when next subscribed."""
        self.coordinator.forget_initialized(group_id, topic_id)

    async def delete_group(self, group_id: str) -> ErrorCode:
        """Delete an empty group with its share-partition state and per-group configs."""
        code = self.coordinator.delete_group(group_id)
        if code != ErrorCode.none:
            return code
        self.forget_initialized(group_id)
        self.partitions.unload_group(group_id)
        await self.persister.delete_group(group_id, with_state=True)
        return ErrorCode.none

    def expire_members(self) -> list[tuple[str, str]]:
        gone = self.coordinator.expire_members()
        for group_id, member_id in gone:
            log.info("member session timed out: group=%s member=%s", group_id, member_id)
        return gone
