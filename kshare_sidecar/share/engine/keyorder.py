"""Key-ordered sharing (kshare's share.key.ordering, seed 001's key-based sharing; docs/extensions.md).

Rule: a record with key k may be delivered only when every earlier record of k in the
share-partition is done (ACKNOWLEDGED or ARCHIVED). So at most one record per key is in flight
at a time, and a key's records are delivered — hence acknowledged — in offset order, while
records of other keys flow to other members in parallel. Records without a key are not ordered.

How: the engine acquires whole log batches as usual; `KeyIndex.split` then looks at each
acquired offset's key and keeps only the offsets at the head of their key; the others go back
under a key-order hold (share/engine/holds.py) with their delivery count restored — they were never
handed to a consumer. When a key's head becomes terminal, the next record of the key (if it is
waiting under a key-order hold) is released and can be acquired by anyone.

The index keeps, per key, a min-heap of the key's offsets that are not known to be done; an
entry is dropped lazily when it is found terminal. Keys are learned when records are acquired
(the caller decodes them from the fetched batches, share/engine/extended.py never sees bytes). Pure.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

Key = bytes
#: ``is_done(offset) -> bool``: the record is terminal (or below the SPSO)
IsDone = Callable[[int], bool]


class KeyIndex:
    """Keys of the window's records and, per key, its not-yet-done offsets."""

    __slots__ = ("_pending", "keys")

    def __init__(self) -> None:
        self.keys: dict[int, Key | None] = {}
        self._pending: dict[Key, list[int]] = {}

    def learn(self, offset: int, key: Key | None) -> None:
        """Record ``offset``'s key (once; a record's key never changes)."""
        if offset in self.keys:
            return
        self.keys[offset] = key
        if key is not None:
            heapq.heappush(self._pending.setdefault(key, []), offset)

    def knows(self, offset: int) -> bool:
        return offset in self.keys

    def head(self, key: Key, is_done: IsDone) -> int | None:
        """The key's lowest offset that is not done (None: none left)."""
        heap = self._pending.get(key)
        if heap is None:
            return None
        while heap and is_done(heap[0]):
            heapq.heappop(heap)
        if not heap:
            del self._pending[key]
            return None
        return heap[0]

    def deliverable(self, offset: int, is_done: IsDone) -> bool:
        """May ``offset`` (learned) be handed out now: no key, or the head of its key."""
        key = self.keys.get(offset)
        return key is None or self.head(key, is_done) == offset

    def keys_of(self, offsets: Iterable[int]) -> set[Key]:
        keys = self.keys
        return {k for o in offsets if (k := keys.get(o)) is not None}

    def prune(self, below: int) -> None:
        """Forget offsets below ``below`` (the SPSO: all done)."""
        if len(self.keys) > 4096:
            self.keys = {o: k for o, k in self.keys.items() if o >= below}

    def pending_keys(self) -> list[Key]:
        return list(self._pending)

    def pending_count(self) -> int:
        """Keys with records not known to be done (their heads in flight or waiting)."""
        return len(self._pending)
