"""Acquisition: from the log batches a fetch read to records acquired under acquisition locks.

Kafka's SharePartition.acquire in kshare's range model, in two steps a reader can follow:
`_plan` walks the log batches and decides what happens to each AVAILABLE stretch of offsets
(an `Act`: acquire it, or archive it — holes, control batches, aborted transactions, records out
of attempts), changing nothing; `_apply` writes the acts into the window, cutting the acquired
stretches into `AcquiredRecords` pieces with one acquisition lock each. The work is per range
and per log batch, never per record (one `Act` per stretch, no other object per stretch).

Pure: no I/O, no asyncio, time only from the injected clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from kshare_sidecar.share.engine.locks import Lock
from kshare_sidecar.share.engine.ranges import InFlight, InFlightRange
from kshare_sidecar.share.engine.types import AcquiredRecords, AcquireMode
from kshare_sidecar.states import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE


@dataclass(slots=True, eq=False)
class Act:
    """Offsets [first, last] of one log batch and what the acquisition does to them.

    `_segments` makes one per AVAILABLE stretch with `state` AVAILABLE and `count` the delivery
    count so far (0 for offsets past the window's end); `_plan` then sets the new state (ACQUIRED,
    count + 1, possibly fewer offsets; or ARCHIVED, count kept). `starts_batch` marks the first
    acquired stretch of a log batch: a piece may be cut there once it holds BatchSize records.
    """

    first: int
    last: int
    state: int
    count: int
    starts_batch: bool = False


class Acquisition(InFlight):
    """Acquisition from log batches (and where the caller should read the log next)."""

    @property
    def free_locks(self) -> int:
        """Records the window may still grow by before max_record_locks (0 when full)."""
        return max(0, self._cap - (self._end - self._spso))

    def can_acquire(self) -> bool:
        """Whether a fetch could acquire anything (re-available records, or room to grow the window)."""
        return self._available > 0 or self._end - self._spso < self._cap

    def next_fetch_offset(self) -> int | None:
        """Where the caller should read the log from: the lowest re-available offset in the window,
        else the end of the window; None when the window is at max_record_locks with nothing re-available.
        """
        if self._available:
            rs = self._rs
            start = self._avail_hint if self._avail_hint > self._spso else self._spso
            i = bisect_right(self._firsts, start) - 1
            if i < 0:
                i = 0
            n = len(rs)
            while i < n:
                r = rs[i]
                if r.state == AVAILABLE:
                    self._avail_hint = r.first
                    return r.first
                i += 1
            raise AssertionError("available count out of sync")  # pragma: no cover
        if self._end - self._spso < self._cap:
            return self._end
        return None

    def acquire(
        self,
        member_id: str,
        batches: Iterable[Sequence[Any]],
        max_records: int,
        batch_size: int | None = None,
        *,
        mode: AcquireMode | int = AcquireMode.BATCH_OPTIMIZED,
        aborted_transactions: Iterable[tuple[int, int]] | None = None,
        fetch_offset: int | None = None,
    ) -> list[AcquiredRecords]:
        """Acquire records for `member_id` from the log batches read at `next_fetch_offset()`.

        `batches` are (base_offset, last_offset, producer_id, is_transactional, is_control) in log
        order, as one log read returned them: offsets between consecutive batches are taken to be
        gone from the log (compaction) and archived, and so are offsets between `fetch_offset` (the
        offset the log was read from, normally `next_fetch_offset()`) and the first batch when it is
        given; new offsets skipped before the first batch are archived too (the window stays
        contiguous). Whole log batches are acquired (MaxRecords is soft) unless `mode` is
        RECORD_LIMIT; only AVAILABLE offsets at or above SPSO and inside max_record_locks are taken.
        Control batches, and with `aborted_transactions` ([(producer_id, first_offset)], read_committed)
        aborted transactional batches, are archived instead of delivered. The result is cut at log
        batch boundaries into pieces of about `batch_size`, each with its own acquisition lock.
        """
        if max_records <= 0:
            return []
        if batch_size is None or batch_size <= 0:
            batch_size = max_records
        record_limit = mode == AcquireMode.RECORD_LIMIT
        acts = self._plan(batches, max_records, record_limit, aborted_transactions, fetch_offset)
        if not acts:
            return []
        return self._apply(member_id, acts, batch_size, record_limit)

    def _segments(self, lo: int, hi: int, out: list[Act]) -> None:
        """Fill `out` with the AVAILABLE stretches of [lo, hi] as undecided acts: ranges in the
        window, then new offsets."""
        out.clear()
        end = self._end
        if lo < end:
            rs = self._rs
            nrs = len(rs)
            top = hi if hi < end else end - 1
            i = bisect_right(self._firsts, lo) - 1
            if i < 0:
                i = 0
            while i < nrs:
                r = rs[i]
                if r.first > top:
                    break
                if r.state == AVAILABLE:
                    first = r.first if r.first > lo else lo
                    out.append(Act(first, r.last if r.last < top else top, AVAILABLE, r.count))
                i += 1
        if hi >= end:
            out.append(Act(lo if lo > end else end, hi, AVAILABLE, 0))

    def _plan(
        self,
        batches: Iterable[Sequence[Any]],
        max_records: int,
        record_limit: bool,
        aborted_transactions: Iterable[tuple[int, int]] | None,
        fetch_offset: int | None,
    ) -> list[Act]:
        """Walk the log batches and decide, per AVAILABLE stretch, acquire or archive (no mutation).

        Stops once MaxRecords is reached (at the end of the log batch, or exactly in RECORD_LIMIT
        mode), at max_record_locks (at the end of the log batch that crosses it, as Kafka does;
        exactly in RECORD_LIMIT mode or when the window was full already), or where poison-record
        throttling (Kafka 4.2+) ends the fetch: a record delivered `throttle_at` times or more goes
        out only in a fetch of its own, at most `max_records >> (count - throttle_at + 1)` records,
        alone on its last attempt.
        """
        strict = record_limit
        want = max_records
        spso = self._spso
        end = self._end
        floor = spso if spso > self._log_start else self._log_start
        cap_last = spso + self._cap - 1
        if cap_last < end - 1:
            cap_last = end - 1
        # Kafka (SharePartition.lastOffsetAndMaxRecordsToAcquire, acquireNewBatchRecords): while the
        # window has room, the records still allowed are counted from the fetch offset and rounded up
        # to the end of the log batch holding the last of them, so the batch that crosses
        # max_record_locks is acquired whole (the window may exceed the cap by less than one log
        # batch); only RECORD_LIMIT mode, and a window already full, stop exactly at the cap.
        whole = not record_limit and end - spso < self._cap
        limit = self._limit
        throttle = self._throttle
        throttle_at = self._throttle_at
        throttled = False
        segments = self._segments

        aborted: list[tuple[int, int]] = []
        if aborted_transactions:
            aborted = sorted(aborted_transactions, key=itemgetter(1))  # by first offset
        ai = 0
        active_aborted: set[int] = set()

        # highest offset this read accounts for; offsets after it and before the next batch are holes
        covered = (fetch_offset if fetch_offset < end else end) - 1 if fetch_offset is not None else None

        acts: list[Act] = []
        got = 0
        stop = False
        segs: list[Act] = []  # the current batch's AVAILABLE stretches, not decided yet

        for batch in batches:
            base, last, pid, txn, ctrl = batch[0], batch[1], batch[2], batch[3], batch[4]
            if aborted:
                while ai < len(aborted) and aborted[ai][1] <= last:
                    active_aborted.add(aborted[ai][0])
                    ai += 1
            drop = bool(ctrl) or (bool(txn) and pid in active_aborted)
            if ctrl:
                active_aborted.discard(pid)
            if base > cap_last:
                break
            # offsets missing from the log before this batch: archive what is still AVAILABLE there
            hlo = end if covered is None else covered + 1
            if hlo < floor:
                hlo = floor
            if hlo < base:
                segments(hlo, base - 1, segs)
                for act in segs:
                    act.state = ARCHIVED
                    acts.append(act)
            lo = base if base > floor else floor
            if covered is None or last > covered:
                if covered is not None and lo <= covered:  # already handled by this call
                    lo = covered + 1
                covered = last
            else:
                continue
            hi = last if last < cap_last or (whole and not strict) else cap_last
            if lo > hi:
                continue
            segments(lo, hi, segs)
            if drop:
                for act in segs:
                    act.state = ARCHIVED
                    acts.append(act)
                continue
            first_in_batch = True
            for act in segs:
                c = act.count
                if c >= limit:  # no attempts left (e.g. limit lowered since): archive, never deliver
                    act.state = ARCHIVED
                    acts.append(act)
                    continue
                if throttle and c >= throttle_at:
                    chunk = 1 if c + 1 >= limit else max(1, max_records >> (c - throttle_at + 1))
                    if not throttled:
                        if got:
                            stop = True  # a throttled redelivery goes out on its own
                            break
                        throttled = True
                        strict = True
                    if chunk < want:
                        want = chunk
                    if got >= want:
                        stop = True
                        break
                elif throttled:
                    stop = True
                    break
                n = act.last - act.first + 1
                if strict and got + n >= want:
                    n = want - got
                    act.last = act.first + n - 1
                    stop = True
                act.state = ACQUIRED
                act.count = c + 1
                act.starts_batch = first_in_batch
                acts.append(act)
                first_in_batch = False
                got += n
                if stop:
                    break
            if stop or got >= want:
                break
        return acts

    def _apply(self, member_id: str, acts: list[Act], batch_size: int, record_limit: bool) -> list[AcquiredRecords]:
        """Write the acts into the window, in offset order (new offsets extend it), and return the
        acquired pieces: contiguous, one delivery count, cut at a log batch's start once a piece
        holds `batch_size` records (never in RECORD_LIMIT mode), each under its own acquisition lock.
        """
        rs = self._rs
        firsts = self._firsts
        deadline = self._clock() + self._duration
        new_lock = self._locks.new
        pieces: list[AcquiredRecords] = []
        lock: Lock | None = None  # the open piece's lock; None when no piece is open
        p_first = p_last = p_count = 0  # the open piece
        terminal_added = 0
        for act in acts:
            s, e, st, c = act.first, act.last, act.state, act.count
            size = e - s + 1
            if st == ACQUIRED:
                if (
                    lock is not None
                    and p_last + 1 == s
                    and p_count == c
                    and (record_limit or not act.starts_batch or p_last - p_first + 1 < batch_size)
                ):
                    p_last = lock.last = e
                    lock.live += size
                else:
                    if lock is not None:
                        pieces.append(AcquiredRecords(p_first, p_last, p_count))
                    lock = new_lock(member_id, deadline, s, e, size)
                    p_first, p_last, p_count = s, e, c
                held = lock
            else:
                if lock is not None:
                    pieces.append(AcquiredRecords(p_first, p_last, p_count))
                    lock = None
                held = None
                terminal_added += size
            if s >= self._end:
                last_r = rs[-1] if rs else None
                if (
                    last_r is not None
                    and last_r.state == st
                    and last_r.count == c
                    and last_r.lock is held
                    and last_r.last + 1 == s
                ):
                    last_r.last = e
                else:
                    firsts.append(s)
                    rs.append(InFlightRange(s, e, st, c, held))
                self._end = e + 1
            else:
                self._split(s)
                i = self._split(e + 1) - 1
                r = rs[i]
                r.state = st
                r.count = c
                r.lock = held
                self._available -= size
        if lock is not None:
            pieces.append(AcquiredRecords(p_first, p_last, p_count))
        self._terminal += terminal_added
        self.version += 1
        if terminal_added and rs and rs[0].state >= ACKNOWLEDGED:
            self._advance()
        return pieces
