"""What a share-partition rebuilt from its durable state keeps of the memory it replaces.

A share-partition whose durable state differs from memory (a state write whose outcome was
unknown: a broker isolated, a timeout) is dropped and read again, in the same process. Two
things memory knew are not in the state topic and must survive that reload:

* **Delivery counts.** Memory counted deliveries the state topic may not have: read back alone,
  a record delivered twice comes back counted once and its next delivery counts it *down* (seen
  by the nemesis with a backend broker isolated). The dropped share-partition's counts — every
  acquisition counted, since each was handed out — are a floor for the reload
  (``engine.persisted.with_count_floor``).
* **The records members hold.** Acquisitions are never persisted (Kafka's rule: a crash replays
  the attempt), but this is no crash: the members still work on those records under locks that
  have not run out, and the sidecar is still their leader. Read back alone they are AVAILABLE and
  the next fetch hands them to someone else, or to the same member a second time, while the first
  lock runs; their acknowledgements then act on the second acquisition. So the reload holds them
  again for their members until the old deadlines (``SharePartition.adopt``).

Kept per share-partition until a load of it succeeds (used once) or until this sidecar stops leading it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..persist.model import PartitionState, SharePartitionKey
from .engine.holds import HOLDERS
from .engine.partition import SharePartition
from .engine.persisted import with_count_floor

log = logging.getLogger("kshare.partitions")


@dataclass(frozen=True, slots=True)
class _Kept:
    floor: PartitionState  # the dropped share-partition's counts, acquisitions counted
    held: list[tuple[int, int, int, str, int]]  # its members' pieces (SharePartition.held)


class ReloadMemory:
    """Memory of share-partitions dropped for a reload, applied once at their next load."""

    def __init__(self) -> None:
        self._kept: dict[SharePartitionKey, _Kept] = {}

    def keep(self, key: SharePartitionKey, sp: SharePartition) -> None:
        held = [piece for piece in sp.held() if piece[3] not in HOLDERS]  # holds are the sidecar's own (persisted)
        self._kept[key] = _Kept(sp.counts(), held)

    def get(self, key: SharePartitionKey) -> _Kept | None:
        return self._kept.get(key)

    def drop(self, key: SharePartitionKey) -> None:
        """The reload succeeded: what was kept is in the share-partition now."""
        self._kept.pop(key, None)

    @staticmethod
    def raise_counts(kept: _Kept | None, durable: PartitionState, name: str) -> PartitionState:
        """``durable``, its counts raised to what memory counted."""
        if kept is None:
            return durable
        state, raised = with_count_floor(durable, kept.floor)
        if raised:
            log.warning("share-partition %s: %d record(s) keep the delivery counts memory had (the state "
                        "topic had fewer)", name, raised)
        return state

    @staticmethod
    def hold_again(kept: _Kept | None, sp: SharePartition, name: str, *, ordered: bool) -> None:
        """Give the rebuilt share-partition's members back the records they held. Not in a
        key-ordered group: its key index knows only what it acquired itself, and a record held
        outside it could let a later record of the same key go to another member."""
        if kept is None or not kept.held or ordered or kept.floor.state_epoch != sp.state_epoch:
            return  # (another state epoch: the group was reset meanwhile, nothing held survives it)
        taken = sp.adopt(kept.held)
        if taken:
            log.warning("share-partition %s: %d record(s) stay with the members that held them across the "
                        "reload", name, taken)

    def forget(self, gone: Callable[[SharePartitionKey], bool]) -> None:
        """Drop what was kept of share-partitions this sidecar no longer leads."""
        for key in [k for k in self._kept if gone(k)]:
            del self._kept[key]
