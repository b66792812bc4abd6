"""The engine every built-in persister shares: in-memory view, fencing, coalesced writes, replay.

A concrete persister supplies only its backend: ``_open`` (connect, fence older writers),
``_replay`` (feed every stored record of some or all partitions to a sink, up to the end of
the log), ``_commit`` (durably write a list of ``(key, value)`` records to one state
partition, atomically), ``_settle`` (wait until an unconfirmed commit is resolved one way or
the other), ``_reopen`` (take one partition over again: fence every other writer) and
``_close``. Decisions (fencing, validation) live in :mod:`kshare_sidecar.persist.fencing`, so
the memory persister and the compacted-topic persister behave identically.

Writes go through the coalescing writer (:mod:`kshare_sidecar.persist.writer`, mixed in): one
queue and writer task per state partition, one backend commit per batch of requests, answers only
after the commit. This module is the lifecycle (start, recovery, close) and the
:class:`~kshare_sidecar.persist.protocol.Persister` methods, each a fencing decision queued there.

Takeover and fencing (see docs/persistence.md): ``start()`` opens every partition's writer
(fencing older ones), replays, then takes an **owner epoch** one above every epoch the state
topic holds and commits it as an owner record on every partition. A commit that fails is never
taken as a certain failure: the partition is blocked, the truth is read back from the backend
and the in-memory view replaced by it (listeners learn which share-partitions changed) before
it takes writes again. A writer that was fenced re-reads ownership: if a newer owner record
exists it is *superseded* and stops for good; otherwise it takes its partition over again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kshare_sidecar.persist import fencing
from kshare_sidecar.persist.cluster import ClusterOwnershipMixin
from kshare_sidecar.persist.codec import KIND_GROUP, KIND_MEMBER, KIND_PARTITION, KIND_TOPIC_ID
from kshare_sidecar.persist.errors import (
    NotReadyError,
    PersisterClosedError,
    PersistError,
    UnknownSharePartitionError,
)
from kshare_sidecar.persist.fencing import UNCHANGED
from kshare_sidecar.persist.layout import LayoutMixin
from kshare_sidecar.persist.model import PartitionState, SharePartitionKey
from kshare_sidecar.persist.ownership import EntityKey, OwnershipMixin, ReplaySink
from kshare_sidecar.persist.records import (
    NO_EPOCH,
    UNSET_OFFSET,
    GroupRecord,
    InitializeItem,
    MemberRecord,
    RecoveryStats,
    StateSummary,
    StoredPartition,
    WriteItem,
    summarize,
)
from kshare_sidecar.persist.writer import CoalescingWriter, Decision, Record

__all__ = ["BasePersister", "Record", "ReplaySink"]

log = logging.getLogger("kshare_sidecar.persist")


class BasePersister(ClusterOwnershipMixin, LayoutMixin, OwnershipMixin, CoalescingWriter):
    """Shared implementation of the :class:`~kshare_sidecar.persist.protocol.Persister` protocol."""

    name = "base"
    #: the replay's stale-record rule (:data:`~kshare_sidecar.persist.ownership.RULES`): "owner"
    #: where the backend does not fence writers (non-transactional writes)
    replay_rule = "key"

    def __init__(self, *, partitions: int = 1, linger_ms: float = 0.0, max_batch: int = 10_000) -> None:
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        self.partitions = partitions
        self.linger_ms = linger_ms
        self.max_batch = max_batch
        self._entities: dict[EntityKey, Any] = {}
        self._ready = False
        self._closed = False
        self._started = False
        self._init_writers()  # queues and writer tasks per state partition (persist/writer.py)
        self.fenced_partitions: set[int] = set()
        self.recovery_stats = RecoveryStats()
        self.commits = 0  # backend commits made (observability / tests)
        #: This instance's owner epoch, taken from the backend at start (None before).
        self.owner_epoch: int | None = None
        self._owner_epochs: dict[int, int] = {}  # newest owner record per state partition
        #: partition -> why it takes no writes now ("unknown" outcome, "fenced", "superseded")
        self.blocked: dict[int, str] = {}
        self.superseded = False
        self.reloads = 0  # partitions re-read after an unconfirmed or fenced commit
        self.takeovers = 0  # partitions taken over again after a fencing by a non-owner
        self.reload_listeners: list[Callable[[set[SharePartitionKey]], None]] = []
        self.superseded_listeners: list[Callable[[str], None]] = []
        self._resolvers: dict[int, asyncio.Task[None]] = {}
        #: how long a fenced writer that is still the newest owner waits before taking its
        #: partition back (a starting sidecar fences first and records its epoch just after)
        self.takeover_grace_s = 0.0
        self._init_cluster()  # placement and per-partition ownership (persist/cluster.py)
        self._recovered_state: dict[int, int] | None = None  # see recover()
        self._recovered_to: Mapping[int, int] | None = None

    # ------------------------------------------------------------------------------ backend
    async def _open(self) -> None:
        """Connect; make sure the storage exists; fence older writers."""

    async def _replay(self, sink: ReplaySink, partitions: Sequence[int] | None = None, *,
                      start: Mapping[int, int] | None = None) -> None:
        """Call ``sink(partition, offset, key, value)`` for every stored record of ``partitions``
        (all when None), up to the end (the last stable offset: committed records only);
        ``start``: from these offsets on instead of each partition's beginning (only passed
        when :meth:`_replay_positions` gave them)."""
        raise NotImplementedError

    def _replay_positions(self) -> Mapping[int, int] | None:
        """Where the last full replay ended on each partition, if the backend can resume a replay
        from there (None: :meth:`recover` always replays everything)."""
        return None

    async def _commit(self, partition: int, records: list[Record]) -> None:
        """Durably and atomically write ``records`` to ``partition``. Raise WriterFencedError
        when the backend has fenced this writer, CommitOutcomeUnknownError when the outcome is
        not known; any other exception is treated as unknown too."""
        raise NotImplementedError

    async def _settle(self, partition: int) -> bool:
        """Wait until the last commit on ``partition`` is resolved (committed or aborted) without
        re-initialising the writer. False when the writer is unusable (fenced, fatal error)."""
        return True

    async def _await_stable(self, partition: int) -> None:
        """Wait until every record written to ``partition`` so far is committed or aborted for
        readers (last stable offset at the high watermark seen now)."""

    async def _reopen(self, partition: int) -> None:
        """Take ``partition`` over again: a new writer, fencing every other one. Only called once
        the backend says this instance is still the newest owner."""

    async def _close(self) -> None:
        """Release backend resources."""

    def _single_twin(self) -> BasePersister:
        """A persister like this one, on the same backend and topic, that owns every state partition
        when started (not a cluster member): what moves another layout's records home for a cluster
        (persist/layout.py)."""
        raise NotImplementedError(f"the {self.name} persister cannot move state records for a cluster")

    # ---------------------------------------------------------------------------- lifecycle
    @property
    def ready(self) -> bool:
        """True once recovery finished and until close(); callers answer
        COORDINATOR_LOAD_IN_PROGRESS while it is False."""
        return self._ready and not self._closed

    async def start(self) -> None:
        """Open the backend, replay it to its end, then start serving (idempotent)."""
        if self._started:
            return
        if self._closed:
            raise PersisterClosedError(f"{self.name} persister is closed")
        self._started = True
        await self._open()
        if self.cluster:  # nothing is owned until the sidecars' group assigns it (persist/cluster.py)
            await self._ensure_cluster_layout()  # the whole topic in the current layout (persist/layout.py)
            self._start_writers(blocked="unowned")
            self._ready = True
            return
        await self.recover()
        await self._take_ownership()
        if self.replay_rule == "owner":
            # Writers are not fenced by the backend: a record may have landed between the replay
            # and our owner records. Read on up to them, so that this view is exactly what any
            # later replay accepts (after them, an older owner's records are ignored). Read on
            # from where the replay ended, not from the beginning again: the replay is a fold over
            # the records in order, so going on from its state gives what a second full replay
            # gave, at the cost of the records written since (start-up read 100,000 share-
            # partitions' records twice).
            owner_epoch = self.owner_epoch
            await self.recover(resume=True)
            self.owner_epoch = owner_epoch
        await self._move_home()  # records of an older layout go home (persist/layout.py)
        self._start_writers()
        self._ready = True
        if self.recovery_stats.stale_keys:
            await self.rewrite_current(self.recovery_stats.stale_keys)

    async def rewrite_current(self, keys: Iterable[EntityKey]) -> None:
        """Write this owner's view of ``keys`` again, at its own owner epoch: where a stale record
        (an older owner's late write) is the newest of its key, compaction would otherwise keep it
        and drop the record the replay accepted. Best effort: a failure is logged and the key is
        rewritten by its next ordinary write."""
        futures: list[asyncio.Future[Any]] = []
        own = self.owner_epoch
        for kind, ident in keys:
            def fn(cur: Any, _own: int | None = own, _kind: str = kind) -> tuple[None, Any]:
                if cur is None:  # a group's or member's key only a superseded owner wrote: a tombstone
                    return None, (None if _kind in (KIND_GROUP, KIND_MEMBER) else UNCHANGED)
                if isinstance(cur, StoredPartition) and _own is not None and cur.state.leader_epoch < _own:
                    cur = dataclasses.replace(cur, state=dataclasses.replace(cur.state, leader_epoch=_own))
                elif isinstance(cur, (GroupRecord, MemberRecord)) and _own is not None and cur.owner_epoch < _own:
                    cur = dataclasses.replace(cur, owner_epoch=_own)
                return None, cur
            futures.append(self._enqueue(kind, ident, fn))
        for res in await asyncio.gather(*futures, return_exceptions=True):
            if isinstance(res, BaseException):
                log.warning("%s persister: rewriting a key after a stale record failed: %r", self.name, res)
        log.info("%s persister rewrote %d keys whose newest record was stale", self.name, len(futures))

    async def recover(self, *, resume: bool = False) -> RecoveryStats:
        """Rebuild the in-memory view by replaying the backend to its end. ``resume``: go on from
        where the last full replay ended, with its view (when the backend can, and nothing else
        read a partition since; otherwise a full replay)."""
        was_ready, self._ready = self._ready, False
        stats = RecoveryStats()
        entities: dict[EntityKey, Any] = {}
        owners: dict[int, int] = {}
        started = time.perf_counter()
        positions = self._replay_positions() if resume else None
        recovered = self._recovered_state
        resumable = resume and positions is not None and positions == self._recovered_to and recovered is not None
        if resumable and recovered is not None:
            entities, stats, owners = dict(self._entities), _copy_stats(self.recovery_stats), dict(recovered)
            stats.share_partitions = stats.groups = stats.members = stats.topic_ids = 0
            await self._replay(self._sink(entities, stats, owners), start=positions)
        else:
            await self._replay(self._sink(entities, stats, owners))
        #: the replay's own owner records (before this instance adds its own) and where it ended:
        #: what a resumed replay goes on from
        self._recovered_state = dict(owners)
        self._recovered_to = self._replay_positions()
        self._entities = entities
        self._owner_epochs = owners
        for kind, _ in entities:
            if kind == KIND_PARTITION:
                stats.share_partitions += 1
            elif kind == KIND_GROUP:
                stats.groups += 1
            elif kind == KIND_MEMBER:
                stats.members += 1
            else:
                stats.topic_ids += 1
        stats.seconds = (stats.seconds if resumable else 0.0) + time.perf_counter() - started
        self.recovery_stats = stats
        log.info("%s persister recovered %d records (%d share-partitions, %d groups, %d members, %d topic ids, "
                 "%d skipped, %d stale ignored, %d in an older layout, newest owner epoch %d) in %.3fs", self.name,
                 stats.records, stats.share_partitions, stats.groups, stats.members, stats.topic_ids,
                 stats.skipped_count, stats.stale_ignored, len(stats.misplaced), stats.owner_epoch, stats.seconds)
        self._ready = was_ready or self._started
        return stats

    async def replay_view(self, partitions: Sequence[int] | None = None) -> dict[EntityKey, Any]:
        """Every entity of ``partitions`` (all when None) as recovery would restore it, without
        starting: nothing is taken over or written, so a sidecar serving the topic is undisturbed
        (what `kshare state migrate-to-native` reads; the view a start-up would recover)."""
        entities: dict[EntityKey, Any] = {}
        await self._replay(self._sink(entities, RecoveryStats(), {}), partitions)
        return entities

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Until recovery finished; NotReadyError after ``timeout`` s, PersisterClosedError if closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready:
            if self._closed:
                raise PersisterClosedError(f"{self.name} persister is closed")
            if deadline is not None and time.monotonic() > deadline:
                raise NotReadyError(f"{self.name} persister not ready after {timeout}s")
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        """Finish queued writes, stop the writers and release the backend (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._ready = False
        for task in self._resolvers.values():
            task.cancel()
        await asyncio.gather(*self._resolvers.values(), return_exceptions=True)
        await self._stop_writers()
        await self._close()

    # ---------------------------------------------------------------- share-partition state
    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int = UNSET_OFFSET) -> PartitionState:
        """InitializeShareGroupState for one share-partition; returns the resulting state."""
        return await self._enqueue(KIND_PARTITION, key,
                                   lambda cur: fencing.initialize(key, cur, state_epoch, start_offset))

    async def _apply_each(self, ops: list[tuple[SharePartitionKey, Decision]]
                          ) -> dict[SharePartitionKey, PersistError | None]:
        """Enqueue one fencing decision per share-partition; per-key outcome (None = success)."""
        futures = [self._enqueue(KIND_PARTITION, key, fn) for key, fn in ops]
        res = await self._gather([key for key, _ in ops], futures)
        return {k: (v if isinstance(v, PersistError) else None) for k, v in res.items()}

    async def initialize_many(self, items: Iterable[InitializeItem]) -> dict[SharePartitionKey, PersistError | None]:
        """InitializeShareGroupState for many share-partitions, coalesced; per-key outcome."""
        return await self._apply_each([
            (it.key, _decision(fencing.initialize, it.key, it.state_epoch, it.start_offset)) for it in items])

    async def read(self, keys: Iterable[SharePartitionKey], *,
                   leader_epoch: int | None = None) -> dict[SharePartitionKey, PartitionState | PersistError]:
        """ReadShareGroupState. With ``leader_epoch`` the reader claims the share-partitions as
        their new owner (a lower epoch than the current one is FENCED_LEADER_EPOCH)."""
        keys = list(keys)
        self._check_serving()
        if leader_epoch is None:
            out: dict[SharePartitionKey, PartitionState | PersistError] = {}
            for key in keys:
                stored = self._entities.get((KIND_PARTITION, key))
                out[key] = stored.state if stored is not None else UnknownSharePartitionError(
                    f"no state for share-partition {key.group_id}/{key.topic_id}/{key.partition}")
            return out
        futures = [self._enqueue(KIND_PARTITION, k, _decision(fencing.claim, k, leader_epoch)) for k in keys]
        return await self._gather(keys, futures)

    async def read_one(self, key: SharePartitionKey, *, leader_epoch: int | None = None) -> PartitionState:
        """read() for one key, raising its PersistError."""
        result = (await self.read([key], leader_epoch=leader_epoch))[key]
        if isinstance(result, PersistError):
            raise result
        return result

    async def advance_epoch(self, keys: Iterable[SharePartitionKey], epoch: int) -> dict[SharePartitionKey, PersistError | None]:
        """The owner's epoch moved on without a change of owner: raise the current epoch only."""
        return await self._apply_each([(k, _decision(fencing.advance, k, epoch)) for k in keys])

    async def write(self, key: SharePartitionKey, state: PartitionState, writer_epoch: int) -> None:
        """WriteShareGroupState: store a complete snapshot; raises FencedStateEpochError,
        FencedLeaderEpochError, UnknownSharePartitionError, WriterFencedError, ..."""
        await self._enqueue(KIND_PARTITION, key, lambda cur: fencing.write(key, cur, state, writer_epoch))

    async def write_many(self, items: Iterable[WriteItem]) -> dict[SharePartitionKey, PersistError | None]:
        """Many writes, coalesced into as few backend commits as possible; per-key outcome."""
        return await self._apply_each([
            (it.key, _decision(fencing.write, it.key, it.state, it.writer_epoch)) for it in items])

    async def delete(self, keys: Iterable[SharePartitionKey]) -> dict[SharePartitionKey, PersistError | None]:
        """DeleteShareGroupState: tombstones; deleting absent state succeeds."""
        return await self._apply_each([(k, _decision(fencing.delete, k)) for k in keys])

    async def read_summary(self, keys: Iterable[SharePartitionKey]) -> dict[SharePartitionKey, StateSummary | PersistError]:
        """ReadShareGroupStateSummary: state epoch, leader epoch, SPSO and lag inputs."""
        out: dict[SharePartitionKey, StateSummary | PersistError] = {}
        for key, res in (await self.read(keys)).items():
            out[key] = res if isinstance(res, PersistError) else summarize(res)
        return out

    def keys(self, group_id: str | None = None) -> list[SharePartitionKey]:
        """Share-partitions with state (optionally of one group), sorted."""
        self._check_serving()
        found = [ident for (kind, ident) in self._entities
                 if kind == KIND_PARTITION and (group_id is None or ident.group_id == group_id)]
        return sorted(found, key=lambda k: (k.group_id, k.topic_id, k.partition))

    def stored(self, key: SharePartitionKey) -> StoredPartition | None:
        """The stored entity including the assignment epoch (introspection, tests)."""
        return self._entities.get((KIND_PARTITION, key))

    # --------------------------------------------------------------------------- groups
    async def put_group(self, record: GroupRecord, *,
                        members: Mapping[str, MemberRecord | None] | None = None) -> None:
        """Create or replace a group record and, with ``members``, member records (None: a
        tombstone). All are on the group's state partition and queued together, so they are
        normally committed in one batch; unchanged ones are not written."""
        p = self._home((KIND_GROUP, record.group_id))  # the members' records are placed with it
        futures = [self._enqueue(KIND_GROUP, record.group_id, self._stamped(record, p))]
        for member_id, member in (members or {}).items():
            futures.append(self._enqueue(KIND_MEMBER, (record.group_id, member_id), self._stamped(member, p)))
        res = await self._gather(list(range(len(futures))), futures)
        errors = [e for e in res.values() if isinstance(e, PersistError)]
        if errors:
            raise errors[0]

    def _stamped(self, entity: GroupRecord | MemberRecord | None, p: int) -> Decision:
        """Write ``entity`` (None: a tombstone) unless it says what is stored; stamped with this
        owner's epoch of ``p`` when the batch is built, so replay's owner rule can tell a superseded
        owner's late write (docs/persistence.md, "Group members")."""
        def fn(cur: Any) -> tuple[None, Any]:
            if cur == entity:
                return None, UNCHANGED
            own = self._own_epoch(p)
            return None, entity if entity is None or own == NO_EPOCH else \
                dataclasses.replace(entity, owner_epoch=own)
        return fn

    def get_member(self, group_id: str, member_id: str) -> MemberRecord | None:
        """A member's record (None: none stored)."""
        self._check_serving()
        return self._entities.get((KIND_MEMBER, (group_id, member_id)))

    def list_members(self, group_id: str | None = None) -> dict[str, dict[str, MemberRecord]]:
        """Member records by group id and member id (of one group, or of all)."""
        self._check_serving()
        out: dict[str, dict[str, MemberRecord]] = {}
        for (kind, ident), ent in self._entities.items():
            if kind == KIND_MEMBER and (group_id is None or ident[0] == group_id):
                out.setdefault(ident[0], {})[ident[1]] = ent
        return out

    def get_group(self, group_id: str) -> GroupRecord | None:
        """The group's record (None: no such group)."""
        self._check_serving()
        return self._entities.get((KIND_GROUP, group_id))

    def list_groups(self) -> dict[str, GroupRecord]:
        """Every group record, by group id."""
        self._check_serving()
        return {ident: ent for (kind, ident), ent in self._entities.items() if kind == KIND_GROUP}

    async def delete_group(self, group_id: str, *, with_state: bool = True) -> None:
        """Tombstone the group record, its member records and, by default, every share-partition
        state of the group."""
        keys = self.keys(group_id) if with_state else []
        futures = [self._enqueue(KIND_PARTITION, k, _decision(fencing.delete, k)) for k in keys]
        for member_id in self.list_members(group_id).get(group_id, {}):
            futures.append(self._enqueue(KIND_MEMBER, (group_id, member_id), _replace_with(None)))
        futures.append(self._enqueue(KIND_GROUP, group_id, lambda cur: (None, UNCHANGED if cur is None else None)))
        res = await self._gather(list(range(len(futures))), futures)
        errors = [e for e in res.values() if isinstance(e, PersistError)]
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------------ topic ids
    async def topic_id(self, topic_name: str, *, create: bool = True) -> str | None:
        """The stable UUID of ``topic_name``; minted and persisted on first use when ``create``."""
        self._check_serving()
        existing = self._entities.get((KIND_TOPIC_ID, topic_name))
        if existing is not None or not create:
            return existing

        def fn(cur: str | None) -> tuple[str, Any]:
            if cur is not None:
                return cur, UNCHANGED
            minted = str(uuid.uuid4())
            return minted, minted
        return await self._enqueue(KIND_TOPIC_ID, topic_name, fn)

    async def set_topic_id(self, topic_name: str, topic_id: str) -> None:
        """Record the backend's own id for a topic (or a new id after the topic was re-created)."""
        str(uuid.UUID(topic_id))  # validate
        await self._enqueue(KIND_TOPIC_ID, topic_name,
                            lambda cur: (None, UNCHANGED if cur == topic_id else topic_id))

    async def delete_topic_id(self, topic_name: str) -> None:
        """Forget a topic's id (the topic was deleted)."""
        await self._enqueue(KIND_TOPIC_ID, topic_name, lambda cur: (None, UNCHANGED if cur is None else None))

    def topic_ids(self) -> dict[str, str]:
        """topic name -> topic id, for every topic in the map."""
        self._check_serving()
        return {ident: ent for (kind, ident), ent in self._entities.items() if kind == KIND_TOPIC_ID}

    def topic_names(self) -> Mapping[str, str]:
        """topic id -> topic name (reverse map)."""
        return {v: k for k, v in self.topic_ids().items()}


def _copy_stats(stats: RecoveryStats) -> RecoveryStats:
    """A recovery's stats to go on from (containers copied, not shared)."""
    return dataclasses.replace(stats, skipped=list(stats.skipped), stale_keys=set(stats.stale_keys),
                               misplaced=dict(stats.misplaced), layouts=dict(stats.layouts))


def _replace_with(entity: Any) -> Decision:
    """Write ``entity`` (None: a tombstone) unless it is what is stored."""
    return lambda cur: (None, UNCHANGED if cur == entity else entity)


def _decision(rule: Callable[..., tuple[Any, Any]], key: SharePartitionKey, *args: Any) -> Decision:
    """``rule(key, current, *args)`` as a writer decision on ``current`` (the fencing.py rules
    take the key first, then the stored entity)."""
    return lambda cur: rule(key, cur, *args)
