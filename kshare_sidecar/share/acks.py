"""Acknowledgement input checks and the two-phase acknowledgement plan.

Acks are answered only after the durable state write, and a failed write must leave nothing
behind. So acknowledging is split: `SharePartition.prepare_acknowledge` validates and returns an
`AckPlan` (no mutation); the caller persists `plan.state`; then `SharePartition.commit(plan)`
applies it. The plan remembers the partition version it was validated against, so a plan that
went stale while the write was in flight is re-validated (all or nothing) at commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kshare_sidecar.persist.model import PartitionState

if TYPE_CHECKING:
    from kshare_sidecar.share.partition import SharePartition

# A run is (first_offset, last_offset, ack_type): the unit the engine works on (per range, not per record).
Run = tuple[int, int, int]

_MAX_TYPE_V1 = 3
_MAX_TYPE_RENEW = 4


def _fields(batch: Any) -> tuple[int, int, Sequence[int]]:
    if isinstance(batch, tuple):
        first, last, types = batch
        return first, last, types
    # kio request entities and similar objects
    return batch.first_offset, batch.last_offset, batch.acknowledge_types


def parse_ack_batches(batches: Iterable[Any], *, allow_renew: bool = True) -> list[Run] | ErrorCode:
    """Turn AcknowledgementBatches into ascending runs, or INVALID_REQUEST (Kafka's validation).

    Rules: first <= last, offsets >= 0, batches ascending and non-overlapping, types non-empty and
    of length 1 or last-first+1, each type 0..3 (0..4 when renew is allowed).
    """
    max_type = _MAX_TYPE_RENEW if allow_renew else _MAX_TYPE_V1
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
        partition: SharePartition,
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
            self._state = self.partition._state_after(self.runs)
        return self._state

    def record_count(self, ack_type: int) -> int:
        """How many offsets this plan acknowledges with `ack_type` (for metrics)."""
        return sum(last - first + 1 for first, last, t in self.runs if t == ack_type)

    def __repr__(self) -> str:
        return f"AckPlan(member_id={self.member_id!r}, runs={self.runs!r}, error={self.error!r})"
