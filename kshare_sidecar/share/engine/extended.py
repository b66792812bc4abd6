"""A share-partition with the extensions: dead-letter topic (KIP-1191), release backoff (docs/extensions.md).

Why a subclass: groups that use none of the extensions keep the plain `SharePartition` and its
hot path untouched; a group that opts in gets this class at load. It changes what happens to a
record after an *unsuccessful* delivery, using holds (share/engine/holds.py):

* RELEASE, an expired acquisition lock or a member leaving, with attempts left and a backoff
  configured: the record is held until ``now + backoff(delivery count)``, then AVAILABLE.
* REJECT, or no attempts left (the delivery count limit), with a dead-letter topic: the record
  is held for the dead-letter writer (share/dead_letter.py) — kshare's form of Kafka 4.4's
  ARCHIVING state — which writes it to the topic (or gives up, as Kafka does) and then
  acknowledges it as the holder: the state write that archives it comes after the write ended.

Everything else is the engine's. Holds persist as AVAILABLE state batches carrying the backoff
end (wall clock) or the dead-letter cause, so a restart keeps them. Pure: no I/O; time comes
from the injected clocks (``clock`` monotonic for deadlines, ``wall`` for what is persisted).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator
from typing import Any

from kshare_sidecar.persist.model import PartitionState
from kshare_sidecar.share.engine.backoff import backoff_ms
from kshare_sidecar.share.engine.config import Extensions, ShareConfig
from kshare_sidecar.share.engine.holds import (
    BACKOFF,
    CAUSE_LIMIT,
    CAUSE_REJECTED,
    DEAD_LETTER,
    HOLDERS,
    KEY_ORDER,
    Decision,
    Hold,
    held,
    hold_available,
    hold_extras,
    release_with,
    transfer,
    under_lock,
)
from kshare_sidecar.share.engine.keyorder import KeyIndex
from kshare_sidecar.share.engine.partition import SharePartition
from kshare_sidecar.share.engine.persisted import Piece, pieces_after, to_partition_state
from kshare_sidecar.share.engine.ranges import InFlightRange
from kshare_sidecar.share.engine.types import AcquiredRecords, Run
from kshare_sidecar.states import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    REJECT,
    RELEASE,
    RENEW,
    RecordState,
)


class ExtendedSharePartition(SharePartition):
    """`SharePartition` plus release backoff and dead-letter holds (see the module docstring)."""

    def __init__(self, config: ShareConfig, clock: Callable[[], int], *, ext: Extensions | None = None,
                 wall: Callable[[], int] | None = None, **kwargs: Any) -> None:
        super().__init__(config, clock, **kwargs)
        self.ext = ext or Extensions()
        self._wall = wall or clock
        self.key_index = KeyIndex()  # used with ext.key_ordering only
        #: key ordering: members that acquired here lately (member id -> clock), to share the heads
        self._fetchers: dict[str, int] = {}
        #: heads the last ``order_by_key`` gave back for other members (the caller wakes their fetches)
        self.spared = 0
        #: every held record's key is known (holds made while ordering keys learn them first); False
        #: after a restore or a change of extensions, until ``unindexed_holds`` finds none again
        self.holds_indexed = True

    # ------------------------------------------------------------------ decisions
    def _after_failure(self, r: InFlightRange) -> Decision | None:
        """Where a record goes after an unsuccessful delivery (release, expiry, member gone)."""
        if r.count >= self._limit:
            return Decision(DEAD_LETTER, cause=CAUSE_LIMIT) if self.ext.dead_letter else None
        if r.first < self._log_start:
            return None  # gone from the log: the engine archives it
        ext = self.ext
        delay = backoff_ms(r.count, ext.backoff_ms, ext.backoff_multiplier, ext.backoff_max_ms)
        if delay:
            return Decision(BACKOFF, self._clock() + delay, self._wall() + delay)
        return None

    def _on_reject(self, r: InFlightRange) -> Decision | None:
        return Decision(DEAD_LETTER, cause=CAUSE_REJECTED) if self.ext.dead_letter else None

    def _decide(self, member_id: str, t: int) -> Callable | None:
        if member_id in HOLDERS:
            return None
        return self._after_failure if t == RELEASE else self._on_reject if t == REJECT else None

    # ------------------------------------------------------------------ engine overrides

    def _apply_acks(self, member_id: str, runs: list[Run]) -> None:
        engine_runs: list[Run] = []
        for first, last, t in runs:
            decide = self._decide(member_id, t)
            if decide is None:
                engine_runs.append((first, last, t))
            else:
                engine_runs.extend((a, b, t) for a, b in transfer(self, first, last, member_id, decide))
        super()._apply_acks(member_id, engine_runs)
        if self.ext.key_ordering and runs:
            idx = self.key_index
            self._unblock({k for first, last, _t in runs for k in idx.keys_of(range(first, last + 1))})
            idx.prune(self._spso)

    def _state_after(self, member_id: str, runs: list[Run]) -> PartitionState:
        """An AckPlan's persisted form here includes the holds the acks create."""
        return self.persisted(member_id, runs)

    def expire(self, now: int | None = None) -> int:
        if now is None:
            now = self._clock()
        changed = 0
        keys: set = set()
        for lock in list(self._locks.pop_expired(now)):
            keys |= self._keys_under(lock)
            changed += release_with(self, lock, self._after_failure)
        if changed:
            self._advance()
            changed += self._unblock(keys)
            self.version += 1
        return changed

    def release_member(self, member_id: str) -> int:
        locks = self._locks.member_locks(member_id)
        if not locks:
            return 0
        locks.sort(key=lambda lk: lk.first)
        changed = 0
        keys: set = set()
        for lock in locks:
            keys |= self._keys_under(lock)
            changed += release_with(self, lock, self._after_failure)
        self._advance()
        changed += self._unblock(keys)
        self.version += 1
        return changed

    def move_log_start(self, offset: int) -> int:
        archived = super().move_log_start(offset)
        if archived and self.ext.key_ordering:
            self._unblock(self.key_index.pending_keys())
        return archived

    # ------------------------------------------------------------------ key ordering
    def _is_done(self, offset: int) -> bool:
        if offset < self._spso:
            return True
        if offset >= self._end:
            return False
        return self._rs[bisect_right(self._firsts, offset) - 1].state >= ACKNOWLEDGED

    def order_by_key(self, member_id: str, acquired: list[AcquiredRecords],
                     key_of: Callable[[int], bytes | None]) -> list[AcquiredRecords]:
        """Keep only the acquired offsets at the head of their key (share/engine/keyorder.py); the rest go
        under key-order holds with the delivery taken back. Returns what ``member_id`` really got."""
        idx = self.key_index
        for a in acquired:  # learn every key first: two records of one key in one acquisition
            for o in range(a.first_offset, a.last_offset + 1):
                if not idx.knows(o):
                    idx.learn(o, key_of(o))
        out: list[AcquiredRecords] = []
        blocked: list[tuple[int, int]] = []  # runs of offsets that wait for their keys
        spare: list[int] = []  # heads beyond this member's share: available again for the others
        share = self._share_of_heads(member_id)
        keys = idx.keys
        done = self._is_done
        deliverable = idx.deliverable
        for a in acquired:
            start = None
            for o in range(a.first_offset, a.last_offset + 1):
                take = deliverable(o, done)
                if take and keys.get(o) is not None:  # a record without a key is not ordered nor counted
                    if share > 0:
                        share -= 1
                    else:
                        take = False
                        spare.append(o)
                if take:
                    if start is None:
                        start = o
                    continue
                if start is not None:
                    out.append(AcquiredRecords(start, o - 1, a.delivery_count))
                    start = None
                if blocked and blocked[-1][1] == o - 1:
                    blocked[-1] = (blocked[-1][0], o)
                else:
                    blocked.append((o, o))
            if start is not None:
                out.append(AcquiredRecords(start, a.last_offset, a.delivery_count))
        if blocked:
            # One hold per run of waiting records, not per record: with many keys the window is
            # mostly such records, and a range (and a lock) each made every acquisition,
            # acknowledgement and release of the share-partition pay for thousands of them. A
            # head is split off its run when its key's turn comes (_release_head).
            wait = Decision(KEY_ORDER, count_delta=-1)
            for first, last in blocked:
                transfer(self, first, last, member_id, lambda _r: wait)
            for o in spare:  # its key's turn is now: not held, given back (its delivery taken back)
                self._release_head(o)
            self.version += 1
        self.spared = len(spare)
        return out

    def _share_of_heads(self, member_id: str) -> int:
        """How many keys' heads one acquisition may hand ``member_id``: the keys with records not
        done, divided among the members that acquired here within a lock duration (at least
        one). Without it one fetch with a large MaxRecords takes every free key's head and the
        other members wait for its whole poll to be acknowledged."""
        now = self._clock()
        fetchers = self._fetchers
        fetchers[member_id] = now
        if len(fetchers) > 1:
            horizon = now - self._duration
            for m in [m for m, seen in fetchers.items() if seen < horizon]:
                del fetchers[m]
        keys = self.key_index.pending_count()
        return max(1, -(-keys // len(fetchers)))

    def unindexed_holds(self) -> list[tuple[int, int]]:
        """Held ranges whose keys are unknown (restored after a restart): their keys must be
        learned before anything is ordered, or a later record could overtake them."""
        if self.holds_indexed:  # the common case: no walk over the held ranges per fetch
            return []
        idx = self.key_index
        out = [(r.first, r.last) for r, _h in held(self) if not (idx.knows(r.first) and idx.knows(r.last))]
        self.holds_indexed = not out
        return out

    def _keys_under(self, lock) -> set:
        """Keys of the records still under ``lock`` (key ordering only: they may be unblocked)."""
        if not self.ext.key_ordering:
            return set()
        idx = self.key_index
        return {k for r in under_lock(self, lock) for k in idx.keys_of(range(r.first, r.last + 1))}

    def _unblock(self, keys) -> int:
        """Release the key-order hold of each key's head, if it is waiting."""
        released = 0
        done = self._is_done
        for k in keys:
            h = self.key_index.head(k, done)
            if h is None or h < self._spso or h >= self._end:
                continue
            r = self._rs[bisect_right(self._firsts, h) - 1]
            lk = r.lock
            if r.state == ACQUIRED and isinstance(lk, Hold) and lk.member == KEY_ORDER:
                released += self._release_head(h)
        if released:
            self.version += 1
        return released

    def _release_head(self, h: int) -> int:
        """Release offset ``h`` alone from the key-order hold of its run (the rest of the run
        waits on): split it off, detach it from the hold, and make it AVAILABLE as a release does."""
        i = self._split(h)
        self._split(h + 1)
        r = self._rs[i]
        self._take_from_lock(r, 1)
        st = self._release_state(r)
        r.state = st
        if st == AVAILABLE:
            self._available += 1
            self._avail_hint = min(self._avail_hint, h)
        else:
            self._terminal += 1
        return 1

    def snapshot(self) -> PartitionState:
        return self.persisted("", [])

    @classmethod
    def restore_with(cls, state: PartitionState, clock: Callable[[], int], config: ShareConfig,
                     ext: Extensions, wall: Callable[[], int]) -> ExtendedSharePartition:
        """Restore, then re-create the persisted holds: a backoff not over yet (by the wall clock)
        and pending dead-letter writes (when the group still has a dead-letter topic; without
        one the records are simply available again)."""
        sp = cls.restore(state, clock, config)
        sp.ext, sp._wall = ext, wall
        sp.holds_indexed = False  # the holds below come back without their keys
        now, wall_now = clock(), wall()
        for b in state.state_batches:
            if b.delivery_state != RecordState.AVAILABLE:
                continue
            if b.dead_letter is not None and ext.dead_letter:
                d = Decision(DEAD_LETTER, cause=b.dead_letter)
            elif b.available_at is not None and b.available_at > wall_now:
                d = Decision(BACKOFF, now + (b.available_at - wall_now), b.available_at)
            else:
                continue
            hold_available(sp, b.first_offset, b.last_offset, _always(d))
        return sp

    # ------------------------------------------------------------------ dead-letter writer API
    def dead_letter_pending(self) -> list[tuple[int, int, int, str]]:
        """Records waiting for the dead-letter write: (first, last, delivery count, cause), ascending."""
        if not self._locks.holds_any(DEAD_LETTER):  # asked after every change: no scan of the window then
            return []
        return [(r.first, r.last, r.count, h.cause or CAUSE_REJECTED) for r, h in held(self, DEAD_LETTER)]

    # ------------------------------------------------------------------ persisted form
    def persisted(self, member_id: str, runs: list[Run]) -> PartitionState:
        """The persisted state after ``member_id``'s ``runs`` (validated) are applied; no mutation.

        It walks the whole window (every acknowledgement asks it): the untouched ranges go through
        :func:`window_pieces`, which passes over those that persist as nothing."""

        def unchanged(r: InFlightRange, a: int, b: int) -> Piece:
            lk = r.lock
            if r.state == ACQUIRED and isinstance(lk, Hold):
                return (a, b, AVAILABLE, r.count) + hold_extras(lk.member, lk.wall_until, lk.cause)
            return a, b, r.state, r.count, None, None  # ACQUIRED: to_partition_state counts it back

        def acked(r: InFlightRange, a: int, b: int, t: int) -> Piece:
            if r.state != ACQUIRED or t == RENEW:
                return unchanged(r, a, b)
            decide = self._decide(member_id, t)
            d = decide(r) if decide is not None else None
            if d is not None:
                return (a, b, AVAILABLE, r.count + d.count_delta) + hold_extras(d.holder, d.wall_until, d.cause)
            if t == ACCEPT:
                return a, b, ACKNOWLEDGED, r.count, None, None
            if t == RELEASE:
                return a, b, self._release_state(r), r.count, None, None
            return a, b, ARCHIVED, r.count, None, None

        return to_partition_state(pieces_after(self._rs, self._firsts, runs, window_pieces, unchanged, acked), self._end,
                                  self.state_epoch, self.leader_epoch)


def _always(d: Decision) -> Callable[[InFlightRange], Decision]:
    """A decision rule that puts every range it is asked about under the same hold."""
    return lambda _r: d


def window_pieces(ranges: list[InFlightRange]) -> Iterator[Piece]:
    """The pieces of untouched ranges for :func:`to_partition_state`, without those it would
    drop: once a piece that is not done has gone by (it sets the SPSO), a range that persists as
    an implied AVAILABLE with count 0 — a consumer's first delivery in flight, a record never
    delivered, one waiting for its key under a key-order hold — yields nothing. Under key
    ordering most of a window of ~2,000 records is such ranges (~450), and the snapshot of every
    acknowledgement walked them all as tuples; here each costs a comparison or two."""
    opened = False  # a piece that is not done has been yielded (the SPSO is found by then)
    for r in ranges:
        state = r.state
        if state == ACQUIRED:
            lk = r.lock
            if isinstance(lk, Hold):  # persists as AVAILABLE with its count and the hold's extras
                holder = lk.member
                if opened and r.count <= 0 and holder != BACKOFF and holder != DEAD_LETTER:
                    continue
                yield (r.first, r.last, AVAILABLE, r.count) + hold_extras(holder, lk.wall_until, lk.cause)
            else:  # a consumer's delivery: persisted as count - 1 (to_partition_state counts it back)
                if opened and r.count <= 1:
                    continue
                yield r.first, r.last, state, r.count, None, None
            opened = True
        elif state == AVAILABLE:
            if opened and r.count <= 0:
                continue
            opened = True
            yield r.first, r.last, state, r.count, None, None
        else:  # ACKNOWLEDGED, ARCHIVED: written after the SPSO, skipped before it
            yield r.first, r.last, state, r.count, None, None
