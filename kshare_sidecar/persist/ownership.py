"""Ownership of the state partitions: owner epochs, the replay rule, and what happens after a
commit that failed, whose outcome is unknown, or that the backend fenced.

Mixed into :class:`kshare_sidecar.persist.base.BasePersister`, whose writer engine calls
``_block`` when a commit fails; everything here only uses the engine's backend hooks
(``_commit``, ``_replay``, ``_settle``, ``_reopen``) and its in-memory view. The argument for
why this fences correctly is in docs/persistence.md ("Fencing").
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import (KIND_GROUP, KIND_LAYOUT, KIND_MEMBER, KIND_OWNER, KIND_PARTITION,
                                          CodecError)
from kshare_sidecar.persist.errors import BackendWriteError, NotReadyError, PersistError, WriterFencedError
from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.persist.records import NO_EPOCH, RecoveryStats, StoredPartition

if TYPE_CHECKING:
    from kshare_sidecar.persist.ops import Record, _Op

log = logging.getLogger("kshare_sidecar.persist")

EntityKey = tuple[str, Any]  # (kind, identity)
ReplaySink = Callable[[int, int, bytes | None, bytes | None], None]


#: How share-partition records are spread over the state partitions. ``topic-partition`` (the
#: layout of every sidecar, :data:`LAYOUT`): by topic id and partition only, so every group's state
#: of one user partition is on one state partition — a cluster of sidecars leads a user
#: partition for all groups from the sidecar that owns that state partition, as a broker does, and a
#: single sidecar's state topic serves a cluster as it is. ``key``: by the whole key (group, topic,
#: partition) — what single sidecars of older builds wrote; read only to move it (persist/layout.py).
PLACEMENTS = ("key", "topic-partition")
LAYOUT = "topic-partition"
LEGACY_LAYOUT = "key"


def state_partition_for(kind: str, ident: Any, partitions: int, placement: str = LAYOUT) -> int:
    """Stable placement of an entity on the state topic's partitions (see :data:`PLACEMENTS`).
    Group records and topic-id entries are placed by their kind and name in both layouts, a group's
    member records with its group record (its coordinator owns them all); owner and layout records
    name their partition."""
    if kind in (KIND_OWNER, KIND_LAYOUT):
        return int(ident)
    if kind == KIND_MEMBER:
        kind, ident = KIND_GROUP, ident[0]
    if kind == KIND_PARTITION:
        if placement == "key":
            text = f"{ident.group_id}:{ident.topic_id}:{ident.partition}"
        else:
            return share_partition_home(ident.topic_id, ident.partition, partitions)
    else:
        text = f"{kind}:{ident}"
    return zlib.crc32(text.encode()) % partitions


def share_partition_home(topic_id: str, partition: int, partitions: int) -> int:
    """The state partition of every share-partition of user partition ``topic_id``-``partition``
    (placement ``topic-partition``): its owner is that user partition's share-partition leader."""
    return zlib.crc32(f"{topic_id}:{partition}".encode()) % partitions


def group_home(group_id: str, partitions: int) -> int:
    """The state partition of a group's record: its owner coordinates the group."""
    return state_partition_for(KIND_GROUP, group_id, partitions)


def is_older(new: StoredPartition, seen: StoredPartition) -> bool:
    """The replay rule (seed 004 applied to recovery): a share-partition record is stale when an
    earlier-replayed record of the same key has a higher state epoch, or the same state epoch
    and a higher owner epoch. Neither decreases for a legitimate writer (an admin reset raises
    the state epoch; a new owner claims with a higher owner epoch), so such a record can only
    be a fenced zombie's late commit."""
    if new.state.state_epoch != seen.state.state_epoch:
        return new.state.state_epoch < seen.state.state_epoch
    return new.state.leader_epoch < seen.state.leader_epoch


#: The stale-record rules of replay. ``key``: a share-partition record older than one already
#: replayed for the same key is stale (enough when the backend fences writers: a superseded
#: writer's transaction cannot commit). ``owner``: also stale when its owner epoch is below an
#: owner record already replayed on the same state partition — needed when writes are not
#: transactional (``state.write.mode=idempotent``), where a zombie's plain write still lands after
#: its successor's owner record and must never be adopted.
RULES = ("key", "owner")


def replay_sink(entities: dict[EntityKey, Any], stats: RecoveryStats, owners: dict[int, int],
                rule: str = "key", placement: str | None = None, partitions: int = 0) -> ReplaySink:
    """A replay sink applying the codec, the skip rule and the stale-record rule (:data:`RULES`).

    With a ``placement``, a share-partition record (or tombstone) on a state partition other than
    its home under that placement is kept apart, in ``stats.misplaced`` (the newest per key): it
    was written in another layout and is moved by persist/layout.py, never mixed with the records
    at home (a copy already moved home wins; a tombstone left where it was deletes nothing at
    home). ``partitions``: the state topic's partition count (with a placement). Layout records go
    to ``stats.layouts``."""
    if placement is not None and partitions < 1:
        raise ValueError("a placement-aware replay needs the partition count")
    homes: dict[tuple[str, int], int] = {}  # user partition -> its state partition (LAYOUT: a crc32 each)

    def home(ident: SharePartitionKey) -> int:
        tp = (ident.topic_id, ident.partition)
        h = homes.get(tp)
        if h is None:
            h = homes[tp] = share_partition_home(ident.topic_id, ident.partition, partitions)
        return h

    def sink(partition: int, offset: int, raw_key: bytes | None, raw_value: bytes | None) -> None:
        stats.records += 1
        try:
            kind, ident, entity = codec.decode(raw_key, raw_value)
        except CodecError as exc:
            stats.skip(partition, offset, str(exc))
            log.warning("state record skipped: partition %d offset %d: %s", partition, offset, exc)
            return
        if kind == KIND_OWNER:
            if entity is not None:
                owners[partition] = max(owners.get(partition, NO_EPOCH), entity)
                stats.owner_epoch = max(stats.owner_epoch, entity)
            return
        if kind == KIND_LAYOUT:
            if entity is not None:
                stats.layouts[partition] = entity
            return
        if (kind == KIND_PARTITION and placement is not None
                and (home(ident) if placement == LAYOUT else state_partition_for(kind, ident, partitions, placement))
                != partition):
            if entity is None:
                stats.misplaced.pop(ident, None)
            elif not (rule == "owner" and NO_EPOCH < entity.state.leader_epoch < owners.get(partition, NO_EPOCH)):
                stats.misplaced[ident] = (partition, entity)
                stats.owner_epoch = max(stats.owner_epoch, entity.state.leader_epoch)
            return
        if entity is None:
            stats.tombstones += 1
            entities.pop((kind, ident), None)
            return
        if kind in (KIND_GROUP, KIND_MEMBER) and rule == "owner" \
                and NO_EPOCH < entity.owner_epoch < owners.get(partition, NO_EPOCH):
            # a group's or member's record written by a superseded coordinator (its owner epoch)
            stats.stale_ignored += 1
            stats.stale_keys.add((kind, ident))
            log.warning("stale state record ignored: partition %d offset %d: %s %s written at owner epoch %d after "
                        "owner epoch %d took the partition over", partition, offset, kind, ident,
                        entity.owner_epoch, owners[partition])
            return
        if kind in (KIND_GROUP, KIND_MEMBER):
            stats.stale_keys.discard((kind, ident))
        k = (kind, ident)
        if kind == KIND_PARTITION:
            seen = entities.get(k)
            # an initialization record carries no writer epoch yet (NO_EPOCH): the key rule judges it
            if rule == "owner" and NO_EPOCH < entity.state.leader_epoch < owners.get(partition, NO_EPOCH):
                stats.stale_ignored += 1
                stats.stale_keys.add((kind, ident))
                log.warning("stale state record ignored: partition %d offset %d: %s/%s/%d written at owner epoch %d "
                            "after owner epoch %d took the partition over", partition, offset, ident.group_id,
                            ident.topic_id, ident.partition, entity.state.leader_epoch, owners[partition])
                return
            if seen is not None and is_older(entity, seen):
                stats.stale_ignored += 1
                log.warning("stale state record ignored: partition %d offset %d: %s/%s/%d has state epoch %d "
                            "owner epoch %d, older than the replayed state epoch %d owner epoch %d",
                            partition, offset, ident.group_id, ident.topic_id, ident.partition,
                            entity.state.state_epoch, entity.state.leader_epoch, seen.state.state_epoch,
                            seen.state.leader_epoch)
                return
            stats.owner_epoch = max(stats.owner_epoch, entity.state.leader_epoch)
            if stats.stale_keys:
                stats.stale_keys.discard(k)
        entities[k] = entity
    return sink


class OwnershipMixin:
    """Takeover at start-up, blocking and resolving after failed commits, supersession."""

    # Provided by BasePersister, its writer (persist/writer.py) and the cluster mixin (declared
    # for the type checker; BasePersister.__init__ sets them).
    name: str
    partitions: int
    replay_rule: str
    placement: str
    cluster: bool
    owned: set[int]
    owner_epoch: int | None
    recovery_stats: RecoveryStats
    blocked: dict[int, str]
    fenced_partitions: set[int]
    superseded: bool
    takeover_grace_s: float
    takeovers: int
    reloads: int
    reload_listeners: list[Callable[[set[SharePartitionKey]], None]]
    superseded_listeners: list[Callable[[str], None]]
    _closed: bool
    _entities: dict[EntityKey, Any]
    _owner_epochs: dict[int, int]
    _own_epochs: dict[int, int]
    _queues: dict[int, list[_Op]]
    _resolvers: dict[int, asyncio.Task[None]]
    if TYPE_CHECKING:  # the backend hooks (BasePersister) and the cluster mixin's methods
        async def _commit(self, partition: int, records: list[Record]) -> None: ...
        async def _replay(self, sink: ReplaySink, partitions: Sequence[int] | None = None) -> None: ...
        async def _settle(self, partition: int) -> bool: ...
        async def _await_stable(self, partition: int) -> None: ...
        async def _reopen(self, partition: int) -> None: ...
        def _lose(self, p: int, newer: int) -> None: ...

    async def _take_ownership(self) -> None:
        """Take an owner epoch above every epoch the backend holds and record it on every partition.

        Runs after ``_open`` fenced every older writer and ``recover`` read to the last stable
        offset, so no commit can land between the read and ours without fencing ours: a newer
        sidecar always ends up with a larger epoch, whatever the clocks say."""
        epoch = self.recovery_stats.owner_epoch + 1
        results = await asyncio.gather(*(self._claim_partition(p, epoch) for p in range(self.partitions)),
                                       return_exceptions=True)
        for p, res in enumerate(results):
            if isinstance(res, BaseException):
                if isinstance(res, PersistError):
                    raise res
                raise BackendWriteError(f"state partition {p}: cannot record owner epoch {epoch}: {res!r}")
            self._owner_epochs[p] = epoch
        self.owner_epoch = epoch
        log.info("%s persister owns %d state partitions at owner epoch %d", self.name, self.partitions, epoch)

    async def _claim_partition(self, p: int, epoch: int, attempts: int = 10) -> None:
        """Commit the owner record of ``p``. Fenced meanwhile by an older owner re-asserting itself
        (it had not seen our record yet): take the partition again; by a newer owner: give up."""
        for attempt in range(attempts):
            try:
                await self._commit(p, [codec.encode(KIND_OWNER, p, epoch)])
                return
            except WriterFencedError as exc:
                newest = await self._read_owner(p)
                if newest >= epoch:
                    raise WriterFencedError(f"state partition {p}: another sidecar (owner epoch {newest}) took "
                                            f"over during start-up: {exc}") from exc
                log.warning("state partition %d: fenced during start-up by owner epoch %d; taking it again", p, newest)
                await asyncio.sleep(0.1 * (attempt + 1))
                await self._reopen(p)
                await self._reload(p)
        raise WriterFencedError(f"state partition {p}: could not record owner epoch {epoch} in {attempts} attempts")

    # ------------------------------------------------------ unconfirmed and fenced commits
    def _blocked_error(self, p: int) -> PersistError:
        reason = self.blocked.get(p)
        if reason == "unowned":
            return WriterFencedError(f"state partition {p} is owned by another sidecar of the cluster")
        if reason == "acquiring":
            return NotReadyError(f"state partition {p}: taking it over (replaying its state)")
        if reason == "unknown":
            return NotReadyError(f"state partition {p}: re-reading the state after an unconfirmed commit")
        if reason == "releasing":
            return WriterFencedError(f"state partition {p} is being handed over to another sidecar of the cluster")
        if reason == "superseded":
            return WriterFencedError(f"state partition {p} is owned by a newer sidecar; this one stopped serving")
        return WriterFencedError(f"state partition {p}: writer fenced, re-reading ownership from the backend")

    def _block(self, p: int, reason: str, exc: BaseException) -> None:
        """Stop writes to ``p`` (queued ones fail: they may build on state that is not durable)
        and resolve what is durable in the background."""
        if self.cluster and p not in self.owned:  # released meanwhile: nothing to resolve
            reason = self.blocked.setdefault(p, "unowned")
        if reason == "fenced":
            self.fenced_partitions.add(p)
        self.blocked[p] = reason
        queue = self._queues.get(p, [])
        for op in queue:
            if not op.future.done():
                op.future.set_exception(self._blocked_error(p))
        queue.clear()
        log.warning("state partition %d blocked (%s): %s", p, reason, exc)
        if p not in self._resolvers and not self._closed and reason not in ("unowned", "acquiring"):
            task = asyncio.get_running_loop().create_task(self._resolve(p), name=f"kshare-persist-resolve-{p}")
            self._resolvers[p] = task
            task.add_done_callback(lambda _t: self._resolvers.pop(p, None))

    async def _resolve(self, p: int) -> None:
        """Bring partition ``p`` back in line with the backend, then unblock it.

        Unknown outcome: wait for the writer's last transaction to end (committed or aborted),
        then re-read. Fenced (or a writer left unusable): read the owner records first; a newer
        owner supersedes this instance for good, otherwise this instance is still the rightful
        owner and takes the partition over again (new writer, re-read, owner record)."""
        backoff = 0.1
        while not self._closed:
            try:
                fenced = self.blocked.get(p) == "fenced"
                if not fenced and not await self._settle(p):
                    self.blocked[p] = "fenced"
                    self.fenced_partitions.add(p)
                    continue
                if fenced:
                    if await self._newer_owner(p):
                        return
                    # A sidecar starting up fences before it records its epoch: give it time to
                    # do so rather than fencing it back at once, then look again.
                    await asyncio.sleep(self.takeover_grace_s)
                    if await self._newer_owner(p):
                        return
                    if self.cluster and p not in self.owned:  # the group gave it to another sidecar
                        return
                    await self._reopen(p)
                await self._await_stable(p)
                changed = await self._reload(p)
                if fenced:
                    if self._owner_epochs.get(p, NO_EPOCH) > self._own_epoch(p):
                        self._supersede(p, self._owner_epochs[p])
                        return
                    await self._commit(p, [codec.encode(KIND_OWNER, p, self._own_epoch(p))])
                    self._owner_epochs[p] = self._own_epoch(p)
                    self.takeovers += 1
                    log.warning("state partition %d: still the newest owner (epoch %s); took it over again",
                                p, self._own_epoch(p))
                for listener in self.reload_listeners:
                    try:
                        listener(changed)
                    except Exception:
                        log.exception("reload listener failed")
                self.blocked.pop(p, None)
                self.fenced_partitions.discard(p)
                log.info("state partition %d serving again after re-reading the backend (%d share-partitions "
                         "changed)", p, len(changed))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, WriterFencedError):
                    self.blocked[p] = "fenced"
                    self.fenced_partitions.add(p)
                log.warning("state partition %d: resolving after a failed commit: %r; retrying in %.1fs",
                            p, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    def _own_epoch(self, p: int | None = None) -> int:
        if self.cluster:  # each owned state partition has its own epoch (persist/cluster.py)
            return self._own_epochs.get(p, NO_EPOCH) if p is not None else NO_EPOCH
        return NO_EPOCH if self.owner_epoch is None else self.owner_epoch

    def _sink(self, entities: dict[EntityKey, Any], stats: RecoveryStats, owners: dict[int, int]) -> ReplaySink:
        """The replay sink of this persister: its stale-record rule, and its placement (records of
        another layout kept apart in ``stats.misplaced``; persist/layout.py). The legacy ``key``
        placement (tests: an older build's single sidecar) replays without one, as those builds did."""
        placement = None if self.placement == LEGACY_LAYOUT else self.placement
        return replay_sink(entities, stats, owners, self.replay_rule, placement, self.partitions)

    async def _read_owner(self, p: int) -> int:
        """The newest committed owner epoch of ``p`` (read_committed, to the last stable offset)."""
        owners: dict[int, int] = {}
        await self._replay(self._sink({}, RecoveryStats(), owners), [p])
        return owners.get(p, NO_EPOCH)

    async def _newer_owner(self, p: int) -> bool:
        """Supersede this instance if ``p`` has a newer owner record than ours."""
        newest = await self._read_owner(p)
        if newest > self._own_epoch(p):
            self._supersede(p, newest)
            return True
        return False

    def _supersede(self, p: int, newer: int) -> None:
        """A newer sidecar owns the state: stop serving for good (nothing is released or written).
        In a cluster only partition ``p`` is lost (another sidecar of the group took it)."""
        if self.cluster:
            self._lose(p, newer)
            return
        if self.superseded:
            return
        self.superseded = True
        for q in range(self.partitions):
            self.blocked[q] = "superseded"
            self.fenced_partitions.add(q)
            for op in self._queues.get(q, []):
                if not op.future.done():
                    op.future.set_exception(self._blocked_error(q))
            self._queues.get(q, []).clear()
        reason = (f"state partition {p} is owned by a newer sidecar (owner epoch {newer} > ours {self.owner_epoch}); "
                  f"this sidecar stops serving share groups")
        log.error("%s", reason)
        for listener in self.superseded_listeners:
            try:
                listener(reason)
            except Exception:
                log.exception("superseded listener failed")

    async def _reload(self, p: int) -> set[SharePartitionKey]:
        """Replace the in-memory view of partition ``p`` by what the backend holds; return the
        share-partitions whose durable state differs from what this instance believed."""
        entities: dict[EntityKey, Any] = {}
        owners: dict[int, int] = {}
        stats = RecoveryStats()
        await self._replay(self._sink(entities, stats, owners), [p])
        if stats.misplaced:  # written after the start-up move, by an older build: not adopted, but said
            log.error("state partition %d holds %d share-partition records in the single-sidecar layout of older "
                      "builds (written after the topic was moved); they are not served: stop the sidecars and run "
                      "`kshare state migrate`", p, len(stats.misplaced))
        old = {k: v for k, v in self._entities.items()
               if state_partition_for(k[0], k[1], self.partitions, self.placement) == p}
        for k in old:
            if k not in entities:
                del self._entities[k]
        self._entities.update(entities)
        self._owner_epochs[p] = owners.get(p, NO_EPOCH)
        self.reloads += 1
        return {k[1] for k in old.keys() | entities.keys()
                if k[0] == KIND_PARTITION and old.get(k) != entities.get(k)}
