"""Reading the state topic back: the replay rules, and the replay part of a persister.

A replay folds every record of some or all state partitions, in offset order, into entities
(:func:`replay_sink`): the codec decodes, records it cannot read are skipped and counted, owner and
layout records are collected, and a record that a fenced zombie may have committed late is ignored
(the stale-record rules, :data:`RULES`). :class:`Replay` runs it for the persister: recovery at
start-up (resumable where the store can), one partition's read-back after a failed or fenced
commit, the newest owner record of a partition, and a view without starting (``kshare state
migrate-to-native``). Reading *on* past the replay, as the state-topic watch of
``state.write.mode=idempotent`` does, is persist/writers/watch.py.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_GROUP, KIND_LAYOUT, KIND_MEMBER, KIND_OWNER, KIND_PARTITION, CodecError
from kshare_sidecar.persist.placement import LAYOUT, LEGACY_LAYOUT, EntityKey, share_partition_home, state_partition_for
from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.persist.ops import ReplaySink
from kshare_sidecar.persist.records import NO_EPOCH, RecoveryStats, StoredPartition

if TYPE_CHECKING:
    from kshare_sidecar.persist.store import StateStore
    from kshare_sidecar.persist.view import StateView

log = logging.getLogger("kshare_sidecar.persist")


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


class Replay:
    """Replays for one persister: its stale-record rule and placement, its recovery stats."""

    def __init__(self, view: StateView, store: StateStore) -> None:
        self.view = view
        self.store = store
        self.recovery_stats = RecoveryStats()
        #: the owner epochs of the last full replay (before this instance adds its own) and where it
        #: ended: what a resumed replay goes on from
        self._recovered_owners: dict[int, int] | None = None
        self._recovered_to: Any = None

    def sink(self, entities: dict[EntityKey, Any], stats: RecoveryStats, owners: dict[int, int]) -> ReplaySink:
        """The replay sink of this persister: its store's stale-record rule, and its placement (records
        of another layout kept apart in ``stats.misplaced``; persist/layout.py). The legacy ``key``
        placement (tests: an older build's single sidecar) replays without one, as those builds did."""
        placement = None if self.view.placement == LEGACY_LAYOUT else self.view.placement
        return replay_sink(entities, stats, owners, self.store.replay_rule, placement, self.view.partitions)

    async def read_partition(self, p: int) -> tuple[dict[EntityKey, Any], dict[int, int], RecoveryStats]:
        """Every entity, the owner epochs and the stats of state partition ``p``, as the store holds it."""
        entities: dict[EntityKey, Any] = {}
        owners: dict[int, int] = {}
        stats = RecoveryStats()
        await self.store.replay(self.sink(entities, stats, owners), [p])
        return entities, owners, stats

    async def read_owner(self, p: int) -> int:
        """The newest committed owner epoch of ``p`` (read_committed, to the last stable offset)."""
        owners: dict[int, int] = {}
        await self.store.replay(self.sink({}, RecoveryStats(), owners), [p])
        return owners.get(p, NO_EPOCH)

    async def view_of(self, partitions: Sequence[int] | None = None) -> dict[EntityKey, Any]:
        """Every entity of ``partitions`` (all when None) as recovery would restore it, without
        starting: nothing is taken over or written, so a sidecar serving the topic is undisturbed
        (what `kshare state migrate-to-native` reads; the view a start-up would recover)."""
        entities: dict[EntityKey, Any] = {}
        await self.store.replay(self.sink(entities, RecoveryStats(), {}), partitions)
        return entities

    async def recover(self, *, resume: bool = False) -> tuple[RecoveryStats, dict[int, int]]:
        """Rebuild the view's entities by replaying the store to its end; returns the stats and the
        owner epochs found. ``resume``: go on from where the last full replay ended, with its view
        (when the store can, and nothing else read a partition since; otherwise a full replay)."""
        view = self.view
        stats = RecoveryStats()
        entities: dict[EntityKey, Any] = {}
        owners: dict[int, int] = {}
        started = time.perf_counter()
        positions = self.store.replay_positions() if resume else None
        recovered = self._recovered_owners
        resumable = resume and positions is not None and positions == self._recovered_to and recovered is not None
        if resumable and recovered is not None:
            entities, stats, owners = dict(view.entities), _copy_stats(self.recovery_stats), dict(recovered)
            stats.share_partitions = stats.groups = stats.members = stats.topic_ids = 0
            await self.store.replay(self.sink(entities, stats, owners), start=positions)
        else:
            await self.store.replay(self.sink(entities, stats, owners))
        self._recovered_owners = dict(owners)
        self._recovered_to = self.store.replay_positions()
        view.entities = entities
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
                 "%d skipped, %d stale ignored, %d in an older layout, newest owner epoch %d) in %.3fs", view.name,
                 stats.records, stats.share_partitions, stats.groups, stats.members, stats.topic_ids,
                 stats.skipped_count, stats.stale_ignored, len(stats.misplaced), stats.owner_epoch, stats.seconds)
        return stats, owners


def _copy_stats(stats: RecoveryStats) -> RecoveryStats:
    """A recovery's stats to go on from (containers copied, not shared)."""
    return dataclasses.replace(stats, skipped=list(stats.skipped), stale_keys=set(stats.stale_keys),
                               misplaced=dict(stats.misplaced), layouts=dict(stats.layouts))
