"""Which share-partitions this sidecar leads, within its lease, and the planned handover of a state
partition (the `Leadership` part of `SharePartitionCache`, share/cache.py).

Serving is bounded by a lease (cluster/lease.py; ``serving``): a cluster member's membership of
the sidecars' group, a single sidecar's backend answering it. Past it nothing is loaded, fetched
or acknowledged here (NOT_LEADER_OR_FOLLOWER). A planned move of a state partition
(``hand_over``) writes the records its share-partitions had handed out as AVAILABLE with the
attempt counted, so the next owner's delivery counts up.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..persist.codec import KIND_PARTITION
from ..persist.errors import PersistError
from ..persist.model import SharePartitionKey
from ..protocol.errors import KafkaError
from .reload_memory import ReloadMemory
from .engine.holds import HOLDERS
from .slot import Slot

log = logging.getLogger("kshare.partitions")


class PartitionError(KafkaError):
    """One share-partition cannot serve this request (its error code goes into that partition's answer)."""


class Leadership:
    """Needs ``persister``, ``cluster``, ``epoch``, ``lease``, ``slots``, ``evicted``,
    ``reload_memory``, ``_handing_over``, ``handed_over`` and ``quiescing`` (set by `SharePartitionCache`)."""

    persister: Any
    cluster: bool
    epoch: int
    lease: Any
    slots: dict[SharePartitionKey, Slot]
    quiescing: bool
    evicted: dict
    reload_memory: ReloadMemory
    _handing_over: set[int]
    handed_over: int
    watch: Any  # MetricWatch.watch
    drop_slot: Callable[[SharePartitionKey], Slot]  # MetricWatch.drop_slot

    @property
    def serving(self) -> bool:
        """Within the lease: records may be handed out and acknowledged here."""
        return self.lease is None or self.lease.valid()

    def quiesce(self) -> None:
        """The sidecar is stopping: acquire nothing more and wake every parked ShareFetch, so each
        answers with the records it already acquired; the caller then lets the answers in flight
        be written before closing connections (an answer with records that is never written
        counts an attempt no consumer saw). Acknowledgements still apply until the handover."""
        self.quiescing = True
        for slot in list(self.slots.values()):
            slot.wake()

    def home(self, key: SharePartitionKey) -> int:
        """The state partition holding ``key`` (its owner leads the share-partition)."""
        return self.persister.home((KIND_PARTITION, key))

    def epoch_for(self, key: SharePartitionKey) -> int:
        """The owner epoch this sidecar claims and writes ``key`` with."""
        if not self.cluster:
            return self.epoch
        epoch = self.persister.epoch_of(self.home(key))
        if epoch is None:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"share-partition {key.group_id}/{key.topic_id}/{key.partition} is led by "
                                 f"another sidecar")
        return epoch

    def serving_slot(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Slot | None:
        """The loaded share-partition a fetch or acknowledgement may use now (None past the lease:
        the caller then finds out why, through :meth:`leads`)."""
        if not self.serving:
            return None
        slot = self.slots.get(SharePartitionKey(group_id, str(topic_id), partition))
        if slot is not None:
            self.watch(slot)
        return slot

    def leads(self, topic_id: uuid.UUID, partition: int) -> bool:
        """Does this sidecar lead the share-partitions of this user partition (always, alone, while
        its lease holds)?"""
        if not self.cluster:
            return self.serving
        home = self.home(SharePartitionKey("", str(topic_id), partition))
        return home not in self._handing_over and self.persister.owns(home)

    def _writer_epoch(self, slot: Slot) -> int:
        """The epoch a slot writes with: the one it was claimed at (a cluster's per-partition epoch)."""
        return slot.partition.leader_epoch if self.cluster else self.epoch

    def _ownership_changed(self, p: int, _keys) -> None:
        """A state partition was taken over or given up: its loaded share-partitions are stale
        either way (they reload from the replayed state, or are led elsewhere now)."""
        gone = [key for key in self.slots if self.home(key) == p]
        for key in [k for k in self.evicted if self.home(k) == p]:
            del self.evicted[key]
        self.reload_memory.forget(lambda k: self.home(k) == p)
        for key in gone:
            slot = self.drop_slot(key)
            slot.dead = True
            slot.wake()
        if gone:
            log.info("state partition %d changed owner: %d loaded share-partitions dropped", p, len(gone))

    async def hand_over(self, p: int) -> None:
        """A planned release of state partition ``p`` (persister hook, while ``p`` is still owned):
        stop serving its share-partitions, then write each one with the records its members hold
        released — AVAILABLE with the attempt counted, ARCHIVED at the delivery limit (a member's
        release, Kafka 4.2+'s rule) — so the next owner's delivery counts up."""
        self._handing_over.add(p)
        try:
            slots = [self.drop_slot(key) for key in [k for k in self.slots if self.home(k) == p]]
            for slot in slots:
                slot.dead = True  # no acquisition from here on (checked before each one), no other write
                slot.wake()
            await asyncio.gather(*(self._write_handover(slot) for slot in slots))
        finally:
            self._handing_over.discard(p)

    async def _write_handover(self, slot: Slot) -> None:
        async with slot.write_lock:  # an acknowledgement being written finishes first
            sp = slot.partition
            released = sum(sp.release_member(m) for m in sp.members() if m not in HOLDERS)
            try:
                await self.persister.write(slot.key, sp.snapshot(), self._writer_epoch(slot))
            except PersistError as exc:
                log.warning("handover of %s not written (%s): its next owner redelivers with the counts last "
                            "written", _name(slot.key, slot.topic), exc)
                return
            self.handed_over += released
            if released:
                log.info("handover of %s: %d records in flight written back with their delivery counts",
                         _name(slot.key, slot.topic), released)


def _name(key: SharePartitionKey, topic: str) -> str:
    return f"group={key.group_id} partition={topic}-{key.partition}"
