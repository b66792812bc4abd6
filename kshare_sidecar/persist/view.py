"""The persister's in-memory view of the state topic: every entity by ``(kind, identity)``, where
each lives (its state partition), and whether the view may be served.

One object, shared by the persister's parts (persist/base.py composes them): the writer applies
committed batches to it, replay and reloads replace it (all of it, or one state partition's
share), the cluster part forgets a released partition's entities. It holds no rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kshare_sidecar.persist.errors import NotReadyError, PersisterClosedError
from kshare_sidecar.persist.placement import LAYOUT, PLACEMENTS, EntityKey, state_partition_for

if TYPE_CHECKING:
    from kshare_sidecar.persist.store import StateStore


class StateView:
    """Entities by key, their placement on the store's partitions, and the serving flags."""

    def __init__(self, name: str, store: StateStore, placement: str = LAYOUT) -> None:
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        self.name = name
        self.store = store
        #: where share-partition records go (layout.PLACEMENTS): "topic-partition", alone or in a
        #: cluster; "key" only to emulate an older build's single sidecar (tests)
        self.placement = placement
        self.entities: dict[EntityKey, Any] = {}
        self.ready = False  # recovery finished: requests are served
        self.closed = False

    @property
    def partitions(self) -> int:
        """The state topic's partition count (the store's: an existing topic's count is adopted)."""
        return self.store.partitions

    def home(self, key: EntityKey) -> int:
        """The state partition holding entity ``key``."""
        return state_partition_for(key[0], key[1], self.store.partitions, self.placement)

    def on(self, p: int) -> dict[EntityKey, Any]:
        """The entities on state partition ``p``."""
        return {k: v for k, v in self.entities.items() if self.home(k) == p}

    def forget(self, p: int) -> set[EntityKey]:
        """Drop every entity of state partition ``p``; returns their keys."""
        gone = {k for k in self.entities if self.home(k) == p}
        for k in gone:
            del self.entities[k]
        return gone

    def check_serving(self) -> None:
        if self.closed:
            raise PersisterClosedError(f"{self.name} persister is closed")
        if not self.ready:
            raise NotReadyError(f"{self.name} persister is loading its state")
