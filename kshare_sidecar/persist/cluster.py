"""Ownership of *some* state partitions: a sidecar in a cluster of sidecars.

A single sidecar owns every state partition (persist/ownership.py, ``_take_ownership``). In a
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
it away while this sidecar was paused) is dropped the same way (``_lose``); the rest keep
serving — unlike a single sidecar, which stops serving altogether when superseded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_LAYOUT
from kshare_sidecar.persist.errors import CommitOutcomeUnknownError, WriterFencedError
from kshare_sidecar.persist.records import NO_EPOCH, RecoveryStats

if TYPE_CHECKING:  # ownership.py and writer.py are imported where used (see _home)
    from kshare_sidecar.persist.errors import PersistError
    from kshare_sidecar.persist.records import RecoveryStats as _Stats
    from kshare_sidecar.persist.ownership import EntityKey, ReplaySink
    from kshare_sidecar.persist.writer import Record, _Op

log = logging.getLogger("kshare_sidecar.persist")

#: Told which entities a state partition's acquisition or release changed: ``(partition, keys)``.
OwnershipListener = Callable[[int, set["EntityKey"]], None]
#: Runs before a planned release, while the partition is still owned (writes its handover).
HandoverHook = Callable[[int], Awaitable[None]]

#: how long a planned release may spend writing its handover before letting go anyway
HANDOVER_TIMEOUT_S = 10.0


class ClusterOwnershipMixin:
    """acquire / release of single state partitions (only used when ``self.cluster``)."""

    # Provided by BasePersister, its writer (persist/writer.py) and the ownership mixin (declared
    # for the type checker; BasePersister.__init__ sets them).
    partitions: int
    replay_rule: str
    owner_epoch: int | None
    blocked: dict[int, str]
    fenced_partitions: set[int]
    _entities: dict[EntityKey, Any]
    _owner_epochs: dict[int, int]
    _queues: dict[int, list[_Op]]
    _flushing: dict[int, list[_Op]]
    _resolvers: dict[int, asyncio.Task[None]]
    if TYPE_CHECKING:  # the backend hooks (BasePersister) and the ownership mixin's methods
        async def _commit(self, partition: int, records: list[Record]) -> None: ...
        async def _replay(self, sink: ReplaySink, partitions: Sequence[int] | None = None) -> None: ...
        async def _await_stable(self, partition: int) -> None: ...
        async def _reopen(self, partition: int) -> None: ...
        def _blocked_error(self, p: int) -> PersistError: ...
        def _sink(self, entities: dict[EntityKey, Any], stats: _Stats, owners: dict[int, int]) -> ReplaySink: ...
        def _misplaced_on(self, p: int, stats: _Stats) -> None: ...

    layout_known: bool

    def _init_cluster(self) -> None:
        #: where share-partition records go (ownership.PLACEMENTS): "topic-partition", alone or in a
        #: cluster; "key" only to emulate an older build's single sidecar (tests)
        self.placement = "topic-partition"
        #: cluster mode: this instance owns only the state partitions the sidecars' group assigned
        #: it, each at its own owner epoch
        self.cluster = False
        self.owned: set[int] = set()
        self._own_epochs: dict[int, int] = {}
        self._idle: dict[int, asyncio.Event] = {}  # per partition: set while no batch is in flight
        self.acquired_listeners: list[OwnershipListener] = []
        self.released_listeners: list[OwnershipListener] = []
        self.handover_hooks: list[HandoverHook] = []
        #: the node id written into owner records (None: not in a cluster)
        self.node_id: int | None = None
        #: the membership's lease (cluster/lease.py): nothing is owned while it is lapsed
        self.lease: Any = None
        self.handovers = 0  # planned releases whose handover mark was written (tests, metrics)

    def enable_cluster(self, node_id: int | None = None) -> None:
        """Before ``start()``: own nothing until assigned (share-partitions are placed by
        topic-partition, as by a single sidecar; persist/layout.py)."""
        if self.placement != "topic-partition":
            raise ValueError(f"a cluster of sidecars places share-partitions by topic-partition, not {self.placement!r}")
        self.cluster = True
        self.node_id = node_id

    def owns(self, p: int) -> bool:
        """Whether this sidecar serves ``p`` now: assigned, taken over, and within its lease."""
        if not self.cluster:
            return True
        return p in self.owned and (self.lease is None or self.lease.valid())

    def epoch_of(self, p: int) -> int | None:
        """The owner epoch this instance holds state partition ``p`` at (None: not owned)."""
        if not self.cluster:
            return self.owner_epoch
        return self._own_epochs.get(p) if p in self.owned else None

    async def acquire(self, p: int) -> int:
        """Take state partition ``p`` over (see the module docstring); returns the owner epoch."""
        if p in self.owned:
            return self._own_epochs[p]
        self.blocked[p] = "acquiring"
        try:
            await self._reopen(p)  # fences the previous owner's writer, aborts its open transaction
            await self._await_stable(p)
            entities: dict = {}
            owners: dict[int, int] = {}
            stats = RecoveryStats()
            await self._replay(self._sink(entities, stats, owners), [p])
            self._misplaced_on(p, stats)  # another layout's records: refused, never served without them
            epoch = max(stats.owner_epoch, owners.get(p, NO_EPOCH), self._own_epochs.get(p, NO_EPOCH), 0) + 1
            if self.blocked.get(p) != "acquiring":  # abandoned (no longer assigned): claim nothing
                raise WriterFencedError(f"state partition {p} was released while being taken over")
            records: list[Record] = [codec.owner_record(p, epoch, self.node_id)]
            if self.layout_known and stats.layouts.get(p) != self.placement:  # persist/layout.py
                records.append(codec.encode(KIND_LAYOUT, p, self.placement))
            await self._commit(p, records)
            if self.replay_rule == "owner":
                # No transaction to abort: a write of the previous owner may have landed between
                # our init and our owner record. Read up to it again, so this view is what every
                # later replay accepts (after it, the leader refuses the previous owner's epoch).
                entities, owners, stats = {}, {}, RecoveryStats()
                await self._replay(self._sink(entities, stats, owners), [p])
                self._misplaced_on(p, stats)
        except BaseException:
            if self.blocked.get(p) == "acquiring":
                self.blocked[p] = "unowned"
            await self._release_writer(p)
            raise
        if self.blocked.get(p) != "acquiring":  # released while acquiring
            await self._release_writer(p)
            raise WriterFencedError(f"state partition {p} was released while being taken over")
        stale = {k for k in self._entities if self._home(k) == p}
        for k in stale:
            del self._entities[k]
        self._entities.update(entities)
        self._owner_epochs[p] = epoch
        self._own_epochs[p] = epoch
        self.owned.add(p)
        self.fenced_partitions.discard(p)
        self.blocked.pop(p, None)
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
        resolver = self._resolvers.pop(p, None)
        if resolver is not None:
            resolver.cancel()
            await asyncio.gather(resolver, return_exceptions=True)
        idle = self._idle.get(p)
        if idle is not None:
            try:
                await asyncio.wait_for(idle.wait(), 30)
            except TimeoutError:
                log.warning("state partition %d: the write in flight did not finish within 30 s of its release", p)
        await self._release_writer(p)
        if was_owned:
            log.info("state partition %d released", p)

    async def _hand_over(self, p: int) -> None:
        """The hooks' writes, then the released mark; bounded, and never raising: letting go must
        not depend on the backend."""
        epoch = self._own_epochs[p]
        try:
            async with asyncio.timeout(HANDOVER_TIMEOUT_S):
                for hook in self.handover_hooks:
                    await hook(p)
                if p not in self.owned or self.blocked.get(p):
                    return  # lost meanwhile (fenced, the lease lapsed): the mark is not ours to write
                self.blocked[p] = "releasing"  # later writes fail; the mark is the tenure's last record
                idle = self._idle.get(p)
                if idle is not None:
                    await idle.wait()
                await self._commit(p, [codec.owner_record(p, epoch, self.node_id, released=True)])
            self.handovers += 1
            log.info("state partition %d handed over (owner epoch %d): marked released", p, epoch)
        except Exception as exc:  # noqa: BLE001 - a handover is best effort; the release goes on
            log.warning("state partition %d: its handover could not be written (%r); the next owner takes it "
                        "over without it, as after a crash", p, exc)

    def drop_all(self, reason: str) -> list[int]:
        """Forget every partition owned or being taken over, writing nothing (the lease lapsed).
        A batch being committed is answered at once, its outcome unknown (the backend is what we
        cannot reach; waiting for the commit's timeout held clients' acknowledgements for 30 s)."""
        gone = sorted(self.owned | {p for p, r in self.blocked.items() if r == "acquiring"})
        for p in gone:
            for op in self._flushing.get(p, []):
                if not op.future.done():
                    op.future.set_exception(CommitOutcomeUnknownError(
                        f"state partition {p}: this sidecar's lease lapsed while the write was in flight; its "
                        f"outcome is unknown"))
            self._forget(p)
            task = asyncio.get_running_loop().create_task(self._release_writer(p), name=f"kshare-persist-drop-{p}")
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        if gone:
            log.error("state partitions %s dropped without a handover: %s", gone, reason)
        return gone

    def _forget(self, p: int) -> None:
        self.owned.discard(p)
        self._own_epochs.pop(p, None)
        self.blocked[p] = "unowned"
        for op in self._queues.get(p, []):
            if not op.future.done():
                op.future.set_exception(self._blocked_error(p))
        if p in self._queues:
            self._queues[p].clear()
        gone = {k for k in self._entities if self._home(k) == p}
        for k in gone:
            del self._entities[k]
        self._notify(self.released_listeners, p, gone)

    def abandon(self, p: int) -> None:
        """A takeover of ``p`` no longer assigned: it stops before it writes its owner record."""
        if self.blocked.get(p) == "acquiring":
            self.blocked[p] = "unowned"

    def lose(self, p: int, newer: int) -> None:
        """A newer owner of ``p`` was seen (the state topic's tail): drop ``p`` now."""
        self._lose(p, newer)

    def _lose(self, p: int, newer: int) -> None:
        """Fenced by a newer owner of ``p`` without the group having told us yet: drop ``p`` only."""
        if p not in self.owned and self.blocked.get(p) == "unowned":
            return
        log.error("state partition %d is owned by another sidecar now (owner epoch %d > ours %s); dropping it",
                  p, newer, self._own_epochs.get(p))
        self._forget(p)
        task = asyncio.get_running_loop().create_task(self._release_writer(p), name=f"kshare-persist-lose-{p}")
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _release_writer(self, p: int) -> None:
        """Drop ``p``'s backend writer (the topic persister's transactional producer)."""
        drop = getattr(self, "_drop_producer", None)
        if drop is not None:
            await drop(p)

    def _home(self, key: Any) -> int:
        from kshare_sidecar.persist.ownership import state_partition_for
        return state_partition_for(key[0], key[1], self.partitions, self.placement)

    @staticmethod
    def _notify(listeners: list[OwnershipListener], p: int, keys: set[EntityKey]) -> None:
        for listener in listeners:
            try:
                listener(p, keys)
            except Exception:
                log.exception("state partition %d: ownership listener failed", p)
