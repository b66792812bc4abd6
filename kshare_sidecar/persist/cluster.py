"""Ownership of *some* state partitions: a sidecar in a cluster of sidecars.

A single sidecar owns every state partition (persist/ownership.py, ``take_ownership``). In a
cluster the sidecars' consumer group on the backend assigns the state partitions
(cluster/membership.py), and each sidecar takes over exactly the ones it is given:

``acquire(p)``: a new transactional writer for ``p`` (its init fences the previous owner's
writer and aborts its open transaction — the fencing issue's mechanism, per partition), wait
until the partition's last stable offset has caught up, replay ``p`` read_committed, take an
owner epoch one above every epoch on ``p`` (owner records and share-partition owner epochs) and
commit it as ``p``'s owner record. Only then does ``p`` take writes. Share-partitions claimed
afterwards use that epoch; seed 004's rule (``assignment epoch <= writer epoch <= current
epoch``) then refuses the previous owner's writes while our own in-flight ones stay valid.

``release(p)``: a planned handover (the group moved ``p``, or this sidecar stops). First the
handover hooks run while ``p`` is still owned — the share-partitions stop serving and write the
records they had handed out as AVAILABLE *with* the delivery attempt counted
(share/leadership.py, ``hand_over``), so the next owner's delivery counts up and a poison
record reaches its delivery limit however often the cluster rebalances — then an owner record
marked released (``"r"``) ends our tenure: the next owner waits for it before fencing our writer
(cluster/membership.py). Then new writes are refused (NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER:
clients look the new owner up), the batch in flight finishes, the writer is dropped and ``p``'s
entities forgotten. A handover that cannot be written (backend unreachable) still lets go; the
next owner then redelivers with the counts last written, as after a crash.

``drop_all()``: the lease lapsed (cluster/lease.py): forget everything at once, writing nothing
(the backend is what we cannot reach), before the group can have given it to anyone else.

A partition lost without a release (fenced, and a newer owner record is on it: the group gave
it away while this sidecar was paused) is dropped the same way (:meth:`ClusterOwnership.lose`); the rest keep
serving — unlike a single sidecar, which stops serving altogether when superseded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_LAYOUT
from kshare_sidecar.persist.errors import CommitOutcomeUnknownError, WriterFencedError
from kshare_sidecar.persist.placement import LAYOUT, EntityKey
from kshare_sidecar.persist.records import NO_EPOCH

if TYPE_CHECKING:
    from kshare_sidecar.persist.layout import Layout
    from kshare_sidecar.persist.ops import Record
    from kshare_sidecar.persist.ownership import Ownership
    from kshare_sidecar.persist.replay import Replay
    from kshare_sidecar.persist.store import StateStore
    from kshare_sidecar.persist.view import StateView
    from kshare_sidecar.persist.writer import CoalescingWriter

log = logging.getLogger("kshare_sidecar.persist")

#: Told which entities a state partition's acquisition or release changed: ``(partition, keys)``.
OwnershipListener = Callable[[int, set[EntityKey]], None]
#: Runs before a planned release, while the partition is still owned (writes its handover).
HandoverHook = Callable[[int], Awaitable[None]]

#: how long a planned release may spend writing its handover before letting go anyway
HANDOVER_TIMEOUT_S = 10.0


class ClusterOwnership:
    """acquire / release of single state partitions: the cluster part of a persister (in use once
    :meth:`enable` was called, before the persister starts)."""

    def __init__(self, *, view: StateView, store: StateStore, writer: CoalescingWriter, ownership: Ownership,
                 replay: Replay, layout: Layout) -> None:
        self.view = view
        self.store = store
        self.writer = writer
        self.ownership = ownership
        self.replay = replay
        self.layout = layout
        #: cluster mode: this instance owns only the state partitions the sidecars' group assigned
        #: it, each at its own owner epoch
        self.enabled = False
        self.owned: set[int] = set()
        self.own_epochs: dict[int, int] = {}
        self.acquired_listeners: list[OwnershipListener] = []
        self.released_listeners: list[OwnershipListener] = []
        self.handover_hooks: list[HandoverHook] = []
        #: the node id written into owner records (None: not in a cluster)
        self.node_id: int | None = None
        #: the membership's lease (cluster/lease.py): nothing is owned while it is lapsed
        self.lease: Any = None
        self.handovers = 0  # planned releases whose handover mark was written (tests, metrics)

    def enable(self, node_id: int | None = None) -> None:
        """Before ``start()``: own nothing until assigned (share-partitions are placed by
        topic-partition, as by a single sidecar; persist/layout.py)."""
        if self.view.placement != LAYOUT:
            raise ValueError(f"a cluster of sidecars places share-partitions by topic-partition, "
                             f"not {self.view.placement!r}")
        self.enabled = True
        self.node_id = node_id

    def owns(self, p: int) -> bool:
        """Whether this sidecar serves ``p`` now: assigned, taken over, and within its lease."""
        if not self.enabled:
            return True
        return p in self.owned and (self.lease is None or self.lease.valid())

    def epoch_of(self, p: int) -> int | None:
        """The owner epoch this instance holds state partition ``p`` at (None: not owned)."""
        if not self.enabled:
            return self.ownership.owner_epoch
        return self.own_epochs.get(p) if p in self.owned else None

    async def acquire(self, p: int) -> int:
        """Take state partition ``p`` over (see the module docstring); returns the owner epoch."""
        if p in self.owned:
            return self.own_epochs[p]
        blocked = self.writer.blocked
        blocked[p] = "acquiring"
        try:
            await self.store.reopen(p)  # fences the previous owner's writer, aborts its open transaction
            await self.store.await_stable(p)
            entities, owners, stats = await self.replay.read_partition(p)
            self.layout.refuse_misplaced(p, stats)  # another layout's records: refused, never served without them
            epoch = max(stats.owner_epoch, owners.get(p, NO_EPOCH), self.own_epochs.get(p, NO_EPOCH), 0) + 1
            if blocked.get(p) != "acquiring":  # abandoned (no longer assigned): claim nothing
                raise WriterFencedError(f"state partition {p} was released while being taken over")
            records: list[Record] = [codec.owner_record(p, epoch, self.node_id)]
            if self.layout.known and stats.layouts.get(p) != self.view.placement:  # persist/layout.py
                records.append(codec.encode(KIND_LAYOUT, p, self.view.placement))
            await self.store.commit(p, records)
            if self.store.replay_rule == "owner":
                # No transaction to abort: a write of the previous owner may have landed between
                # our init and our owner record. Read up to it again, so this view is what every
                # later replay accepts (after it, the leader refuses the previous owner's epoch).
                entities, owners, stats = await self.replay.read_partition(p)
                self.layout.refuse_misplaced(p, stats)
        except BaseException:
            if blocked.get(p) == "acquiring":
                blocked[p] = "unowned"
            await self.store.release(p)
            raise
        if blocked.get(p) != "acquiring":  # released while acquiring
            await self.store.release(p)
            raise WriterFencedError(f"state partition {p} was released while being taken over")
        stale = self.view.forget(p)
        self.view.entities.update(entities)
        self.ownership.owner_epochs[p] = epoch
        self.own_epochs[p] = epoch
        self.owned.add(p)
        self.ownership.fenced_partitions.discard(p)
        blocked.pop(p, None)
        log.info("state partition %d taken over at owner epoch %d (%d records replayed, %d entities)", p, epoch,
                 stats.records, len(entities))
        self._notify(self.acquired_listeners, p, set(entities) | stale)
        return epoch

    async def release(self, p: int) -> None:
        """Give state partition ``p`` up (the group moved it, or this sidecar stops): its handover
        first (see the module docstring), then let go."""
        was_owned = p in self.owned
        if was_owned and self.owns(p):
            await self._hand_over(p)
        self._forget(p)
        resolver = self.ownership.resolvers.pop(p, None)
        if resolver is not None:
            resolver.cancel()
            await asyncio.gather(resolver, return_exceptions=True)
        idle = self.writer.idle.get(p)
        if idle is not None:
            try:
                await asyncio.wait_for(idle.wait(), 30)
            except TimeoutError:
                log.warning("state partition %d: the write in flight did not finish within 30 s of its release", p)
        await self.store.release(p)
        if was_owned:
            log.info("state partition %d released", p)

    async def _hand_over(self, p: int) -> None:
        """The hooks' writes, then the released mark; bounded, and never raising: letting go must
        not depend on the backend."""
        epoch = self.own_epochs[p]
        try:
            async with asyncio.timeout(HANDOVER_TIMEOUT_S):
                for hook in self.handover_hooks:
                    await hook(p)
                if p not in self.owned or self.writer.blocked.get(p):
                    return  # lost meanwhile (fenced, the lease lapsed): the mark is not ours to write
                self.writer.blocked[p] = "releasing"  # later writes fail; the mark is the tenure's last record
                idle = self.writer.idle.get(p)
                if idle is not None:
                    await idle.wait()
                await self.store.commit(p, [codec.owner_record(p, epoch, self.node_id, released=True)])
            self.handovers += 1
            log.info("state partition %d handed over (owner epoch %d): marked released", p, epoch)
        except Exception as exc:  # noqa: BLE001 - a handover is best effort; the release goes on
            log.warning("state partition %d: its handover could not be written (%r); the next owner takes it "
                        "over without it, as after a crash", p, exc)

    def drop_all(self, reason: str) -> list[int]:
        """Forget every partition owned or being taken over, writing nothing (the lease lapsed).
        A batch being committed is answered at once, its outcome unknown (the backend is what we
        cannot reach; waiting for the commit's timeout held clients' acknowledgements for 30 s)."""
        gone = sorted(self.owned | {p for p, r in self.writer.blocked.items() if r == "acquiring"})
        for p in gone:
            for op in self.writer.flushing.get(p, []):
                if not op.future.done():
                    op.future.set_exception(CommitOutcomeUnknownError(
                        f"state partition {p}: this sidecar's lease lapsed while the write was in flight; its "
                        f"outcome is unknown"))
            self._forget(p)
            task = asyncio.get_running_loop().create_task(self.store.release(p), name=f"kshare-persist-drop-{p}")
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        if gone:
            log.error("state partitions %s dropped without a handover: %s", gone, reason)
        return gone

    def _forget(self, p: int) -> None:
        self.owned.discard(p)
        self.own_epochs.pop(p, None)
        self.writer.blocked[p] = "unowned"
        self.writer.fail_queued(p)
        gone = self.view.forget(p)
        self._notify(self.released_listeners, p, gone)

    def abandon(self, p: int) -> None:
        """A takeover of ``p`` no longer assigned: it stops before it writes its owner record."""
        if self.writer.blocked.get(p) == "acquiring":
            self.writer.blocked[p] = "unowned"

    def lose(self, p: int, newer: int) -> None:
        """A newer owner of ``p`` was seen (the state topic's tail, or a fenced write) without the group
        having told us yet: drop ``p`` only."""
        if p not in self.owned and self.writer.blocked.get(p) == "unowned":
            return
        log.error("state partition %d is owned by another sidecar now (owner epoch %d > ours %s); dropping it",
                  p, newer, self.own_epochs.get(p))
        self._forget(p)
        task = asyncio.get_running_loop().create_task(self.store.release(p), name=f"kshare-persist-lose-{p}")
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    @staticmethod
    def _notify(listeners: list[OwnershipListener], p: int, keys: set[EntityKey]) -> None:
        for listener in listeners:
            try:
                listener(p, keys)
            except Exception:
                log.exception("state partition %d: ownership listener failed", p)
