"""Ownership of the state partitions: owner epochs, owner records, and what happens after a
commit that failed, whose outcome is unknown, or that the backend fenced.

The ownership part of a persister (persist/base.py composes it): the writer tells it of a failed
commit (:meth:`Ownership.block`); it reads the truth back through the replay part and the store,
and unblocks the partition, takes it over again, or is superseded. The argument for why this
fences correctly is in docs/persistence.md ("Fencing"). Which state partition an entity lives on
is persist/layout.py's; those names are also importable from here, where callers outside persist/
have always found them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_OWNER, KIND_PARTITION
from kshare_sidecar.persist.errors import BackendWriteError, PersistError, WriterFencedError
from kshare_sidecar.persist.placement import EntityKey, group_home, share_partition_home, state_partition_for
from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.persist.records import NO_EPOCH

if TYPE_CHECKING:
    from kshare_sidecar.persist.replay import Replay
    from kshare_sidecar.persist.store import StateStore
    from kshare_sidecar.persist.view import StateView
    from kshare_sidecar.persist.writer import CoalescingWriter

__all__ = ["EntityKey", "Ownership", "group_home", "share_partition_home", "state_partition_for"]

log = logging.getLogger("kshare_sidecar.persist")


class PartialOwner(Protocol):
    """What ownership asks of the cluster part (persist/cluster.py), which builds on this module: in a
    cluster each owned state partition has its own owner epoch, and a partition lost to a newer
    owner is dropped alone."""

    enabled: bool
    owned: set[int]
    own_epochs: dict[int, int]

    def lose(self, p: int, newer: int) -> None: ...


class Ownership:
    """Takeover at start-up, blocking and resolving after failed commits, supersession."""

    def __init__(self, *, view: StateView, store: StateStore, writer: CoalescingWriter, replay: Replay) -> None:
        self.view = view
        self.store = store
        self.writer = writer
        self.replay = replay
        #: the cluster part, when this persister may join a cluster of sidecars (BasePersister sets it)
        self.cluster: PartialOwner | None = None
        #: This instance's owner epoch, taken from the backend at start (None before).
        self.owner_epoch: int | None = None
        self.owner_epochs: dict[int, int] = {}  # newest owner record per state partition
        self.fenced_partitions: set[int] = set()
        self.superseded = False
        self.reloads = 0  # partitions re-read after an unconfirmed or fenced commit
        self.takeovers = 0  # partitions taken over again after a fencing by a non-owner
        self.reload_listeners: list[Callable[[set[SharePartitionKey]], None]] = []
        self.superseded_listeners: list[Callable[[str], None]] = []
        self.resolvers: dict[int, asyncio.Task[None]] = {}
        #: how long a fenced writer that is still the newest owner waits before taking its
        #: partition back (a starting sidecar fences first and records its epoch just after)
        self.takeover_grace_s = store.takeover_grace_s

    async def take_ownership(self) -> None:
        """Take an owner epoch above every epoch the backend holds and record it on every partition.

        Runs after ``_open`` fenced every older writer and ``recover`` read to the last stable
        offset, so no commit can land between the read and ours without fencing ours: a newer
        sidecar always ends up with a larger epoch, whatever the clocks say."""
        epoch = self.replay.recovery_stats.owner_epoch + 1
        results = await asyncio.gather(*(self.claim_partition(p, epoch) for p in range(self.view.partitions)),
                                       return_exceptions=True)
        for p, res in enumerate(results):
            if isinstance(res, BaseException):
                if isinstance(res, PersistError):
                    raise res
                raise BackendWriteError(f"state partition {p}: cannot record owner epoch {epoch}: {res!r}")
            self.owner_epochs[p] = epoch
        self.owner_epoch = epoch
        log.info("%s persister owns %d state partitions at owner epoch %d", self.view.name, self.view.partitions, epoch)

    async def claim_partition(self, p: int, epoch: int, attempts: int = 10) -> None:
        """Commit the owner record of ``p``. Fenced meanwhile by an older owner re-asserting itself
        (it had not seen our record yet): take the partition again; by a newer owner: give up."""
        for attempt in range(attempts):
            try:
                await self.store.commit(p, [codec.encode(KIND_OWNER, p, epoch)])
                return
            except WriterFencedError as exc:
                newest = await self.replay.read_owner(p)
                if newest >= epoch:
                    raise WriterFencedError(f"state partition {p}: another sidecar (owner epoch {newest}) took "
                                            f"over during start-up: {exc}") from exc
                log.warning("state partition %d: fenced during start-up by owner epoch %d; taking it again", p, newest)
                await asyncio.sleep(0.1 * (attempt + 1))
                await self.store.reopen(p)
                await self.reload(p)
        raise WriterFencedError(f"state partition {p}: could not record owner epoch {epoch} in {attempts} attempts")

    def block(self, p: int, reason: str, exc: BaseException) -> None:
        """Stop writes to ``p`` (queued ones fail: they may build on state that is not durable)
        and resolve what is durable in the background."""
        blocked = self.writer.blocked
        cluster = self.cluster
        if cluster is not None and cluster.enabled and p not in cluster.owned:  # released meanwhile
            reason = blocked.setdefault(p, "unowned")
        if reason == "fenced":
            self.fenced_partitions.add(p)
        blocked[p] = reason
        self.writer.fail_queued(p)
        log.warning("state partition %d blocked (%s): %s", p, reason, exc)
        if p not in self.resolvers and not self.view.closed and reason not in ("unowned", "acquiring"):
            task = asyncio.get_running_loop().create_task(self._resolve(p), name=f"kshare-persist-resolve-{p}")
            self.resolvers[p] = task
            task.add_done_callback(lambda _t: self.resolvers.pop(p, None))

    async def _resolve(self, p: int) -> None:
        """Bring partition ``p`` back in line with the backend, then unblock it.

        Unknown outcome: wait for the writer's last transaction to end (committed or aborted),
        then re-read. Fenced (or a writer left unusable): read the owner records first; a newer
        owner supersedes this instance for good, otherwise this instance is still the rightful
        owner and takes the partition over again (new writer, re-read, owner record)."""
        backoff = 0.1
        blocked = self.writer.blocked
        while not self.view.closed:
            try:
                fenced = blocked.get(p) == "fenced"
                if not fenced and not await self.store.settle(p):
                    blocked[p] = "fenced"
                    self.fenced_partitions.add(p)
                    continue
                if fenced:
                    if await self.newer_owner(p):
                        return
                    # A sidecar starting up fences before it records its epoch: give it time to
                    # do so rather than fencing it back at once, then look again.
                    await asyncio.sleep(self.takeover_grace_s)
                    if await self.newer_owner(p):
                        return
                    if self.cluster is not None and self.cluster.enabled and p not in self.cluster.owned:  # given away
                        return
                    await self.store.reopen(p)
                await self.store.await_stable(p)
                changed = await self.reload(p)
                if fenced:
                    if self.owner_epochs.get(p, NO_EPOCH) > self.own_epoch(p):
                        self.supersede(p, self.owner_epochs[p])
                        return
                    await self.store.commit(p, [codec.encode(KIND_OWNER, p, self.own_epoch(p))])
                    self.owner_epochs[p] = self.own_epoch(p)
                    self.takeovers += 1
                    log.warning("state partition %d: still the newest owner (epoch %s); took it over again",
                                p, self.own_epoch(p))
                for listener in self.reload_listeners:
                    try:
                        listener(changed)
                    except Exception:
                        log.exception("reload listener failed")
                blocked.pop(p, None)
                self.fenced_partitions.discard(p)
                log.info("state partition %d serving again after re-reading the backend (%d share-partitions "
                         "changed)", p, len(changed))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, WriterFencedError):
                    blocked[p] = "fenced"
                    self.fenced_partitions.add(p)
                log.warning("state partition %d: resolving after a failed commit: %r; retrying in %.1fs",
                            p, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    def own_epoch(self, p: int | None = None) -> int:
        """The owner epoch this instance writes state partition ``p`` at (NO_EPOCH: none)."""
        cluster = self.cluster
        if cluster is not None and cluster.enabled:  # each owned state partition has its own epoch
            return cluster.own_epochs.get(p, NO_EPOCH) if p is not None else NO_EPOCH
        return NO_EPOCH if self.owner_epoch is None else self.owner_epoch

    async def newer_owner(self, p: int) -> bool:
        """Supersede this instance if ``p`` has a newer owner record than ours."""
        newest = await self.replay.read_owner(p)
        if newest > self.own_epoch(p):
            self.supersede(p, newest)
            return True
        return False

    def supersede(self, p: int, newer: int) -> None:
        """A newer sidecar owns the state: stop serving for good (nothing is released or written).
        In a cluster only partition ``p`` is lost (another sidecar of the group took it)."""
        if self.cluster is not None and self.cluster.enabled:
            self.cluster.lose(p, newer)
            return
        if self.superseded:
            return
        self.superseded = True
        for q in range(self.view.partitions):
            self.writer.blocked[q] = "superseded"
            self.fenced_partitions.add(q)
            self.writer.fail_queued(q)
        reason = (f"state partition {p} is owned by a newer sidecar (owner epoch {newer} > ours {self.owner_epoch}); "
                  f"this sidecar stops serving share groups")
        log.error("%s", reason)
        for listener in self.superseded_listeners:
            try:
                listener(reason)
            except Exception:
                log.exception("superseded listener failed")

    async def reload(self, p: int) -> set[SharePartitionKey]:
        """Replace the in-memory view of partition ``p`` by what the backend holds; return the
        share-partitions whose durable state differs from what this instance believed."""
        entities, owners, stats = await self.replay.read_partition(p)
        if stats.misplaced:  # written after the start-up move, by an older build: not adopted, but said
            log.error("state partition %d holds %d share-partition records in the single-sidecar layout of older "
                      "builds (written after the topic was moved); they are not served: stop the sidecars and run "
                      "`kshare state migrate`", p, len(stats.misplaced))
        view = self.view
        old = view.on(p)
        for k in old:
            if k not in entities:
                del view.entities[k]
        view.entities.update(entities)
        self.owner_epochs[p] = owners.get(p, NO_EPOCH)
        self.reloads += 1
        return {k[1] for k in old.keys() | entities.keys()
                if k[0] == KIND_PARTITION and old.get(k) != entities.get(k)}
