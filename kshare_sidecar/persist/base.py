"""The persister: its parts composed, the lifecycle, and the :class:`Persister` methods.

A persister is a :class:`~kshare_sidecar.persist.store.StateStore` (the backend: the memory log,
or the compacted topic with the writer of its ``state.write.mode``) and five parts over it, each
with one job, built here once and handed what they use:

* :class:`~kshare_sidecar.persist.view.StateView`: the in-memory view (entities, placement, flags);
* :class:`~kshare_sidecar.persist.writer.CoalescingWriter`: one queue and writer task per state
  partition, one backend commit per batch of requests, answers only after the commit;
* :class:`~kshare_sidecar.persist.replay.Replay`: reading the store back (recovery, one partition);
* :class:`~kshare_sidecar.persist.ownership.Ownership`: owner epochs, takeover, what happens after a
  failed, unconfirmed or fenced commit, supersession;
* :class:`~kshare_sidecar.persist.cluster.ClusterOwnership`: acquire / release of single state
  partitions in a cluster of sidecars;
* :class:`~kshare_sidecar.persist.layout.Layout`: moving an older layout's records home.

Decisions (fencing, validation) live in :mod:`kshare_sidecar.persist.fencing`, so the memory
persister and the compacted-topic persister behave identically. Each method below is a fencing
decision queued on the writer. What code outside persist/ reads of the parts (listeners, owned
partitions, counters) it reads here, by the names the :class:`Persister` protocol declares.

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
from kshare_sidecar.persist.cluster import ClusterOwnership
from kshare_sidecar.persist.codec import KIND_GROUP, KIND_MEMBER, KIND_PARTITION, KIND_TOPIC_ID
from kshare_sidecar.persist.errors import NotReadyError, PersisterClosedError, PersistError, UnknownSharePartitionError
from kshare_sidecar.persist.fencing import UNCHANGED
from kshare_sidecar.persist.layout import Layout
from kshare_sidecar.persist.placement import LAYOUT, EntityKey
from kshare_sidecar.persist.model import PartitionState, SharePartitionKey
from kshare_sidecar.persist.ops import Decision, Record, ReplaySink
from kshare_sidecar.persist.ownership import Ownership
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
from kshare_sidecar.persist.replay import Replay
from kshare_sidecar.persist.store import StateStore
from kshare_sidecar.persist.view import StateView
from kshare_sidecar.persist.writer import CoalescingWriter

__all__ = ["BasePersister", "Record", "ReplaySink"]

log = logging.getLogger("kshare_sidecar.persist")


class _Part:
    """An attribute of one of the persister's parts, read (and, ``writable``, set) under the same name
    on the persister: the names code outside persist/ has always used."""

    def __init__(self, part: str, attr: str | None = None, *, writable: bool = False) -> None:
        self.part, self.attr, self.writable = part, attr, writable

    def __set_name__(self, owner: type, name: str) -> None:
        self.attr = self.attr or name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self.part), self.attr or "")

    def __set__(self, obj: Any, value: Any) -> None:
        if not self.writable:
            raise AttributeError(f"{self.attr} is read-only here; it belongs to the persister's {self.part}")
        setattr(getattr(obj, self.part), self.attr or "", value)


class BasePersister:
    """Shared implementation of the :class:`~kshare_sidecar.persist.protocol.Persister` protocol over
    a :class:`~kshare_sidecar.persist.store.StateStore`."""

    name = "base"

    def __init__(self, store: StateStore, *, linger_ms: float = 0.0, max_batch: int = 10_000,
                 placement: str = LAYOUT) -> None:
        self.store = store
        self.view = StateView(self.name, store, placement)
        self.writer = CoalescingWriter(self.view, store, linger_ms=linger_ms, max_batch=max_batch)
        self.replay = Replay(self.view, store)
        self.ownership = Ownership(view=self.view, store=store, writer=self.writer, replay=self.replay)
        self.writer.on_commit_failed = self.ownership.block
        self.layout = Layout(view=self.view, store=store, replay=self.replay, ownership=self.ownership,
                             max_batch=max_batch, twin=self.single_twin)
        self.cluster_part = ClusterOwnership(view=self.view, store=store, writer=self.writer,
                                             ownership=self.ownership, replay=self.replay, layout=self.layout)
        self.ownership.cluster = self.cluster_part
        self._started = False

    # ------------------------------------------------------------------ the parts, by name
    topic = _Part("store")
    transactional_id_prefix = _Part("store")
    replay_rule = _Part("store")
    partitions = _Part("view")
    placement = _Part("view")
    recovery_stats = _Part("replay")
    commits = _Part("writer")
    records_written = _Part("writer")
    bytes_written = _Part("writer")
    blocked = _Part("writer")
    owner_epoch = _Part("ownership")
    fenced_partitions = _Part("ownership")
    superseded = _Part("ownership")
    reloads = _Part("ownership")
    takeovers = _Part("ownership")
    reload_listeners = _Part("ownership")
    superseded_listeners = _Part("ownership")
    takeover_grace_s = _Part("ownership", writable=True)
    cluster = _Part("cluster_part", "enabled")
    owned = _Part("cluster_part")
    node_id = _Part("cluster_part")
    lease = _Part("cluster_part", writable=True)
    handovers = _Part("cluster_part")
    acquired_listeners = _Part("cluster_part")
    released_listeners = _Part("cluster_part")
    handover_hooks = _Part("cluster_part")
    layout_known = _Part("layout", "known")

    def home(self, key: EntityKey) -> int:
        """The state partition holding entity ``key`` (``(kind, identity)``)."""
        return self.view.home(key)

    def drop_connections(self) -> int:
        """Close the state writers' backend connections (backend/health.py): a lapsed cluster member's
        writes in flight fail now, and its next takeover connects afresh."""
        return self.store.drop_connections()

    def single_twin(self) -> BasePersister:
        """A persister like this one, on the same backend and topic, that owns every state partition
        when started (not a cluster member): what moves another layout's records home for a cluster
        (persist/layout.py)."""
        return BasePersister(self.store.single_twin(), linger_ms=self.writer.linger_ms,
                             max_batch=self.writer.max_batch)

    # ------------------------------------------------------------------- cluster of sidecars
    def enable_cluster(self, node_id: int | None = None) -> None:
        """Before ``start()``: own nothing until assigned (persist/cluster.py)."""
        self.cluster_part.enable(node_id)

    def owns(self, p: int) -> bool:
        return self.cluster_part.owns(p)

    def epoch_of(self, p: int) -> int | None:
        return self.cluster_part.epoch_of(p)

    async def acquire(self, p: int) -> int:
        return await self.cluster_part.acquire(p)

    async def release(self, p: int) -> None:
        await self.cluster_part.release(p)

    def abandon(self, p: int) -> None:
        self.cluster_part.abandon(p)

    def lose(self, p: int, newer: int) -> None:
        self.cluster_part.lose(p, newer)

    def drop_all(self, reason: str) -> list[int]:
        return self.cluster_part.drop_all(reason)

    # ---------------------------------------------------------------------------- lifecycle
    @property
    def ready(self) -> bool:
        """True once recovery finished and until close(); callers answer
        COORDINATOR_LOAD_IN_PROGRESS while it is False."""
        return self.view.ready and not self.view.closed

    async def start(self) -> None:
        """Open the backend, replay it to its end, then start serving (idempotent)."""
        if self._started:
            return
        if self.view.closed:
            raise PersisterClosedError(f"{self.name} persister is closed")
        self._started = True
        await self.store.open(cluster=self.cluster)
        if self.cluster:  # nothing is owned until the sidecars' group assigns it (persist/cluster.py)
            await self.layout.ensure_cluster_layout()  # the whole topic in the current layout
            self.writer.start(blocked="unowned")
            self.view.ready = True
            self.store.serving(self)
            return
        await self.recover()
        await self.ownership.take_ownership()
        if self.store.replay_rule == "owner":
            # Writers are not fenced by the backend: a record may have landed between the replay
            # and our owner records. Read on up to them, so that this view is exactly what any
            # later replay accepts (after them, an older owner's records are ignored). Read on
            # from where the replay ended, not from the beginning again: the replay is a fold over
            # the records in order, so going on from its state gives what a second full replay
            # gave, at the cost of the records written since (start-up read 100,000 share-
            # partitions' records twice).
            await self.recover(resume=True)
        await self.layout.move_home()  # records of an older layout go home (persist/layout.py)
        self.writer.start()
        self.view.ready = True
        if self.recovery_stats.stale_keys:
            await self.rewrite_current(self.recovery_stats.stale_keys)
        self.store.serving(self)

    async def recover(self, *, resume: bool = False) -> RecoveryStats:
        """Rebuild the in-memory view by replaying the backend to its end (persist/replay.py)."""
        was_ready, self.view.ready = self.view.ready, False
        stats, owners = await self.replay.recover(resume=resume)
        self.ownership.owner_epochs = owners
        self.view.ready = was_ready or self._started
        return stats

    async def replay_view(self, partitions: Sequence[int] | None = None) -> dict[EntityKey, Any]:
        """Every entity of ``partitions`` (all when None) as recovery would restore it, without
        starting (`kshare state migrate-to-native`)."""
        return await self.replay.view_of(partitions)

    async def scan_layout(self, partitions: Sequence[int] | None = None) -> RecoveryStats:
        """Layout and misplaced records of ``partitions`` (all by default), without starting."""
        return await self.layout.scan(partitions)

    async def rewrite_current(self, keys: Iterable[EntityKey]) -> None:
        """Write this owner's view of ``keys`` again, at its own owner epoch: where a stale record
        (an older owner's late write) is the newest of its key, compaction would otherwise keep it
        and drop the record the replay accepted. Best effort: a failure is logged and the key is
        rewritten by its next ordinary write."""
        futures: list[asyncio.Future[Any]] = []
        own = self.ownership.owner_epoch
        for kind, ident in keys:
            def fn(cur: Any, _own: int | None = own, _kind: str = kind) -> tuple[None, Any]:
                if cur is None:  # a group's or member's key only a superseded owner wrote: a tombstone
                    return None, (None if _kind in (KIND_GROUP, KIND_MEMBER) else UNCHANGED)
                if isinstance(cur, StoredPartition) and _own is not None and cur.state.leader_epoch < _own:
                    cur = dataclasses.replace(cur, state=dataclasses.replace(cur.state, leader_epoch=_own))
                elif isinstance(cur, (GroupRecord, MemberRecord)) and _own is not None and cur.owner_epoch < _own:
                    cur = dataclasses.replace(cur, owner_epoch=_own)
                return None, cur
            futures.append(self.writer.enqueue(kind, ident, fn))
        for res in await asyncio.gather(*futures, return_exceptions=True):
            if isinstance(res, BaseException):
                log.warning("%s persister: rewriting a key after a stale record failed: %r", self.name, res)
        log.info("%s persister rewrote %d keys whose newest record was stale", self.name, len(futures))

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Until recovery finished; NotReadyError after ``timeout`` s, PersisterClosedError if closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready:
            if self.view.closed:
                raise PersisterClosedError(f"{self.name} persister is closed")
            if deadline is not None and time.monotonic() > deadline:
                raise NotReadyError(f"{self.name} persister not ready after {timeout}s")
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        """Finish queued writes, stop the writers and release the backend (idempotent)."""
        if self.view.closed:
            return
        self.view.closed = True
        self.view.ready = False
        resolvers = self.ownership.resolvers
        for task in resolvers.values():
            task.cancel()
        await asyncio.gather(*resolvers.values(), return_exceptions=True)
        await self.writer.stop()
        await self.store.close()

    # ---------------------------------------------------------------- share-partition state
    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int = UNSET_OFFSET) -> PartitionState:
        """InitializeShareGroupState for one share-partition; returns the resulting state."""
        return await self.writer.enqueue(KIND_PARTITION, key,
                                   lambda cur: fencing.initialize(key, cur, state_epoch, start_offset))

    async def _apply_each(self, ops: list[tuple[SharePartitionKey, Decision]]
                          ) -> dict[SharePartitionKey, PersistError | None]:
        """Enqueue one fencing decision per share-partition; per-key outcome (None = success)."""
        futures = [self.writer.enqueue(KIND_PARTITION, key, fn) for key, fn in ops]
        res = await self.writer.gather([key for key, _ in ops], futures)
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
        self.view.check_serving()
        if leader_epoch is None:
            out: dict[SharePartitionKey, PartitionState | PersistError] = {}
            for key in keys:
                stored = self.view.entities.get((KIND_PARTITION, key))
                out[key] = stored.state if stored is not None else UnknownSharePartitionError(
                    f"no state for share-partition {key.group_id}/{key.topic_id}/{key.partition}")
            return out
        futures = [self.writer.enqueue(KIND_PARTITION, k, _decision(fencing.claim, k, leader_epoch)) for k in keys]
        return await self.writer.gather(keys, futures)

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
        await self.writer.enqueue(KIND_PARTITION, key, lambda cur: fencing.write(key, cur, state, writer_epoch))

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
        self.view.check_serving()
        found = [ident for (kind, ident) in self.view.entities
                 if kind == KIND_PARTITION and (group_id is None or ident.group_id == group_id)]
        return sorted(found, key=lambda k: (k.group_id, k.topic_id, k.partition))

    def stored(self, key: SharePartitionKey) -> StoredPartition | None:
        """The stored entity including the assignment epoch (introspection, tests)."""
        return self.view.entities.get((KIND_PARTITION, key))

    # --------------------------------------------------------------------------- groups
    async def put_group(self, record: GroupRecord, *,
                        members: Mapping[str, MemberRecord | None] | None = None) -> None:
        """Create or replace a group record and, with ``members``, member records (None: a
        tombstone). All are on the group's state partition and queued together, so they are
        normally committed in one batch; unchanged ones are not written."""
        p = self.view.home((KIND_GROUP, record.group_id))  # the members' records are placed with it
        futures = [self.writer.enqueue(KIND_GROUP, record.group_id, self._stamped(record, p))]
        for member_id, member in (members or {}).items():
            futures.append(self.writer.enqueue(KIND_MEMBER, (record.group_id, member_id), self._stamped(member, p)))
        res = await self.writer.gather(list(range(len(futures))), futures)
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
            own = self.ownership.own_epoch(p)
            return None, entity if entity is None or own == NO_EPOCH else \
                dataclasses.replace(entity, owner_epoch=own)
        return fn

    def get_member(self, group_id: str, member_id: str) -> MemberRecord | None:
        """A member's record (None: none stored)."""
        self.view.check_serving()
        return self.view.entities.get((KIND_MEMBER, (group_id, member_id)))

    def list_members(self, group_id: str | None = None) -> dict[str, dict[str, MemberRecord]]:
        """Member records by group id and member id (of one group, or of all)."""
        self.view.check_serving()
        out: dict[str, dict[str, MemberRecord]] = {}
        for (kind, ident), ent in self.view.entities.items():
            if kind == KIND_MEMBER and (group_id is None or ident[0] == group_id):
                out.setdefault(ident[0], {})[ident[1]] = ent
        return out

    def get_group(self, group_id: str) -> GroupRecord | None:
        """The group's record (None: no such group)."""
        self.view.check_serving()
        return self.view.entities.get((KIND_GROUP, group_id))

    def list_groups(self) -> dict[str, GroupRecord]:
        """Every group record, by group id."""
        self.view.check_serving()
        return {ident: ent for (kind, ident), ent in self.view.entities.items() if kind == KIND_GROUP}

    async def delete_group(self, group_id: str, *, with_state: bool = True) -> None:
        """Tombstone the group record, its member records and, by default, every share-partition
        state of the group."""
        keys = self.keys(group_id) if with_state else []
        futures = [self.writer.enqueue(KIND_PARTITION, k, _decision(fencing.delete, k)) for k in keys]
        for member_id in self.list_members(group_id).get(group_id, {}):
            futures.append(self.writer.enqueue(KIND_MEMBER, (group_id, member_id), _replace_with(None)))
        futures.append(self.writer.enqueue(KIND_GROUP, group_id, lambda cur: (None, UNCHANGED if cur is None else None)))
        res = await self.writer.gather(list(range(len(futures))), futures)
        errors = [e for e in res.values() if isinstance(e, PersistError)]
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------------ topic ids
    async def topic_id(self, topic_name: str, *, create: bool = True) -> str | None:
        """The stable UUID of ``topic_name``; minted and persisted on first use when ``create``."""
        self.view.check_serving()
        existing = self.view.entities.get((KIND_TOPIC_ID, topic_name))
        if existing is not None or not create:
            return existing

        def fn(cur: str | None) -> tuple[str, Any]:
            if cur is not None:
                return cur, UNCHANGED
            minted = str(uuid.uuid4())
            return minted, minted
        return await self.writer.enqueue(KIND_TOPIC_ID, topic_name, fn)

    async def set_topic_id(self, topic_name: str, topic_id: str) -> None:
        """Record the backend's own id for a topic (or a new id after the topic was re-created)."""
        str(uuid.UUID(topic_id))  # validate
        await self.writer.enqueue(KIND_TOPIC_ID, topic_name,
                            lambda cur: (None, UNCHANGED if cur == topic_id else topic_id))

    async def delete_topic_id(self, topic_name: str) -> None:
        """Forget a topic's id (the topic was deleted)."""
        await self.writer.enqueue(KIND_TOPIC_ID, topic_name, lambda cur: (None, UNCHANGED if cur is None else None))

    def topic_ids(self) -> dict[str, str]:
        """topic name -> topic id, for every topic in the map."""
        self.view.check_serving()
        return {ident: ent for (kind, ident), ent in self.view.entities.items() if kind == KIND_TOPIC_ID}

    def topic_names(self) -> Mapping[str, str]:
        """topic id -> topic name (reverse map)."""
        return {v: k for k, v in self.topic_ids().items()}


def _replace_with(entity: Any) -> Decision:
    """Write ``entity`` (None: a tombstone) unless it is what is stored."""
    return lambda cur: (None, UNCHANGED if cur == entity else entity)


def _decision(rule: Callable[..., tuple[Any, Any]], key: SharePartitionKey, *args: Any) -> Decision:
    """``rule(key, current, *args)`` as a writer decision on ``current`` (the fencing.py rules
    take the key first, then the stored entity)."""
    return lambda cur: rule(key, cur, *args)
