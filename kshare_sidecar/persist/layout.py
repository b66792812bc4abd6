"""The state topic's layout: on which state partition each share-partition's record lives, and
moving an older layout's records home.

Every sidecar, alone or in a cluster, places share-partitions by topic-partition
(:data:`LAYOUT`): the owner of a state partition then leads a user
partition for every group, so a single sidecar's state topic is a cluster's state topic as it is and
growing from 1 to N sidecars needs nothing. Single sidecars of older builds placed them by the whole
key (``key``); a cluster ignored those records, which would have lost every group's state when a
single sidecar was joined by others. So:

* **Layout records** (``["l", p]``, codec.py) say "the whole topic is in layout L". One is written
  on every partition, but only once every share-partition record is at its home, so whichever
  partition a sidecar replays, a layout record there vouches for all of them. A layout this build
  does not know (a newer build's) is refused at start-up, never guessed at.
* **Moving** (:meth:`Layout.move_home`), done only by a sidecar that owns every state
  partition (a single sidecar at start-up, after its takeover; a cluster member before it joins,
  through a single-sidecar twin, :meth:`Layout.ensure_cluster_layout`; `kshare state
  migrate`): (1) every misplaced record is written at its home, at the mover's owner epoch; (2) only
  when all of those are durable, each is tombstoned where it was; (3) then the layout records. A
  mover killed anywhere loses nothing: the replay keeps misplaced records apart (replay.py's
  ``replay_sink`` with a placement), a record already at home wins over its misplaced original, and
  the next mover does what is left. The writers are the fenced ones of every other write: a sidecar
  that took the partitions over meanwhile fences the mover's copies and tombstones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_LAYOUT, KIND_PARTITION
from kshare_sidecar.persist.errors import BackendWriteError, PersistError, WriterFencedError
from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.persist.placement import (LAYOUT, LEGACY_LAYOUT, PLACEMENTS, EntityKey, group_home,
                                              share_partition_home, state_partition_for)
from kshare_sidecar.persist.records import RecoveryStats, StoredPartition

if TYPE_CHECKING:
    from kshare_sidecar.persist.ops import Record
    from kshare_sidecar.persist.ownership import Ownership
    from kshare_sidecar.persist.replay import Replay
    from kshare_sidecar.persist.store import StateStore
    from kshare_sidecar.persist.view import StateView

log = logging.getLogger("kshare_sidecar.persist")

__all__ = ["LAYOUT", "LEGACY_LAYOUT", "PLACEMENTS", "EntityKey", "Layout", "LayoutError", "MovePlan", "check_known",
           "group_home", "plan_moves", "share_partition_home", "state_partition_for", "with_epoch"]


#: How often a cluster member looks again (and tries to move the records itself) while another
#: sidecar moves them, before it gives up starting.
CLUSTER_ATTEMPTS = 10


class LayoutError(PersistError):
    """The state topic's layout is one this sidecar cannot serve (yet)."""


@dataclass(slots=True)
class MovePlan:
    """What moving misplaced share-partition records home writes. ``copies``: home partition ->
    records to write there; ``drops``: partition -> keys to tombstone there (after every copy)."""

    copies: dict[int, list[tuple[SharePartitionKey, StoredPartition]]] = field(default_factory=dict)
    drops: dict[int, list[SharePartitionKey]] = field(default_factory=dict)

    @property
    def moved(self) -> int:
        return sum(len(v) for v in self.copies.values())

    @property
    def dropped(self) -> int:
        return sum(len(v) for v in self.drops.values())


def plan_moves(entities: Mapping[EntityKey, Any], misplaced: Mapping[SharePartitionKey, tuple[int, StoredPartition]],
               partitions: int, epoch_of: Callable[[int], int]) -> MovePlan:
    """Pure: every misplaced record is tombstoned where it is; it is copied home unless a record of
    its key is already there (a move cut short after the copy, or state written at home since — the
    record at home is the newer one: nothing but a mover writes it from the misplaced one). A copy
    carries the home owner's epoch ``epoch_of(home)`` (never lower than its own), so the owner rule
    of replay, which ignores records below an owner record before them, keeps it."""
    plan = MovePlan()
    for key in sorted(misplaced, key=lambda k: (k.group_id, k.topic_id, k.partition)):
        where, stored = misplaced[key]
        plan.drops.setdefault(where, []).append(key)
        if (KIND_PARTITION, key) in entities:
            continue
        home = share_partition_home(key.topic_id, key.partition, partitions)
        plan.copies.setdefault(home, []).append((key, with_epoch(stored, epoch_of(home))))
    return plan


def with_epoch(stored: StoredPartition, epoch: int) -> StoredPartition:
    """``stored`` written at owner epoch ``epoch`` (or its own, if higher); the assignment epoch stays."""
    if stored.state.leader_epoch >= epoch:
        return stored
    return dataclasses.replace(stored, state=dataclasses.replace(stored.state, leader_epoch=epoch))


def unknown_layouts(layouts: Mapping[int, str]) -> dict[int, str]:
    """Layout records this build cannot read (written by a newer one)."""
    return {p: name for p, name in layouts.items() if name != LAYOUT}


def check_known(topic: str, layouts: Mapping[int, str]) -> None:
    unknown = unknown_layouts(layouts)
    if unknown:
        p, name = min(unknown.items())
        raise LayoutError(f"state topic {topic!r} is in layout {name!r} (layout record on partition {p}), written "
                          f"by a newer kshare; this build reads layout {LAYOUT!r}: run the newer build")


class Layout:
    """Moving share-partition records to the current layout: the layout part of a persister."""

    def __init__(self, *, view: StateView, store: StateStore, replay: Replay, ownership: Ownership,
                 max_batch: int, twin: Callable[[], Any]) -> None:
        self.view = view
        self.store = store
        self.replay = replay
        self.ownership = ownership
        self.max_batch = max_batch
        self.twin = twin  # a single-sidecar persister on the same store (BasePersister.single_twin)
        #: set once this sidecar knows the whole topic is in the current layout (cluster: its owners
        #: write the layout record of a partition they take over when it has none)
        self.known = False

    @property
    def topic_label(self) -> str:
        """The state topic's name in messages."""
        return self.store.topic

    async def move_home(self) -> None:
        """Owning every state partition: move misplaced records home, then record the layout.
        Raises (and the caller does not serve) when any step fails; the next mover finishes it."""
        view = self.view
        if view.placement == LEGACY_LAYOUT:
            return
        stats = self.replay.recovery_stats
        check_known(self.topic_label, stats.layouts)
        own_epoch = self.ownership.own_epoch
        plan = plan_moves(view.entities, stats.misplaced, view.partitions, own_epoch)
        if plan.dropped:
            log.warning("state topic %r: %d share-partition records are in the single-sidecar layout of older builds; "
                        "moving them to their topic-partition home: %d copied, %d originals tombstoned",
                        self.topic_label, plan.dropped, plan.moved, plan.dropped)
            await self.commit_all({p: [codec.encode(KIND_PARTITION, k, s) for k, s in items]
                                   for p, items in plan.copies.items()})
            for items in plan.copies.values():
                for key, stored in items:
                    view.entities[(KIND_PARTITION, key)] = stored
            if not self.store.fences_writers:
                # The copies count only if no newer owner took a home partition over before them
                # (the owner rule): check before the originals go.
                for p in plan.copies:
                    newest = await self.replay.read_owner(p)
                    if newest > own_epoch(p):
                        raise WriterFencedError(f"state partition {p}: owner epoch {newest} took over while the "
                                                f"records were moved; it moves them")
            await self.commit_all({p: [codec.encode(KIND_PARTITION, k, None) for k in keys]
                                   for p, keys in plan.drops.items()})
            stats.misplaced.clear()
        missing = [p for p in range(view.partitions) if stats.layouts.get(p) != view.placement]
        if missing:
            await self.commit_all({p: [codec.encode(KIND_LAYOUT, p, view.placement)] for p in missing})
            stats.layouts.update({p: view.placement for p in missing})
        self.known = True
        if plan.dropped:
            log.warning("state topic %r: every share-partition record is at its home now (layout %r)",
                        self.topic_label, view.placement)

    async def commit_all(self, records: Mapping[int, list[Record]]) -> None:
        """Commit per partition (in chunks of ``max_batch``), partitions side by side; raise the
        first failure once all are done."""
        async def one(p: int, recs: list[Record]) -> None:
            for i in range(0, len(recs), self.max_batch):
                await self.commit_chunk(p, recs[i:i + self.max_batch])
        results = await asyncio.gather(*(one(p, recs) for p, recs in sorted(records.items())), return_exceptions=True)
        for res in results:
            if isinstance(res, PersistError):
                raise res
            if isinstance(res, BaseException):
                raise BackendWriteError(f"state topic {self.topic_label!r}: moving records failed: {res!r}") from res

    async def commit_chunk(self, p: int, records: list[Record]) -> None:
        """One commit of a move (a seam of its own: the tests kill a mover between two of them)."""
        await self.store.commit(p, records)

    async def scan(self, partitions: Sequence[int] | None = None) -> RecoveryStats:
        """Replay ``partitions`` (all by default) for their layout records and misplaced records only
        (nothing of it is kept): what a cluster member checks before it joins, and `kshare state
        migrate --check` reports."""
        stats = RecoveryStats()
        await self.store.replay(self.replay.sink({}, stats, {}), partitions)
        return stats

    async def ensure_cluster_layout(self) -> None:
        """A cluster member, before it joins: the whole topic must be in the current layout, since
        the member will own only some partitions and could neither read nor move a share-partition's
        record elsewhere. A layout record on partition 0 vouches for every partition; without one the
        whole topic is read; misplaced records are moved by a single-sidecar twin that owns every
        partition for the while (its takeover fences whoever else writes; members already running
        lose their partitions and take them again at the rebalance this member's join causes).
        Several members starting together: one move wins, the others wait and look again."""
        placement = self.view.placement
        if placement == LEGACY_LAYOUT:
            return
        for attempt in range(1, CLUSTER_ATTEMPTS + 1):
            stats = await self.scan([0])
            check_known(self.topic_label, stats.layouts)
            if stats.layouts.get(0) == placement:
                self.known = True
                return
            stats = await self.scan()
            check_known(self.topic_label, stats.layouts)
            if not stats.misplaced:
                self.known = True  # fresh (or moved by a build before layout records): owners record it
                return
            log.warning("state topic %r holds %d share-partition records in the single-sidecar layout of older "
                        "builds; this cluster member moves them before it joins, owning every state partition for "
                        "the while (attempt %d of %d)", self.topic_label, len(stats.misplaced), attempt,
                        CLUSTER_ATTEMPTS)
            twin = self.twin()
            try:
                await twin.start()  # replay, takeover of every partition, move_home
            except PersistError as exc:
                delay = random.uniform(1.0, 3.0)
                log.warning("state topic %r: moving the records did not finish (%s); another sidecar may be moving "
                            "them: looking again in %.1f s", self.topic_label, exc, delay)
                await asyncio.sleep(delay)
            finally:
                await twin.close()
        raise LayoutError(f"state topic {self.topic_label!r}: could not move its single-sidecar layout records in "
                          f"{CLUSTER_ATTEMPTS} attempts; stop the cluster's sidecars and run `kshare state migrate`")

    def refuse_misplaced(self, p: int, stats: RecoveryStats) -> None:
        """A cluster member taking ``p`` over found records of another layout on it (written after the
        topic was moved, by an older build): refuse ``p`` rather than serve without them."""
        if stats.misplaced:
            raise LayoutError(f"state partition {p} of {self.topic_label!r} holds {len(stats.misplaced)} "
                              f"share-partition records in the single-sidecar layout of older builds (written after "
                              f"the topic was moved): not serving it; stop the cluster's sidecars and run "
                              f"`kshare state migrate`")
