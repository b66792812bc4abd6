"""Heartbeats and group administration around the pure coordinator.

Resolves subscribed topics through the backend, initializes the share-partitions the coordinator
asks for (those of newly subscribed topics: start offset unset, resolved at the first fetch, as
Kafka does) and tells it when they are, and keeps each group durable in the persister as Kafka's
coordinator keeps it in ``__consumer_offsets``: the group record (epochs, initialized
share-partitions, per-group configs, subscribed topics' metadata) and one record per member
(subscription, epochs, current and target assignment; group/persisted.py). They are written when
they change — a join, a leave, a new assignment, a member reaching it — never per heartbeat, and
the heartbeat is answered once they are durable. A restarted sidecar, or one taking a group's
state partition over, restores the members with fresh session timers, so they keep their ids and
epochs (Kafka's onLoaded) instead of rejoining.

Kafka answers the heartbeat first and initializes afterwards; the coordinator only assigns
initialized partitions, so either way they reach the members at a later heartbeat, one group
epoch later (group/initialization.py). kshare initializes before answering, so that the next
heartbeat — seconds later for a real client — always finds them initialized, as it does on
Kafka, and the epochs a member passes through are the same.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, cast

from kio.schema.errors import ErrorCode

from . import persisted
from .coordinator import HeartbeatResult, ShareGroupCoordinator
from ..backend.errors import BackendError
from ..persist.codec import KIND_GROUP, KIND_MEMBER
from ..persist.errors import PersistError
from ..persist.ownership import group_home
from ..persist.records import GroupRecord, MemberRecord
from ..ratelog import RateLimitedLog, backend_failures
from ..share.cache import SharePartitionCache

if TYPE_CHECKING:
    from ..backend.backend import Backend
    from ..backend.types import TopicInfo
    from ..persist.base import BasePersister
    from ..persist.ownership import EntityKey
    from ..persist.protocol import Persister

log = logging.getLogger("kshare.groups")
_rejections = RateLimitedLog(log)
_backend_failures = backend_failures(log)


class GroupService:
    def __init__(self, *, coordinator: ShareGroupCoordinator, partitions: SharePartitionCache, backend: Backend,
                 persister: Persister) -> None:
        self.coordinator = coordinator
        self.partitions = partitions
        self.backend = backend
        self.persister = persister
        #: a cluster of sidecars: this sidecar coordinates the groups whose record's
        #: state partition it owns; they come and go with those partitions
        self.cluster = persister.cluster
        #: in a cluster, the persister's ownership of state partitions (BasePersister's, persist/cluster.py)
        self._owner = cast("BasePersister", persister) if self.cluster else None
        if self._owner is not None:
            self._owner.acquired_listeners.append(self._acquired)
            self._owner.released_listeners.append(self._released)

    def _not_coordinated(self, group_id: str, member_id: str, member_epoch: int) -> HeartbeatResult | None:
        """The heartbeat's answer when this sidecar does not (or no longer) coordinate the group."""
        code = self.coordinates(group_id)
        if code == ErrorCode.none:
            return None
        return HeartbeatResult(code, "this sidecar does not coordinate the group (cluster of sidecars)",
                               member_id, member_epoch)

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
        """A state partition was taken over: coordinate its groups, with their members (Kafka's
        replay and onLoaded: same member ids and epochs, fresh session timers)."""
        names: list[str] = []
        by_group: dict[str, list[str]] = {}  # the members' keys are among the partition's (one pass)
        for kind, ident in keys:
            if kind == KIND_GROUP:
                names.append(ident)
            elif kind == KIND_MEMBER:
                by_group.setdefault(ident[0], []).append(ident[1])
        members = 0
        for group_id in names:
            self.coordinator.groups.pop(group_id, None)
            record = self.persister.get_group(group_id)
            if record is not None:
                kept = [m for m in (self.persister.get_member(group_id, mid) for mid in by_group.get(group_id, ()))
                        if m is not None]
                self.restore_record(record, kept)
                members += len(kept)
        if names:
            log.info("state partition %d taken over: coordinating %d share groups with %d members", p, len(names),
                     members)

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
        """Recreate groups and their members from their persisted records (a restart: the members
        keep their ids and epochs, as on a Kafka broker's restart)."""
        groups = self.persister.list_groups()
        members = self.persister.list_members()
        known = self.coordinator.assignors
        for record in groups.values():
            self.restore_record(record, members.get(record.group_id, {}).values())
            chosen = record.configs.get("share.assignor")
            if chosen and known and chosen not in known:  # its plugin was uninstalled or failed to build
                log.warning("share group %s chose assignor %r, which no loaded plugin registers: it is assigned "
                            "by %r until the plugin is back or share.assignor is changed", record.group_id,
                            chosen, self.coordinator.default_assignor)
        return len(groups)

    def restore_record(self, record: GroupRecord, members: Iterable[MemberRecord] = ()) -> None:
        """Recreate one group from its persisted record and its members' records: epochs, configs,
        the share-partitions it had initialized (members are assigned them without a new
        initialization), the target assignment and the members themselves."""
        persisted.restore(self.coordinator, record, members)

    async def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        subscribed_topic_names: list[str] | None, client_id: str,
                        client_host: str) -> HeartbeatResult:
        if not self.persister.ready:
            return HeartbeatResult(ErrorCode.coordinator_load_in_progress, "share state is still loading",
                                   member_id, member_epoch)
        refused = self._not_coordinated(group_id, member_id, member_epoch)
        if refused is not None:
            return refused
        group = self.coordinator.groups.get(group_id)
        names = set(subscribed_topic_names or ())
        if group is not None:
            names |= group.subscribed_topics()
        try:
            # cached metadata, re-read in the background once aged: a heartbeat never waits for it
            # unless a topic is new to the sidecar (Backend.describe_topics)
            topics = await self.backend.describe_topics(sorted(names), stale_ok=True) if names else {}
        except BackendError as exc:
            # Heartbeat errors other than the coordinator ones are fatal to share clients: report
            # backend trouble as COORDINATOR_NOT_AVAILABLE, which they retry.
            _backend_failures.log("metadata", logging.WARNING, "heartbeat of group=%.100s member=%.40s: backend "
                                  "metadata unavailable: %s", group_id, member_id, exc)
            return HeartbeatResult(ErrorCode.coordinator_not_available, f"backend unavailable: {exc}",
                                   member_id, member_epoch)
        # Asked again after the wait: the group's state partition may have been given up meanwhile
        # (a handover, a lapsed lease), which drops the group here; the coordinator would then
        # answer GROUP_ID_NOT_FOUND, fatal to share clients, where NOT_COORDINATOR sends them on.
        refused = self._not_coordinated(group_id, member_id, member_epoch)
        if refused is not None:
            return refused
        group = self.coordinator.groups.get(group_id)
        before = (group.group_epoch, group.assignment_epoch) if group is not None else None
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
        left = [member_id] if result.member_epoch == -1 else []
        if initialized or (group.group_epoch, group.assignment_epoch) != before or left \
                or self._member_changed(group_id, member_id):
            try:
                await self.save(group_id, members=[member_id], left=left)
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
        done: dict[uuid.UUID, set[int]] = {}
        failed: dict[uuid.UUID, set[int]] = {}
        mine: list[tuple[uuid.UUID, int]] = []

        def fail(tid: uuid.UUID, p: int, exc: Exception) -> None:
            failed.setdefault(tid, set()).add(p)
            _backend_failures.log(
                "initialize", logging.WARNING, "group=%.100s: initializing share-partition %s-%d failed "
                "(retried at a later heartbeat): %s", group_id, names.get(tid, tid), p, exc)

        for tid, ps in parts.items():
            for p in sorted(ps):
                if tid not in names:
                    fail(tid, p, BackendError(int(ErrorCode.unknown_topic_or_partition),
                                              f"topic {tid} is not known to the backend any more"))
                elif self.partitions.leads(tid, p):
                    mine.append((tid, p))
                else:
                    # a cluster of sidecars: another sidecar leads it and initializes it at its
                    # first fetch (its state partition is not ours to write)
                    done.setdefault(tid, set()).add(p)
        try:
            if mine:
                try:
                    outcome: dict[tuple[uuid.UUID, int], PersistError | None] = \
                        await self.partitions.initialize_many(group_id, mine)
                except PersistError as exc:
                    outcome = {tp: exc for tp in mine}
                for (tid, p), err in outcome.items():
                    if err is None:
                        done.setdefault(tid, set()).add(p)
                    else:
                        fail(tid, p, err)
        finally:
            # Whatever happened (a cancelled heartbeat included), nothing stays "initializing".
            self.coordinator.initialized(group_id, done)
            left = {tid: set(ps) - done.get(tid, set()) for tid, ps in parts.items()}
            self.coordinator.initialization_failed(group_id, {t: ps for t, ps in left.items() if ps})
        return bool(done)

    def _member_changed(self, group_id: str, member_id: str) -> bool:
        """Whether the member's record would differ from the stored one (cheap: what a heartbeat
        that moved no group epoch may have changed is that member alone)."""
        group = self.coordinator.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return False
        return persisted.member_record(group, member) != self.persister.get_member(group_id, member_id)

    async def save(self, group_id: str, *, members: Iterable[str] = (), left: Iterable[str] = ()) -> None:
        """Write what changed of the group: its record, and the records of ``members`` (of every
        member when the group record changed: a new epoch or target assignment touches them all);
        tombstones for the members that ``left``. Unchanged records are not written. A member record
        that stays behind (its tombstone failed) is restored with the group and expires like any
        member that does not heartbeat."""
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return
        record = persisted.group_record(self.coordinator, group)
        check = group.members if record != self.persister.get_group(group_id) else \
            [m for m in members if m in group.members]
        changes: dict[str, MemberRecord | None] = {}
        for member_id in check:
            new = persisted.member_record(group, group.members[member_id])
            if new != self.persister.get_member(group_id, member_id):
                changes[member_id] = new
        for member_id in left:
            if member_id not in group.members and self.persister.get_member(group_id, member_id) is not None:
                changes[member_id] = None
        await self.persister.put_group(record, members=changes)

    # -- administration (used by group/admin.py) -------------------------------------------
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

    async def expire_members(self) -> list[tuple[str, str]]:
        """Remove members whose session timed out, and persist it (tombstones, the group's new
        epoch). A failed write is logged: the group is written again at its next change."""
        gone = self.coordinator.expire_members()
        by_group: dict[str, list[str]] = {}
        for group_id, member_id in gone:
            log.info("member session timed out: group=%s member=%s", group_id, member_id)
            by_group.setdefault(group_id, []).append(member_id)
        for group_id, members in by_group.items():
            if self.coordinates(group_id) != ErrorCode.none:
                continue
            try:
                await self.save(group_id, left=members)
            except PersistError as exc:
                log.warning("group=%s: persisting the expiry of %d members failed: %s", group_id, len(members), exc)
        return gone
