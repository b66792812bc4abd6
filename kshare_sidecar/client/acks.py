"""Acknowledgement bookkeeping of one share consumer (pure: no I/O, unit-tested).

Why it is separate from the asyncio layer: what may be acknowledged, what is sent and how it is
packed into AcknowledgementBatches are rules, and rules are easiest to get right (and to test)
without sockets. The consumer keeps one :class:`PartitionInFlight` per share-partition; it holds
the offsets this member acquired from one node (acks go back to the node that served them, or
the broker answers NOT_LEADER_OR_FOLLOWER), the ones handed to the application, and the acks
waiting to be sent (piggybacked on the next ShareFetch, or sent by ShareAcknowledge).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kshare_sidecar.states import AcknowledgeType  # the one definition (GAP, ACCEPT, RELEASE, REJECT, RENEW)

from .errors import AckStateError


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One AcknowledgementBatch: an inclusive offset range and either one type for all of it or
    one type per offset (the two shapes the protocol allows)."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


def ack_batches(acks: Mapping[int, int]) -> list[AckBatch]:
    """Pack ``offset -> type`` into batches: a batch per run of contiguous offsets (a missing
    offset ends a batch: it is not ours to acknowledge), one type when the run is uniform, else
    one type per offset. Sorted by offset."""
    if not acks:
        return []
    low, high = min(acks), max(acks)
    if high - low + 1 == len(acks):  # one run (implicit mode's poll): no walk per offset
        kinds = set(acks.values())
        if len(kinds) == 1:
            return [AckBatch(low, high, (int(kinds.pop()),))]
    out: list[AckBatch] = []
    run: list[int] = []
    start = prev = None
    for offset in sorted(acks):
        if prev is not None and offset == prev + 1:
            run.append(acks[offset])
        else:
            if run:
                out.append(_batch(start, prev, run))
            start, run = offset, [acks[offset]]
        prev = offset
    if run:
        out.append(_batch(start, prev, run))
    return out


def _batch(first: int | None, last: int | None, types: list[int]) -> AckBatch:
    assert first is not None and last is not None
    uniform = all(t == types[0] for t in types)
    return AckBatch(first, last, (int(types[0]),) if uniform else tuple(int(t) for t in types))


@dataclass
class PartitionInFlight:
    """Offsets of one share-partition acquired from ``node`` and not yet acknowledged."""

    node: int
    acquired: dict[int, int] = field(default_factory=dict)  # offset -> delivery count
    delivered: set[int] = field(default_factory=set)  # handed to the application, no ack yet
    pending: dict[int, int] = field(default_factory=dict)  # offset -> type, not yet sent
    #: queued acks a new acquisition of their record replaced before they were sent (its lock ran
    #: out and it was delivered again): failed, and commit must say so (the fetcher reports them)
    superseded: int = 0
    #: the last add_acquired took offsets this member already held (their locks had run out and
    #: the broker handed them to it again): older copies still buffered are stale
    reacquired: bool = False
    #: the highest offset of any range these books took (the overlap checks' bound)
    high: int = -1

    def add_acquired(self, ranges: Iterable[tuple[int, int, int]], record_offsets: Iterable[int], *,
                     ascending: bool = False) -> list[int]:
        """Take the broker's AcquiredRecords ``(first, last, delivery_count)``; offsets in them
        without a data record are queued as GAP at once. Returns the record offsets that are
        acquired (records outside every acquired range belong to someone else: drop them).
        ``ascending``: ``record_offsets`` is a list already in order (the record walk's).
        Per range a few set and dict operations on whole slices, not a Python step per offset;
        a range wholly above every offset these books ever held (fresh records: the usual case)
        skips the overlap checks, each a lookup per offset."""
        present = record_offsets if ascending and isinstance(record_offsets, list) else sorted(record_offsets)
        kept: list[int] = []
        self.reacquired = False
        ranges = list(ranges)
        for first, last, count in ranges:
            run = present[bisect.bisect_left(present, first):bisect.bisect_right(present, last)]
            if first <= self.high:  # records this member may hold already: their copies are stale
                if self.acquired and not self.reacquired:
                    self.reacquired = not self.acquired.keys().isdisjoint(run)
                if self.delivered:
                    self.delivered.difference_update(run)
                if self.pending and not self.pending.keys().isdisjoint(run):
                    stale = self.pending.keys() & run  # rare: a queued ack whose record came again
                    self.superseded += len(stale)
                    for offset in stale:
                        del self.pending[offset]
            if last > self.high:
                self.high = last
            if self.acquired:
                self.acquired.update(dict.fromkeys(run, count))
            else:
                self.acquired = dict.fromkeys(run, count)
            if len(run) < last - first + 1:
                gaps = set(range(first, last + 1)).difference(run)
                self.pending.update(dict.fromkeys(gaps, AcknowledgeType.GAP))
            if len(ranges) == 1:
                return run
            kept += run
        kept.sort()
        return kept

    def release(self, ranges: Iterable[tuple[int, int, int]]) -> None:
        """Acquired ranges whose records cannot be decoded: queue RELEASE for all of them, so
        that another consumer (one with the codec, say) gets them."""
        for first, last, _ in ranges:
            self.pending.update(dict.fromkeys(range(first, last + 1), int(AcknowledgeType.RELEASE)))
            self.high = max(self.high, last)

    def deliver(self, offset: int) -> None:
        if offset in self.acquired:
            self.delivered.add(offset)

    def acknowledge(self, offset: int, ack_type: int) -> None:
        """Queue an ack; a later ack of the same record before it is sent replaces the earlier."""
        if ack_type not in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT):
            raise ValueError(f"cannot acknowledge with {ack_type!r}; use ACCEPT, RELEASE or REJECT")
        if offset not in self.acquired:
            raise AckStateError(f"offset {offset} is not acquired by this consumer")
        self.pending[offset] = int(ack_type)
        self.delivered.discard(offset)

    def accept_delivered(self, skip: Iterable[int] = ()) -> None:
        """Implicit mode: every record handed out and not acknowledged explicitly is accepted
        (except ``skip``: handed out but not seen by the application yet)."""
        keep = self.delivered.intersection(skip)
        seen = self.delivered - keep if keep else self.delivered
        pending = self.pending
        if pending:  # an ack already queued for an offset stays
            seen = seen.difference(pending)
        # added in place: the acks of one ShareFetch answer are taken once, after several polls,
        # and copying the ones queued so far at every poll made handing out a big answer quadratic
        if pending:
            pending.update(dict.fromkeys(seen, int(AcknowledgeType.ACCEPT)))
        else:
            self.pending = dict.fromkeys(seen, int(AcknowledgeType.ACCEPT))
        self.delivered = keep

    def take_pending(self) -> list[AckBatch]:
        """The queued acks as batches; they leave the books (sent means settled, whatever the
        answer: a failed ack is not retried, as in Kafka's and librdkafka's clients)."""
        if not self.pending:
            return []
        pending = self.pending
        batches = ack_batches(pending)
        acquired = self.acquired
        # set operations in C, not a Python step per offset: the acked offsets are usually all
        # of them (a subset test: lookups, no set built), or all but a batch fetched ahead
        if pending.keys() >= acquired.keys():
            acquired.clear()
        else:
            rest = acquired.keys() - pending.keys()
            if len(rest) < len(acquired):
                self.acquired = dict(zip(rest, map(acquired.__getitem__, rest)))
        self.pending = {}
        return batches

    def drop(self) -> int:
        """The share session ended (the broker released the records): forget everything.
        Returns how many acks were lost."""
        lost = len(self.pending)
        self.acquired.clear()
        self.delivered.clear()
        self.pending.clear()
        return lost

    @property
    def empty(self) -> bool:
        return not (self.acquired or self.pending)


@dataclass
class RangesInFlight:
    """Offsets-only books of one share-partition acquired from ``node``: ranges, never offsets.

    Why a second shape: a consumer that never decodes records (``ShareConsumer(offsets_only=True)``,
    the Spark source's driver) acquires and acknowledges tens of thousands of offsets per round;
    a dict entry per offset (:class:`PartitionInFlight`) was Python work per record on exactly the
    path a profile of the Spark source measured. Here every step costs per range. Offsets without a data
    record (compaction gaps, control records) are acquired like the rest: whoever reads the range
    finds fewer records, and acknowledging such an offset ends it as GAP would.
    """

    node: int
    #: ``[first, last, delivery_count]``, disjoint, in the order acquired
    acquired: list[list[int]] = field(default_factory=list)
    pending: list[AckBatch] = field(default_factory=list)

    def add_acquired(self, ranges: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """Take the broker's AcquiredRecords; returns them (all of them are this member's)."""
        out = [(int(a), int(b), int(c)) for a, b, c in ranges if b >= a]
        self.acquired.extend([a, b, c] for a, b, c in out)
        self.acquired.sort()
        return out

    def acknowledge(self, first: int, last: int, ack_type: int) -> None:
        """Queue one type for ``first..last``, which acquired ranges must cover without a hole
        (a caller may have merged adjacent ranges)."""
        if ack_type not in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT):
            raise ValueError(f"cannot acknowledge with {ack_type!r}; use ACCEPT, RELEASE or REJECT")
        acq = self.acquired
        i = bisect.bisect_right([r[0] for r in acq], first) - 1
        j, covered = i, first
        while 0 <= j < len(acq) and covered <= last and acq[j][0] <= covered <= acq[j][1]:
            covered = acq[j][1] + 1
            j += 1
        if i < 0 or last < first or covered <= last:
            raise AckStateError(f"offsets {first}..{last} are not acquired by this consumer")
        (a, _, head), (_, b, tail) = acq[i], acq[j - 1]
        acq[i:j] = ([[a, first - 1, head]] if a < first else []) + ([[last + 1, b, tail]] if last < b else [])
        self.pending.append(AckBatch(first, last, (int(ack_type),)))

    def take_pending(self) -> list[AckBatch]:
        """The queued acks as batches, sorted, adjacent ones of one type merged."""
        out: list[AckBatch] = []
        for b in sorted(self.pending, key=lambda b: b.first_offset):
            prev = out[-1] if out else None
            if prev is not None and prev.last_offset + 1 == b.first_offset and prev.types == b.types:
                out[-1] = AckBatch(prev.first_offset, b.last_offset, prev.types)
            else:
                out.append(b)
        self.pending.clear()
        return out

    def drop(self) -> int:
        """The share session ended (the broker released the records); returns acks lost."""
        lost = sum(b.last_offset - b.first_offset + 1 for b in self.pending)
        self.acquired.clear()
        self.pending.clear()
        return lost

    @property
    def empty(self) -> bool:
        return not (self.acquired or self.pending)
