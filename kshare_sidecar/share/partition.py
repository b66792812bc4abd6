"""The share-partition: in-flight records of one (group, topic, partition) held as offset ranges.

The window runs from the SPSO (share-partition start offset) to the SPEO; every offset in it
belongs to exactly one `_Range` (first, last, state, delivery count, acquisition lock), and the
ranges are kept contiguous and sorted in two parallel lists (first offsets for bisect, range
objects). Work is per range: a batch acquired and accepted whole is one range from start to end;
a range is split only when an acknowledgement, renewal or re-acquisition hits part of it.

Pure: no I/O, no asyncio, time only from the injected millisecond clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from kio.schema.errors import ErrorCode

from kshare_sidecar.persist.model import DeliveryState, PartitionState
from kshare_sidecar.share.acks import AckPlan, Run, parse_ack_batches
from kshare_sidecar.share.config import ShareConfig
from kshare_sidecar.share.locks import Lock, LockTable
from kshare_sidecar.share.persisted import to_partition_state
from kshare_sidecar.share.types import AcquiredRecords, AcquireMode

Clock = Callable[[], int]

# Plain ints on the hot path (same numbering as DeliveryState); terminal states are >= 2.
AV = 0  # AVAILABLE
AQ = 1  # ACQUIRED
AK = 2  # ACKNOWLEDGED
AR = 4  # ARCHIVED

_GAP, _ACCEPT, _RELEASE, _REJECT, _RENEW = 0, 1, 2, 3, 4
_OK = ErrorCode.none
_BAD_STATE = ErrorCode.invalid_record_state
_BAD_REQUEST = ErrorCode.invalid_request


class _Range:
    __slots__ = ("first", "last", "state", "count", "lock")

    def __init__(self, first: int, last: int, state: int, count: int, lock: Lock | None = None) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.lock = lock

    def __repr__(self) -> str:
        return f"_Range({self.first}, {self.last}, {self.state}, {self.count}, {self.lock!r})"


class SharePartition:
    """One share-partition: acquisition, acquisition locks, acknowledgements, SPSO/SPEO, snapshots."""

    def __init__(
        self,
        config: ShareConfig,
        clock: Clock,
        *,
        start_offset: int = 0,
        state_epoch: int = 0,
        leader_epoch: int = 0,
    ) -> None:
        if start_offset < 0:
            raise ValueError("start_offset must be resolved (>= 0) before building a SharePartition")
        self.config = config
        self._clock = clock
        self._limit = config.delivery_count_limit
        self._duration = config.record_lock_duration_ms
        self._cap = config.max_record_locks
        self._throttle = config.throttle_redelivery
        self._throttle_at = config.throttle_threshold
        self.state_epoch = state_epoch
        self.leader_epoch = leader_epoch
        self._spso = start_offset
        self._end = start_offset  # exclusive end of the window; SPEO = _end - 1
        self._log_start = 0
        self._firsts: list[int] = []
        self._rs: list[_Range] = []
        self._locks = LockTable()
        self._terminal = 0  # ACKNOWLEDGED + ARCHIVED records in the window (KIP-1226)
        self._available = 0  # AVAILABLE records in the window (re-available or restored)
        self._avail_hint = start_offset  # no AVAILABLE record in the window below this offset
        self.version = 0  # bumped on every mutation; detects stale ack plans

    # ------------------------------------------------------------------ views

    @property
    def spso(self) -> int:
        """Share-partition start offset: every offset below it is done (terminal)."""
        return self._spso

    @property
    def end_offset(self) -> int:
        """One past the last in-flight offset (the KIP's example "SPEO"); new records start here."""
        return self._end

    @property
    def speo(self) -> int:
        """SPEO as Kafka's code keeps it: the last offset in the window (SPSO - 1 when empty)."""
        return self._end - 1

    @property
    def in_flight(self) -> int:
        """Window size SPEO - SPSO + 1, the figure max_record_locks caps."""
        return self._end - self._spso

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def delivery_complete_count(self) -> int:
        """Terminal (ACKNOWLEDGED/ARCHIVED) records at or after SPSO: KIP-1226's DeliveryCompleteCount."""
        return self._terminal

    def lag(self, high_watermark: int) -> int:
        """KIP-1226 share-partition lag: HWM - SPSO - delivery complete count (never negative)."""
        return max(0, high_watermark - self._spso - self._terminal)

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
                if r.state == AV:
                    self._avail_hint = r.first
                    return r.first
                i += 1
            raise AssertionError("available count out of sync")  # pragma: no cover
        if self._end - self._spso < self._cap:
            return self._end
        return None

    def next_lock_deadline(self) -> int | None:
        """Earliest live acquisition-lock deadline (ms), for the caller's timer."""
        return self._locks.next_deadline()

    def members(self) -> list[str]:
        """Members currently holding acquisition locks."""
        return self._locks.members()

    def ranges(self) -> Iterator[tuple[int, int, DeliveryState, int, str | None, int | None]]:
        """The window as (first, last, state, delivery_count, member, lock_deadline) ranges."""
        for r in self._rs:
            lk = r.lock
            yield (
                r.first,
                r.last,
                DeliveryState(r.state),
                r.count,
                lk.member if lk is not None else None,
                lk.deadline if lk is not None else None,
            )

    # ------------------------------------------------------------ primitives

    def _split(self, offset: int) -> int:
        """Ensure a range starts at `offset` (SPSO <= offset <= end); return its index."""
        firsts = self._firsts
        i = bisect_right(firsts, offset) - 1
        if i < 0:
            return 0
        r = self._rs[i]
        if r.first == offset:
            return i
        if offset > r.last:
            return i + 1
        tail = _Range(offset, r.last, r.state, r.count, r.lock)
        r.last = offset - 1
        firsts.insert(i + 1, offset)
        self._rs.insert(i + 1, tail)
        return i + 1

    def _coalesce(self, lo: int, hi: int) -> None:
        """Merge equal neighbours (never ACQUIRED ones) among indexes lo-1 .. hi+1."""
        rs = self._rs
        firsts = self._firsts
        k = hi + 1 if hi + 1 < len(rs) else len(rs) - 1
        lo = lo - 1 if lo > 0 else 0
        while k > lo:
            b = rs[k]
            a = rs[k - 1]
            if a.state == b.state and a.count == b.count and b.state != AQ:
                a.last = b.last
                del rs[k]
                del firsts[k]
            k -= 1

    def _advance(self) -> None:
        """Move SPSO over the contiguous terminal head and drop those ranges."""
        rs = self._rs
        n = len(rs)
        k = 0
        dropped = 0
        while k < n:
            r = rs[k]
            if r.state < AK:
                break
            dropped += r.last - r.first + 1
            k += 1
        if k:
            del rs[:k]
            del self._firsts[:k]
            self._terminal -= dropped
            self._spso = rs[0].first if rs else self._end

    def _release_state(self, r: _Range) -> int:
        """State after an unsuccessful delivery (release, lock expiry, member leaving)."""
        if r.count >= self._limit or r.first < self._log_start:
            return AR
        return AV

    def _release_lock(self, lock: Lock) -> int:
        """Release every record still held under `lock`; returns how many."""
        rs = self._rs
        start = lock.first if lock.first > self._spso else self._spso
        i0 = bisect_right(self._firsts, start) - 1
        if i0 < 0:
            i0 = 0
        i = i0
        n = len(rs)
        last = lock.last
        released = 0
        while i < n:
            r = rs[i]
            if r.first > last:
                break
            if r.lock is lock:
                size = r.last - r.first + 1
                released += size
                r.lock = None
                st = self._release_state(r)
                r.state = st
                if st == AV:
                    self._available += size
                    if r.first < self._avail_hint:
                        self._avail_hint = r.first
                else:
                    self._terminal += size
            i += 1
        lock.live -= released
        if lock.live <= 0:
            lock.live = 0
            self._locks.drop(lock)
        if released:
            self._coalesce(i0, i - 1)
        return released

    def _take_from_lock(self, r: _Range, size: int) -> None:
        lock = r.lock
        if lock is not None:
            lock.live -= size
            if lock.live <= 0:
                lock.live = 0
                self._locks.drop(lock)
            r.lock = None

    # ------------------------------------------------------------ acquisition

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
        strict = record_limit
        want = max_records
        spso = self._spso
        end = self._end
        floor = spso if spso > self._log_start else self._log_start
        cap_last = spso + self._cap - 1
        if cap_last < end - 1:
            cap_last = end - 1
        limit = self._limit
        throttle = self._throttle
        throttle_at = self._throttle_at
        throttled = False
        rs = self._rs
        firsts = self._firsts
        nrs = len(rs)

        aborted: list[tuple[int, int]] = []
        if aborted_transactions:
            aborted = sorted(aborted_transactions, key=itemgetter(1))
        ai = 0
        active_aborted: set[int] = set()

        # highest offset this read accounts for; offsets after it and before the next batch are holes
        covered = (fetch_offset if fetch_offset < end else end) - 1 if fetch_offset is not None else None

        # acts: [first, last, new_state, new_count, starts_log_batch, lock]
        acts: list[list[Any]] = []
        got = 0
        stop = False
        segs: list[tuple[int, int, int]] = []

        def available_segments(lo: int, hi: int) -> None:
            segs.clear()
            if lo < end:
                top = hi if hi < end else end - 1
                i = bisect_right(firsts, lo) - 1
                if i < 0:
                    i = 0
                while i < nrs:
                    r = rs[i]
                    if r.first > top:
                        break
                    if r.state == AV:
                        s_first = r.first if r.first > lo else lo
                        segs.append((s_first, r.last if r.last < top else top, r.count))
                    i += 1
            if hi >= end:
                segs.append((lo if lo > end else end, hi, 0))

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
                available_segments(hlo, base - 1)
                for s, e, c in segs:
                    acts.append([s, e, AR, c, False, None])
            lo = base if base > floor else floor
            if covered is None or last > covered:
                if covered is not None and lo <= covered:  # already handled by this call
                    lo = covered + 1
                covered = last
            else:
                continue
            hi = last if last < cap_last else cap_last
            if lo > hi:
                continue
            available_segments(lo, hi)
            if drop:
                for s, e, c in segs:
                    acts.append([s, e, AR, c, False, None])
                continue
            first_in_batch = True
            for s, e, c in segs:
                if c >= limit:  # no attempts left (e.g. limit lowered since): archive, never deliver
                    acts.append([s, e, AR, c, False, None])
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
                n = e - s + 1
                if strict and got + n >= want:
                    e = s + (want - got) - 1
                    n = want - got
                    stop = True
                acts.append([s, e, AQ, c + 1, first_in_batch, None])
                first_in_batch = False
                got += n
                if stop:
                    break
            if stop or got >= want:
                break

        if not acts:
            return []

        # cut acquired segments into pieces: contiguous, one delivery count, about batch_size each
        now = self._clock()
        deadline = now + self._duration
        pieces: list[list[Any]] = []  # [first, last, count, acts]
        cur: list[Any] | None = None
        for act in acts:
            if act[2] != AQ:
                cur = None
                continue
            if (
                cur is not None
                and cur[1] + 1 == act[0]
                and cur[2] == act[3]
                and (record_limit or not act[4] or cur[1] - cur[0] + 1 < batch_size)
            ):
                cur[1] = act[1]
                cur[3].append(act)
            else:
                cur = [act[0], act[1], act[3], [act]]
                pieces.append(cur)
        locks = self._locks
        for p in pieces:
            lock = locks.new(member_id, deadline, p[0], p[1], p[1] - p[0] + 1)
            for act in p[3]:
                act[5] = lock

        # apply, in offset order
        terminal_added = 0
        for s, e, st, c, _, lock in acts:
            size = e - s + 1
            if s >= self._end:
                last_r = rs[-1] if rs else None
                if (
                    last_r is not None
                    and last_r.state == st
                    and last_r.count == c
                    and last_r.lock is lock
                    and last_r.last + 1 == s
                ):
                    last_r.last = e
                else:
                    firsts.append(s)
                    rs.append(_Range(s, e, st, c, lock))
                self._end = e + 1
            else:
                self._split(s)
                i = self._split(e + 1) - 1
                r = rs[i]
                r.state = st
                r.count = c
                r.lock = lock
                self._available -= size
            if st != AQ:
                terminal_added += size
        self._terminal += terminal_added
        self.version += 1
        if terminal_added and rs and rs[0].state >= AK:
            self._advance()
        return [AcquiredRecords(p[0], p[1], p[2]) for p in pieces]

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

    # ------------------------------------------------------------ acknowledgements

    def _validate(self, member_id: str, runs: list[Run]) -> ErrorCode:
        spso = self._spso
        end = self._end
        rs = self._rs
        firsts = self._firsts
        for first, last, _t in runs:
            if first < spso or spso == end:
                return _BAD_STATE
            if last >= end:
                # Kafka: offsets past the last in-flight batch are a malformed request, not a state
                # conflict ("Batch record not found ... past acquired records").
                return _BAD_REQUEST
        for first, last, t in runs:
            i = bisect_right(firsts, first) - 1
            while True:
                r = rs[i]
                st = r.state
                if st == AQ:
                    if r.lock.member != member_id:  # type: ignore[union-attr]
                        return _BAD_STATE
                elif not (t == _GAP and st == AR and r.count == 0):
                    # Gap may name offsets that never held a record (log holes, control batches)
                    return _BAD_STATE
                if r.last >= last:
                    break
                i += 1
        return _OK

    def prepare_acknowledge(
        self, member_id: str, batches: Iterable[Any], *, allow_renew: bool = True
    ) -> AckPlan:
        """Validate acknowledgement batches without changing anything.

        Returns an AckPlan whose `error` is INVALID_REQUEST (malformed batches), INVALID_RECORD_STATE
        (records not ACQUIRED by this member) or NONE; a NONE plan exposes the resulting `state`.
        """
        # fast path: one batch with one type (a whole AcquiredRecords piece, or one offset)
        if type(batches) is list and len(batches) == 1:
            b = batches[0]
            if type(b) is tuple and len(b) == 3:
                first, last, types = b
                if len(types) == 1:
                    t = types[0]
                    if 0 <= first <= last and 0 <= t <= (_RENEW if allow_renew else _REJECT):
                        runs_1: list[Run] = [(first, last, t)]
                        err = _OK
                        if first < self._spso or last >= self._end:
                            err = self._validate(member_id, runs_1)  # which error: see _validate
                        else:
                            r = self._rs[bisect_right(self._firsts, first) - 1]
                            lk = r.lock
                            if r.last < last or lk is None or lk.member != member_id:
                                err = self._validate(member_id, runs_1)  # spans ranges, or an error
                        return AckPlan(self, member_id, runs_1, err, self.version)
        runs = parse_ack_batches(batches, allow_renew=allow_renew)
        if isinstance(runs, ErrorCode):
            return AckPlan(self, member_id, [], runs, self.version)
        return AckPlan(self, member_id, runs, self._validate(member_id, runs), self.version)

    def commit(self, plan: AckPlan) -> ErrorCode:
        """Apply a plan after its state was durably written; all or nothing.

        A plan validated against an older version of the partition is validated again first; if it
        no longer holds, nothing changes and the error is returned (the caller should then write the
        current `snapshot()` again, since the durable state got ahead of memory).
        """
        if plan.partition is not self:
            raise ValueError("plan belongs to another share-partition")
        if plan.error != _OK:
            return plan.error
        if plan.version != self.version:
            err = self._validate(plan.member_id, plan.runs)
            if err != _OK:
                return err
        self._apply_acks(plan.member_id, plan.runs)
        plan.version = self.version
        return _OK

    def acknowledge(self, member_id: str, batches: Iterable[Any], *, allow_renew: bool = True) -> ErrorCode:
        """prepare_acknowledge + commit in one step, for callers with nothing to persist in between."""
        plan = self.prepare_acknowledge(member_id, batches, allow_renew=allow_renew)
        if plan.error != _OK:
            return plan.error
        return self.commit(plan)

    def _apply_acks(self, member_id: str, runs: list[Run]) -> None:
        rs = self._rs
        firsts = self._firsts
        limit = self._limit
        log_start = self._log_start
        drop_lock = self._locks.drop
        renew_deadline = None
        for first, last, t in runs:
            # boundaries at first and last + 1 (inline fast check: usually already there)
            i = bisect_right(firsts, first) - 1
            r = rs[i]
            if r.first != first:  # split r at first
                tail = _Range(first, r.last, r.state, r.count, r.lock)
                r.last = first - 1
                i += 1
                firsts.insert(i, first)
                rs.insert(i, tail)
                r = tail
            j = i + 1
            if r.last > last:  # split r after last
                tail = _Range(last + 1, r.last, r.state, r.count, r.lock)
                r.last = last
                firsts.insert(j, last + 1)
                rs.insert(j, tail)
            elif r.last < last:
                j = self._split(last + 1)
            if t == _RENEW:
                if renew_deadline is None:
                    renew_deadline = self._clock() + self._duration
                held = 0
                for k in range(i, j):
                    r = rs[k]
                    if r.state == AQ:
                        held += r.last - r.first + 1
                lock = self._locks.new(member_id, renew_deadline, first, last, held)
                for k in range(i, j):
                    r = rs[k]
                    if r.state == AQ:
                        self._take_from_lock(r, r.last - r.first + 1)
                        r.lock = lock
                continue
            for k in range(i, j):
                r = rs[k]
                if r.state != AQ:
                    continue  # Gap over an offset that never held a record
                size = r.last - r.first + 1
                lock = r.lock
                lock.live -= size  # type: ignore[union-attr]
                if lock.live <= 0:  # type: ignore[union-attr]
                    drop_lock(lock)  # type: ignore[arg-type]
                r.lock = None
                if t == _ACCEPT:
                    r.state = AK
                elif t == _RELEASE and r.count < limit and r.first >= log_start:
                    r.state = AV
                    self._available += size
                    if r.first < self._avail_hint:
                        self._avail_hint = r.first
                    continue
                else:
                    r.state = AR
                self._terminal += size
            # merge equal neighbours around i .. j-1
            k = j if j < len(rs) else len(rs) - 1
            lo = i - 1 if i > 0 else 0
            while k > lo:
                b = rs[k]
                a = rs[k - 1]
                if a.state == b.state and a.count == b.count and b.state != AQ:
                    a.last = b.last
                    del rs[k]
                    del firsts[k]
                k -= 1
        self.version += 1
        if rs and rs[0].state >= AK:
            self._advance()

    def _outcome(self, r: _Range, t: int) -> tuple[int, int]:
        if r.state != AQ or t == _RENEW:
            return r.state, r.count
        if t == _ACCEPT:
            return AK, r.count
        if t == _RELEASE:
            return self._release_state(r), r.count
        return AR, r.count

    def _state_after(self, runs: list[Run]) -> PartitionState:
        """The persisted form the partition would have after applying `runs` (no mutation)."""

        def pieces() -> Iterator[tuple[int, int, int, int]]:
            ri = 0
            nr = len(runs)
            for r in self._rs:
                f, lst = r.first, r.last
                while ri < nr and runs[ri][1] < f:
                    ri += 1
                pos = f
                k = ri
                while k < nr and runs[k][0] <= lst:
                    a, b, t = runs[k]
                    if a > pos:
                        yield pos, a - 1, r.state, r.count
                        pos = a
                    hi = b if b < lst else lst
                    st, c = self._outcome(r, t)
                    yield pos, hi, st, c
                    pos = hi + 1
                    if b > lst:
                        break
                    k += 1
                if pos <= lst:
                    yield pos, lst, r.state, r.count

        return to_partition_state(pieces(), self._end, self.state_epoch, self.leader_epoch)

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
            if rs and rs[-1].state == AR and rs[-1].count == 0:
                rs[-1].last = offset - 1
            else:
                self._firsts.append(self._end)
                rs.append(_Range(self._end, offset - 1, AR, 0))
            self._end = offset
            self._terminal += gap
            archived += gap
        j = self._split(offset)
        for k in range(j):
            r = rs[k]
            if r.state == AV:
                size = r.last - r.first + 1
                r.state = AR
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
            ((r.first, r.last, r.state, r.count) for r in self._rs),
            self._end,
            self.state_epoch,
            self.leader_epoch,
        )

    @classmethod
    def restore(cls, state: PartitionState, clock: Clock, config: ShareConfig) -> SharePartition:
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
                rs.append(_Range(pos, f - 1, AV, 0))
                sp._available += f - pos
            st = int(b.delivery_state)
            if st not in (AV, AK, AR):
                st = AV
            c = b.delivery_count
            prev = rs[-1] if rs else None
            if prev is not None and prev.state == st and prev.count == c:
                prev.last = last
            else:
                firsts.append(f)
                rs.append(_Range(f, last, st, c))
            size = last - f + 1
            if st == AV:
                sp._available += size
            else:
                sp._terminal += size
            pos = last + 1
        sp._end = pos
        sp._advance()
        return sp

    def __repr__(self) -> str:
        return (
            f"SharePartition(spso={self._spso}, end={self._end}, ranges={len(self._rs)}, "
            f"terminal={self._terminal}, available={self._available})"
        )
