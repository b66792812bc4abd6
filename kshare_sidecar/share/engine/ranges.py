"""The in-flight window of one share-partition, held as offset ranges, and its primitives.

The window runs from the SPSO (share-partition start offset) to the SPEO; every offset in it
belongs to exactly one `InFlightRange` (first, last, state, delivery count, acquisition lock) —
the role Kafka's InFlightBatch plays, except that a range is split instead of growing a
per-offset map. The ranges are kept contiguous and sorted in two parallel lists (first offsets
for bisect, range objects). Work is per range: a batch acquired and accepted whole is one range
from start to end; a range is split only when an acknowledgement, renewal or re-acquisition
hits part of it.

`InFlight` owns that state and the operations every other part needs (split, merge, advance
SPSO, release a lock); acquisition (share/engine/acquire.py), acknowledgements (share/engine/acks.py) and the
`SharePartition` facade (share/engine/partition.py) build on it, and so do kshare's holds
(share/engine/holds.py). Pure: no I/O, no asyncio, time only from the injected millisecond clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from kshare_sidecar.share.engine.config import ShareConfig
from kshare_sidecar.share.engine.locks import Lock, LockTable
from kshare_sidecar.states import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE

Clock = Callable[[], int]


@dataclass(slots=True, eq=False)
class InFlightRange:
    """Offsets [first, last] sharing one state (a `RecordState` number), delivery count and lock.

    Identity semantics (eq=False): ranges are mutable cells of the window, compared with `is`.
    """

    first: int
    last: int
    state: int
    count: int
    lock: Lock | None = None


class InFlight:
    """The window [SPSO, end) as ranges, its counters, and the primitives that keep them true."""

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
        self._clock = clock
        self.reconfigure(config)
        self.state_epoch = state_epoch
        self.leader_epoch = leader_epoch
        self._spso = start_offset
        self._end = start_offset  # exclusive end of the window; SPEO = _end - 1
        self._log_start = 0
        self._firsts: list[int] = []
        self._rs: list[InFlightRange] = []
        self._locks = LockTable()
        self._terminal = 0  # ACKNOWLEDGED + ARCHIVED records in the window (KIP-1226)
        self._available = 0  # AVAILABLE records in the window (re-available or restored)
        self._avail_hint = start_offset  # no AVAILABLE record in the window below this offset
        self.version = 0  # bumped on every mutation; detects stale ack plans

    def reconfigure(self, config: ShareConfig) -> None:
        """Take the group's current configs, as Kafka's SharePartition reads them on every use
        (ShareGroupConfigProvider): a new lock duration applies to the next acquisition or
        renewal (locks already taken keep their deadline), a new delivery count limit to the next
        release, expiry or redelivery throttle, a new record-lock cap to the next acquisition."""
        self.config = config
        self._limit = config.delivery_count_limit
        self._duration = config.record_lock_duration_ms
        self._cap = config.max_record_locks
        self._throttle = config.throttle_redelivery
        self._throttle_at = config.throttle_threshold

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
        tail = InFlightRange(offset, r.last, r.state, r.count, r.lock)
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
            if a.state == b.state and a.count == b.count and b.state != ACQUIRED:
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
            if r.state < ACKNOWLEDGED:
                break
            dropped += r.last - r.first + 1
            k += 1
        if k:
            del rs[:k]
            del self._firsts[:k]
            self._terminal -= dropped
            self._spso = rs[0].first if rs else self._end

    def _release_state(self, r: InFlightRange) -> int:
        """State after an unsuccessful delivery (release, lock expiry, member leaving)."""
        if r.count >= self._limit or r.first < self._log_start:
            return ARCHIVED
        return AVAILABLE

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
                if st == AVAILABLE:
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

    def _take_from_lock(self, r: InFlightRange, size: int) -> None:
        """Detach `r` (of `size` records) from its lock, dropping the lock once it holds nothing."""
        lock = r.lock
        if lock is not None:
            lock.live -= size
            if lock.live <= 0:
                lock.live = 0
                self._locks.drop(lock)
            r.lock = None
