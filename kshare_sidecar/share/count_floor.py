"""Delivery counts kept across a reload of a share-partition from its durable state.

A share-partition whose durable state differs from memory (a state write whose outcome was
unknown: a broker isolated, a timeout) is dropped and read again. Memory counted deliveries the
state topic may not have: read back alone, a record delivered twice comes back counted once, and
the next delivery counts it down (seen by the nemesis with a backend broker isolated). So the
dropped share-partition's snapshot is kept as a floor and the reload counts each record it has
not done at least that often (``engine.persisted.with_count_floor``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..persist.model import PartitionState, SharePartitionKey
from .engine.persisted import with_count_floor

log = logging.getLogger("kshare.partitions")


class CountFloors:
    """Snapshots of share-partitions dropped for a reload, applied once at their next load."""

    def __init__(self) -> None:
        self._floors: dict[SharePartitionKey, PartitionState] = {}

    def keep(self, key: SharePartitionKey, snapshot: PartitionState) -> None:
        self._floors[key] = snapshot

    def apply(self, key: SharePartitionKey, durable: PartitionState, name: str) -> PartitionState:
        """``durable``, its counts raised to the floor kept for ``key`` (if any; used once)."""
        floor = self._floors.pop(key, None)
        if floor is None:
            return durable
        state, raised = with_count_floor(durable, floor)
        if raised:
            log.warning("share-partition %s: %d record(s) keep the delivery counts memory had (the state "
                        "topic had fewer)", name, raised)
        return state

    def forget(self, gone: Callable[[SharePartitionKey], bool]) -> None:
        """Drop the floors of share-partitions this sidecar no longer leads."""
        for key in [k for k in self._floors if gone(k)]:
            del self._floors[key]
