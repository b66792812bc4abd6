"""Writes of share-partitions' state: serialised per share-partition, awaited or queued.

Each persisted value is a complete snapshot, so two writes of one share-partition must never race
(the later snapshot would silently drop the earlier change): every write holds the slot's write
lock. An acknowledgement is validated, written, then applied (two-phase, ``persist_plans``); a
change nobody waits for (a lock expiry, a release on session close) is written soon after
(``persist_soon``); records such a change made available are handed out again only once it is
durable (``made_durable``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..metrics import STATS as _METRICS
from ..metrics import WRITE_LATENCY as _WRITE_LATENCY
from ..persist.errors import PersistError
from ..persist.model import SharePartitionKey
from ..ratelog import RateLimitedLog
from .engine.holds import DEAD_LETTER, HOLDERS
from .leadership import _name
from .slot import Slot

log = logging.getLogger("kshare.partitions")
#: a failed state write repeats with every request while the backend or the state partition is
#: unavailable: a few lines a minute per kind, the rest counted (kshare_state_write_failures_total)
_write_failures = RateLimitedLog(log)


class StateWrites:
    """Mixed into :class:`~kshare_sidecar.share.cache.SharePartitionCache`."""

    # the cache's (declared for the type checker)
    persister: Any
    _background: set[asyncio.Task]
    retire: Callable[..., None]
    track: Callable[[Slot], None]
    _changed: Callable[[Slot], None]
    _writer_epoch: Callable[[Slot], int]

    async def persist_plans(self, planned: list[tuple[Slot, object]]) -> dict[SharePartitionKey, ErrorCode]:
        """Write each plan's resulting state, then apply it; per share-partition outcome.

        Holds each share-partition's write lock from prepare to commit, so durable snapshots are
        written in the order their changes are applied."""
        if len(planned) == 1:  # the usual ShareFetch: one partition's acks, awaited without a task of its own
            key, code = await self._persist_plan(*planned[0])
            return {key: code}
        return dict(await asyncio.gather(*(self._persist_plan(slot, plan) for slot, plan in planned)))

    async def _persist_plan(self, slot: Slot, plan) -> tuple[SharePartitionKey, ErrorCode]:
        async with slot.write_lock:
            is_ack = isinstance(plan, PendingAcks)
            plan = slot.partition.prepare_acknowledge(plan.member_id, plan.batches, allow_renew=plan.allow_renew) \
                if isinstance(plan, PendingAcks) else plan
            if plan.error != ErrorCode.none:
                return slot.key, plan.error
            if slot.dead:  # checked with no await before the write is queued
                return slot.key, ErrorCode.not_leader_or_follower
            try:
                with _WRITE_LATENCY.time():
                    await self.persister.write(slot.key, plan.state, self._writer_epoch(slot))
            except PersistError as exc:
                _METRICS.state_write_failures += 1  # the alert rules (compose/prometheus/)
                _write_failures.log("ack", logging.WARNING, "state write for %s failed, acknowledgement rolled "
                                    "back: %s", _name(slot.key, slot.topic), exc)
                return slot.key, _ack_error(exc)
            slot.start_unset = slot.dirty = False  # the snapshot written carries the resolved SPSO
            # ... and, once committed, everything memory holds (a lock expiry whose write had failed)
            code = slot.partition.commit(plan)
            if code != ErrorCode.none:
                # Memory changed between prepare and commit (e.g. the records' locks expired while
                # the write was in flight). The write is durable, so memory must follow it, never the
                # reverse: writing memory again here rolled the SPSO back. Reload from the
                # durable state; the acknowledgement is durable, so it succeeded.
                log.warning("share-partition %s changed during its state write (%s); reloading it from the "
                            "durable state", _name(slot.key, slot.topic), code.name)
                self.retire([slot.key])
                code = ErrorCode.none
            if is_ack and code == ErrorCode.none and plan.member_id not in HOLDERS:
                _METRICS.count_acks(plan.runs)
            elif is_ack and code == ErrorCode.none and plan.member_id == DEAD_LETTER:  # archived after the DLQ write
                group = slot.key.group_id
                _METRICS.group_dead_lettered[group] = _METRICS.group_dead_lettered.get(group, 0) + sum(
                    last - first + 1 for first, last, _t in plan.runs)
        slot.wake_acquirers()
        self.track(slot)
        self._changed(slot)
        return slot.key, code

    def persist_soon(self, slot: Slot) -> None:
        """Persist a change nobody waits for (lock expiry, release on session close)."""
        slot.unsaved += 1  # not evicted before it is written
        self._spawn(self._write_current(slot))

    async def _write_current(self, slot: Slot) -> None:
        try:
            async with slot.write_lock:
                if slot.dead:
                    return
                try:
                    with _WRITE_LATENCY.time():
                        await self.persister.write(slot.key, slot.partition.snapshot(), self._writer_epoch(slot))
                    slot.start_unset = slot.dirty = False
                except PersistError as exc:
                    slot.dirty = True  # kept in memory (never evicted) until a write succeeds
                    _METRICS.state_write_failures += 1  # the alert rules (compose/prometheus/)
                    _write_failures.log("current", logging.WARNING, "state write for %s failed: %s",
                                        _name(slot.key, slot.topic), exc)
        finally:
            slot.unsaved -= 1

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def made_durable(self, slot: Slot) -> bool:
        """Whether what memory holds of ``slot`` is durable, writing it now if a write of it is
        queued or failed. Records a lock expiry or a release made available go out again only
        once that is written: a redelivery counts them up, and if this sidecar then lost the
        share-partition without the write, the next leader would read them as never delivered and
        count them *down* (seen by the nemesis: a lock-expiry write failed while a backend broker
        was isolated, the record went out with count 2, the next owner's came with 1)."""
        if not (slot.unsaved or slot.dirty):
            return True
        async with slot.write_lock:
            if slot.dead:
                return False
            if not (slot.unsaved or slot.dirty):  # the queued write landed while we waited
                return True
            try:
                with _WRITE_LATENCY.time():
                    await self.persister.write(slot.key, slot.partition.snapshot(), self._writer_epoch(slot))
            except PersistError as exc:
                slot.dirty = True
                _METRICS.state_write_failures += 1
                _write_failures.log("release", logging.WARNING, "state write for %s failed; its released "
                                    "records wait for it: %s", _name(slot.key, slot.topic), exc)
                return False
            slot.start_unset = slot.dirty = False
            return True


@dataclass
class PendingAcks:
    """Acks to validate under the share-partition's write lock (so validation sees the state the
    write will be based on)."""

    member_id: str
    batches: list
    allow_renew: bool = False


def _ack_error(exc: PersistError) -> ErrorCode:
    """Partition-level error for a failed state write; never UNKNOWN_SERVER_ERROR for a retriable one
    (clients treat it as fatal). Fenced writer -> NOT_LEADER_OR_FOLLOWER, as a broker that lost
    leadership answers."""
    if exc.error_code in (ErrorCode.fenced_state_epoch, ErrorCode.fenced_leader_epoch):
        return ErrorCode.fenced_state_epoch
    if exc.error_code == ErrorCode.not_coordinator:
        return ErrorCode.not_leader_or_follower
    return ErrorCode.coordinator_not_available if exc.retriable else ErrorCode.unknown_server_error
