"""The share-partition (Kafka's SharePartition): one (group, topic, partition)'s in-flight records.

This module is the facade the service layer uses. The parts live beside it, each a class the
facade inherits, all built on the window of share/engine/ranges.py:

* share/engine/ranges.py — `InFlight`: the ranges [SPSO, end), counters, split/merge/advance, lock release;
* share/engine/acquire.py — `Acquisition`: `next_fetch_offset`, `acquire` from log batch headers;
* share/engine/acks.py — `Acknowledgement`: `prepare_acknowledge` / `commit` (two-phase) and `AckPlan`.

Here: acquisition-lock expiry and members leaving, log start movement, admin reset, and the
persisted form (snapshot/restore). Pure: no I/O, no asyncio, time only from the injected clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Self

from kshare_sidecar.persist.model import PartitionState
from kshare_sidecar.share.engine.acks import Acknowledgement
from kshare_sidecar.share.engine.acquire import Acquisition
from kshare_sidecar.share.engine.config import ShareConfig
from kshare_sidecar.share.engine.persisted import to_partition_state
from kshare_sidecar.share.engine.ranges import Clock, InFlightRange
from kshare_sidecar.states import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, RecordState

__all__ = ["Clock", "SharePartition"]


class SharePartition(Acquisition, Acknowledgement):
    """One share-partition: acquisition, acquisition locks, acknowledgements, SPSO/SPEO, snapshots."""

    # ------------------------------------------------------------------ views

    def next_lock_deadline(self) -> int | None:
        """Earliest live acquisition-lock deadline (ms), for the caller's timer."""
        return self._locks.next_deadline()

    def members(self) -> list[str]:
        """Members currently holding acquisition locks."""
        return self._locks.members()

    def quiet(self) -> bool:
        """Nothing acquired: no acquisition lock and no hold of the sidecar's (holds are locks of
        pseudo-members), so its persisted snapshot rebuilds it (the caller may drop it while idle)."""
        return self._locks.empty()

    def ranges(self) -> Iterator[tuple[int, int, RecordState, int, str | None, int | None]]:
        """The window as (first, last, state, delivery_count, member, lock_deadline) ranges."""
        for r in self._rs:
            lk = r.lock
            yield (
                r.first,
                r.last,
                RecordState(r.state),
                r.count,
                lk.member if lk is not None else None,
                lk.deadline if lk is not None else None,
            )

    # ------------------------------------------------------------ acquisition locks

    def expire(self, now: int | None = None) -> int:
        """Release records whose acquisition lock deadline is <= now (default: the clock).

        Expired records become AVAILABLE with their delivery count unchanged, or ARCHIVED when the
        count reached the limit. Returns how many records changed state: non-zero means waiting
        fetches may now find records (or the window moved) and should be woken.
        """
        if now is None:
            now = self._clock()
        released = 0
        for lock in list(self._locks.pop_expired(now)):
            released += self._release_lock(lock)
        if released:
            self.version += 1
            self._advance()
        return released

    def release_member(self, member_id: str) -> int:
        """Release everything `member_id` holds (share session closed, member left, TCP disconnect).

        Delivery counts are kept (Kafka 4.2+: the attempt counts), so records at the limit are archived.
        Returns the number of records released.
        """
        locks = self._locks.member_locks(member_id)
        if not locks:
            return 0
        locks.sort(key=lambda lk: lk.first)
        released = 0
        for lock in locks:
            released += self._release_lock(lock)
        self.version += 1
        self._advance()
        return released

    # ------------------------------------------------------------ log start, reset, persistence

    def move_log_start(self, offset: int) -> int:
        """The log start offset moved to `offset`: archive AVAILABLE records below it.

        Records still ACQUIRED below it stay with their member (an ack of any type, a release or an
        expiry then ends them as terminal) and hold SPSO until then. Returns records archived.
        """
        if offset <= self._log_start:
            return 0
        self._log_start = offset
        if offset <= self._spso:
            return 0
        archived = 0
        rs = self._rs
        if offset > self._end:
            gap = offset - self._end
            if rs and rs[-1].state == ARCHIVED and rs[-1].count == 0:
                rs[-1].last = offset - 1
            else:
                self._firsts.append(self._end)
                rs.append(InFlightRange(self._end, offset - 1, ARCHIVED, 0))
            self._end = offset
            self._terminal += gap
            archived += gap
        j = self._split(offset)
        for k in range(j):
            r = rs[k]
            if r.state == AVAILABLE:
                size = r.last - r.first + 1
                r.state = ARCHIVED
                self._available -= size
                self._terminal += size
                archived += size
        if j:
            self._coalesce(0, j - 1)
        self.version += 1
        self._advance()
        return archived

    def reset(self, start_offset: int, state_epoch: int) -> None:
        """Admin reset (alterShareGroupOffsets/delete): drop all in-flight state, new SPSO and state epoch."""
        if start_offset < 0:
            raise ValueError("start_offset must be >= 0")
        start = max(start_offset, self._log_start)
        self._locks.clear()
        self._rs.clear()
        self._firsts.clear()
        self._spso = self._end = start
        self._terminal = self._available = 0
        self._avail_hint = start
        self.state_epoch = state_epoch
        self.version += 1

    def snapshot(self) -> PartitionState:
        """The persisted form: SPSO plus the non-trivial ranges of the window.

        ACQUIRED records are written as AVAILABLE with the count they had before this acquisition
        (count - 1), so a crash replays the attempt; AVAILABLE with count 0 is left out.
        """
        return to_partition_state(
            ((r.first, r.last, r.state, r.count, None, None) for r in self._rs),
            self._end,
            self.state_epoch,
            self.leader_epoch,
        )

    def counts(self) -> PartitionState:
        """:meth:`snapshot` with every acquisition counted (count, not count - 1): what this
        share-partition handed out, the floor for a reload of it in the same process."""
        return to_partition_state(
            ((r.first, r.last, AVAILABLE if r.state == ACQUIRED else r.state, r.count, None, None) for r in self._rs),
            self._end,
            self.state_epoch,
            self.leader_epoch,
        )

    @classmethod
    def restore(cls, state: PartitionState, clock: Clock, config: ShareConfig) -> Self:
        """Rebuild a share-partition from its persisted form (after a restart or ownership move).

        Offsets of the window not covered by a state batch are AVAILABLE with delivery count 0; the
        window ends after the last state batch. A persisted ACQUIRED state is read as AVAILABLE.
        """
        if state.start_offset < 0:
            raise ValueError("start_offset -1 (uninitialized) must be resolved by the caller first")
        sp = cls(
            config,
            clock,
            start_offset=state.start_offset,
            state_epoch=state.state_epoch,
            leader_epoch=state.leader_epoch,
        )
        pos = sp._spso
        rs = sp._rs
        firsts = sp._firsts
        prev_last: int | None = None
        for b in state.state_batches:
            if b.last_offset < b.first_offset or (prev_last is not None and b.first_offset <= prev_last):
                raise ValueError(f"state batches must be ascending and non-overlapping: {b}")
            prev_last = b.last_offset
            f = b.first_offset if b.first_offset > pos else pos
            last = b.last_offset
            if last < f:
                continue
            if f > pos:
                firsts.append(pos)
                rs.append(InFlightRange(pos, f - 1, AVAILABLE, 0))
                sp._available += f - pos
            st = int(b.delivery_state)
            if st not in (AVAILABLE, ACKNOWLEDGED, ARCHIVED):
                st = AVAILABLE
            c = b.delivery_count
            prev = rs[-1] if rs else None
            if prev is not None and prev.state == st and prev.count == c:
                prev.last = last
            else:
                firsts.append(f)
                rs.append(InFlightRange(f, last, st, c))
            size = last - f + 1
            if st == AVAILABLE:
                sp._available += size
            else:
                sp._terminal += size
            pos = last + 1
        sp._end = pos
        sp._advance()
        return sp

    def held(self) -> list[tuple[int, int, int, str, int]]:
        """The records members hold: (first, last, delivery count, member, lock deadline) pieces."""
        return [(r.first, r.last, r.count, r.lock.member, r.lock.deadline) for r in self._rs
                if r.state == ACQUIRED and r.lock is not None]

    def adopt(self, held: list[tuple[int, int, int, str, int]]) -> int:
        """Hold again what members held before this share-partition was rebuilt from its durable
        state in the same process (a reload after a state write whose outcome was unknown).
        Acquisitions are never persisted, so the durable state shows those records AVAILABLE; the
        members still work on them under locks whose deadlines have not passed, so handing them
        out again would give one record to two holders at once. Each piece whose records the
        durable state leaves AVAILABLE is ACQUIRED again by its member until its old deadline,
        counted as memory counted it; records the durable state has done (the unknown write did
        land) stay done. Returns how many records were held again."""
        taken = 0
        rs = self._rs
        for first, last, count, member, deadline in held:
            first = max(first, self._spso)
            if last < first:
                continue
            if last >= self._end:  # read past the durable window: the offsets between are plain AVAILABLE
                self._firsts.append(self._end)
                rs.append(InFlightRange(self._end, last, AVAILABLE, 0))
                self._available += last - self._end + 1
                self._end = last + 1
            lock = self._locks.new(member, deadline, first, last, 0)
            i, j = self._split(first), self._split(last + 1)
            for r in rs[i:j]:
                if r.state == AVAILABLE:
                    size = r.last - r.first + 1
                    r.state, r.count, r.lock = ACQUIRED, max(r.count, count), lock
                    lock.live += size
                    self._available -= size
            if lock.live == 0:
                self._locks.drop(lock)
            taken += lock.live
        if taken:
            self.version += 1
        return taken

    def __repr__(self) -> str:
        return (
            f"SharePartition(spso={self._spso}, end={self._end}, ranges={len(self._rs)}, "
            f"terminal={self._terminal}, available={self._available})"
        )
