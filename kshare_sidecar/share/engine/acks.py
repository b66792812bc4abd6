"""Acknowledgements: Kafka's input checks, validation against the window, the two-phase plan.

Acks are answered only after the durable state write, and a failed write must leave nothing
behind. So acknowledging is split: `prepare_acknowledge` validates and returns an `AckPlan` (no
mutation); the caller persists `plan.state`; then `commit(plan)` applies it. The plan remembers
the partition version it was validated against, so a plan that went stale while the write was in
flight is re-validated (all or nothing) at commit.

The plan and the partition code it calls live in this one module (`Acknowledgement`, a part of
`SharePartition` built on share/engine/ranges.py), so the plan needs no import of the facade.
Pure: no I/O, no asyncio, time only from the injected clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from kshare_sidecar.persist.model import PartitionState
from kshare_sidecar.share.engine.locks import Lock
from kshare_sidecar.share.engine.persisted import Piece, pieces_after, to_partition_state
from kshare_sidecar.share.engine.ranges import InFlight, InFlightRange
from kshare_sidecar.share.engine.types import Run
from kshare_sidecar.states import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
)

_OK = ErrorCode.none
_BAD_STATE = ErrorCode.invalid_record_state
_BAD_REQUEST = ErrorCode.invalid_request



def _fields(batch: Any) -> tuple[int, int, Sequence[int]]:
    if isinstance(batch, tuple):
        first, last, types = batch
        return first, last, types
    # kio request entities and similar objects
    return batch.first_offset, batch.last_offset, batch.acknowledge_types


def parse_ack_batches(batches: Iterable[Any], *, allow_renew: bool = True) -> list[Run] | ErrorCode:
    """Turn AcknowledgementBatches into ascending runs, or INVALID_REQUEST (Kafka's validation).

    Rules: first <= last, offsets >= 0, batches ascending and non-overlapping, types non-empty and
    of length 1 or last-first+1, each type GAP..REJECT (GAP..RENEW when renew is allowed).
    """
    max_type = RENEW if allow_renew else REJECT
    runs: list[Run] = []
    prev_last = -1
    for batch in batches:
        try:
            if type(batch) is tuple:
                first, last, types = batch
            else:
                first, last, types = _fields(batch)
        except (TypeError, ValueError, AttributeError):
            return ErrorCode.invalid_request
        if first < 0 or last < first or first <= prev_last:
            return ErrorCode.invalid_request
        n = len(types)
        if n == 1:
            t = types[0]
            if not 0 <= t <= max_type:
                return ErrorCode.invalid_request
            runs.append((first, last, int(t)))
        elif n == last - first + 1:
            run_start = first
            cur = types[0]
            off = first
            for t in types:
                if t != cur:
                    if not 0 <= cur <= max_type:
                        return ErrorCode.invalid_request
                    runs.append((run_start, off - 1, int(cur)))
                    run_start = off
                    cur = t
                off += 1
            if not 0 <= cur <= max_type:
                return ErrorCode.invalid_request
            runs.append((run_start, last, int(cur)))
        else:
            return ErrorCode.invalid_request
        prev_last = last
    return runs


class AckPlan:
    """A validated acknowledgement of one partition, not yet applied.

    `error` is ErrorCode.none when the acks may be committed; otherwise it is the code to answer
    with and the partition is untouched. `state` is the PartitionState the partition will have
    once the plan is committed (computed on first access): persist it, then call commit.
    """

    __slots__ = ("partition", "member_id", "runs", "error", "version", "_state")

    def __init__(
        self,
        partition: Acknowledgement,
        member_id: str,
        runs: list[Run],
        error: ErrorCode,
        version: int,
    ) -> None:
        self.partition = partition
        self.member_id = member_id
        self.runs = runs
        self.error = error
        self.version = version
        self._state: PartitionState | None = None

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.none

    @property
    def stale(self) -> bool:
        """True when the partition changed since the plan was validated (commit re-validates)."""
        return self.version != self.partition.version

    @property
    def state(self) -> PartitionState:
        """The persisted form after this plan is applied (valid plans only)."""
        if not self.ok:
            raise ValueError(f"plan failed validation with {self.error!r}; nothing to persist")
        if self._state is None or self.stale:
            self._state = self.partition._state_after(self.member_id, self.runs)
        return self._state

    def record_count(self, ack_type: int) -> int:
        """How many offsets this plan acknowledges with `ack_type` (for metrics)."""
        return sum(last - first + 1 for first, last, t in self.runs if t == ack_type)

    def __repr__(self) -> str:
        return f"AckPlan(member_id={self.member_id!r}, runs={self.runs!r}, error={self.error!r})"


class Acknowledgement(InFlight):
    """Two-phase acknowledgements of one share-partition (ACCEPT, RELEASE, REJECT, GAP, RENEW)."""

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
                if st == ACQUIRED:
                    if r.lock.member != member_id:  # type: ignore[union-attr]
                        return _BAD_STATE
                elif not (t == GAP and st == ARCHIVED and r.count == 0):
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
                    if 0 <= first <= last and 0 <= t <= (RENEW if allow_renew else REJECT):
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
                tail = InFlightRange(first, r.last, r.state, r.count, r.lock)
                r.last = first - 1
                i += 1
                firsts.insert(i, first)
                rs.insert(i, tail)
                r = tail
            j = i + 1
            if r.last > last:  # split r after last
                tail = InFlightRange(last + 1, r.last, r.state, r.count, r.lock)
                r.last = last
                firsts.insert(j, last + 1)
                rs.insert(j, tail)
            elif r.last < last:
                j = self._split(last + 1)
            if t == RENEW:
                if renew_deadline is None:
                    renew_deadline = self._clock() + self._duration
                held = 0
                for k in range(i, j):
                    r = rs[k]
                    if r.state == ACQUIRED:
                        held += r.last - r.first + 1
                lock = self._locks.new(member_id, renew_deadline, first, last, held)
                for k in range(i, j):
                    r = rs[k]
                    if r.state == ACQUIRED:
                        self._take_from_lock(r, r.last - r.first + 1)
                        r.lock = lock
                continue
            for k in range(i, j):
                r = rs[k]
                if r.state != ACQUIRED:
                    continue  # Gap over an offset that never held a record
                size = r.last - r.first + 1
                owner: Lock = r.lock  # type: ignore[assignment]  # an ACQUIRED range always has one
                owner.live -= size
                if owner.live <= 0:
                    drop_lock(owner)
                r.lock = None
                if t == ACCEPT:
                    r.state = ACKNOWLEDGED
                elif t == RELEASE and r.count < limit and r.first >= log_start:
                    r.state = AVAILABLE
                    self._available += size
                    if r.first < self._avail_hint:
                        self._avail_hint = r.first
                    continue
                else:
                    r.state = ARCHIVED
                self._terminal += size
            self._coalesce(i, j - 1)  # merge equal neighbours around i .. j-1
        self.version += 1
        if rs and rs[0].state >= ACKNOWLEDGED:
            self._advance()

    def _outcome(self, r: InFlightRange, t: int) -> tuple[int, int]:
        """(state, delivery count) of range `r` after an acknowledgement of type `t`."""
        if r.state != ACQUIRED or t == RENEW:
            return r.state, r.count
        if t == ACCEPT:
            return ACKNOWLEDGED, r.count
        if t == RELEASE:
            return self._release_state(r), r.count
        return ARCHIVED, r.count

    def _state_after(self, member_id: str, runs: list[Run]) -> PartitionState:
        """The persisted form the partition would have after `member_id`'s `runs` (no mutation)."""

        return to_partition_state(pieces_after(self._rs, self._firsts, runs, _as_is, _unchanged, self._acked_piece),
                                  self._end, self.state_epoch, self.leader_epoch)

    def _acked_piece(self, r: InFlightRange, a: int, b: int, t: int) -> Piece:
        state, count = self._outcome(r, t)
        return a, b, state, count, None, None


def _as_is(ranges: list[InFlightRange]) -> Iterator[Piece]:
    return ((r.first, r.last, r.state, r.count, None, None) for r in ranges)


def _unchanged(r: InFlightRange, a: int, b: int) -> Piece:
    return a, b, r.state, r.count, None, None
