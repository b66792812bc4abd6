"""Acquisition locks: one per AcquiredRecords piece, expired through a deadline heap.

A lock does not list its records. It remembers the offset span it was created for and how many
records it still holds (`live`); the records point at it. Expiry walks only the ranges inside
that span, and heap entries are deleted lazily (an entry is stale when the lock's deadline
changed or it holds nothing any more), so neither expiry nor acknowledgement scans all records.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class Lock:
    """An acquisition lock held by one member over records inside [first, last]."""

    __slots__ = ("member", "deadline", "first", "last", "live", "seq")

    def __init__(self, member: str, deadline: int, first: int, last: int, live: int, seq: int) -> None:
        self.member = member
        self.deadline = deadline
        self.first = first
        self.last = last
        self.live = live  # records still ACQUIRED under this lock
        self.seq = seq

    def __repr__(self) -> str:
        return (
            f"Lock({self.member!r}, deadline={self.deadline}, "
            f"[{self.first}, {self.last}], live={self.live})"
        )


class LockTable:
    """Live locks by member plus a min-heap of (deadline, seq, lock) with lazy deletion."""

    __slots__ = ("_heap", "_by_member", "_seq", "_live")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Lock]] = []
        self._by_member: dict[str, dict[Lock, None]] = {}
        self._seq = 0
        self._live = 0

    def new(self, member: str, deadline: int, first: int, last: int, live: int, kind: type[Lock] = Lock) -> Lock:
        """A new live lock; ``kind`` may be a Lock subclass (share/engine/holds.py: locks the sidecar holds)."""
        self._seq += 1
        lock = kind(member, deadline, first, last, live, self._seq)
        self._by_member.setdefault(member, {})[lock] = None
        self._live += 1
        heap = self._heap
        heapq.heappush(heap, (deadline, lock.seq, lock))
        if len(heap) > 64 and len(heap) > 4 * self._live:
            self._compact()
        return lock

    def drop(self, lock: Lock) -> None:
        """Forget a lock that holds no records any more (its heap entry goes stale)."""
        locks = self._by_member.get(lock.member)
        if locks is not None and lock in locks:
            del locks[lock]
            self._live -= 1
            if not locks:
                del self._by_member[lock.member]

    def pop_expired(self, now: int) -> Iterator[Lock]:
        """Yield live locks whose deadline is <= now, in deadline order."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, lock = heapq.heappop(heap)
            if lock.live > 0 and lock.deadline == deadline:
                yield lock

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, _, lock = heap[0]
            if lock.live > 0 and lock.deadline == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def member_locks(self, member: str) -> list[Lock]:
        return list(self._by_member.get(member, ()))

    def holds_any(self, member: str) -> bool:
        """Whether ``member`` has a live lock (a lock's entry goes when its last record does)."""
        return member in self._by_member

    def members(self) -> list[str]:
        return list(self._by_member)

    def empty(self) -> bool:
        """No live lock (of a member or of the sidecar's holds)."""
        return not self._by_member

    def clear(self) -> None:
        for locks in self._by_member.values():
            for lock in locks:
                lock.live = 0
        self._heap.clear()
        self._by_member.clear()
        self._live = 0

    @property
    def heap_size(self) -> int:
        return len(self._heap)

    def _compact(self) -> None:
        self._heap = [(lk.deadline, lk.seq, lk) for locks in self._by_member.values() for lk in locks]
        heapq.heapify(self._heap)
