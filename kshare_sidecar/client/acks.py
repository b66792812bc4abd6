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


class Block:
    """The records of one fresh acquisition while only the implicit steps touch them: their
    offsets (the record walk's list, shared with the fetcher's chunk), a prefix of it handed to
    the application, a shorter prefix accepted. Per answer a few integers change, not an entry
    per offset. ``live`` is False once the books have moved it into their per-offset dicts."""

    __slots__ = ("offsets", "count", "handed", "accepted", "live")

    def __init__(self, offsets: list[int], count: int) -> None:
        self.offsets = offsets
        self.count = count
        self.handed = 0
        self.accepted = 0
        self.live = True


class PartitionInFlight:
    """Offsets of one share-partition acquired from ``node`` and not yet acknowledged.

    Two shapes of the same books. Per offset: ``acquired`` (offset -> delivery count),
    ``delivered`` (handed to the application, no ack yet) and ``pending`` (offset -> type, not yet
    sent). And :class:`Block`\\ s: a consumer in implicit mode takes an answer's records, hands
    them out in order and accepts what it handed out, and keeping a dict and a set entry per
    offset for that cost more than building the records (a dict or set step is 30–110 ns on the
    benchmark machine). An acquisition wholly above every offset these books held becomes a
    block; whatever needs an offset's own state (an explicit acknowledgement, a record acquired
    again, a lost session, a skip that is not the tail handed out) first moves the blocks into
    the dicts (:meth:`materialize`), after which everything is as it was per offset. Reading
    ``acquired``, ``delivered`` or ``pending`` does that too, so they are always the whole truth.
    """

    def __init__(self, node: int) -> None:
        self.node = node
        self._acquired: dict[int, int] = {}
        self._delivered: set[int] = set()
        self._pending: dict[int, int] = {}
        self._blocks: list[Block] = []
        #: queued acks a new acquisition of their record replaced before they were sent (its lock ran
        #: out and it was delivered again): failed, and commit must say so (the fetcher reports them)
        self.superseded = 0
        #: the last add_acquired took offsets this member already held (their locks had run out and
        #: the broker handed them to it again): older copies still buffered are stale
        self.reacquired = False
        #: the highest offset of any range these books took: a range above it overlaps nothing held
        self.high = -1
        #: the block the last add_acquired made (None: it went into the per-offset dicts)
        self.last_block: Block | None = None

    def __repr__(self) -> str:
        return f"PartitionInFlight(node={self.node}, blocks={len(self._blocks)}, acquired={len(self._acquired)})"

    # -- the per-offset view ------------------------------------------------------------------
    @property
    def acquired(self) -> dict[int, int]:
        self.materialize()
        return self._acquired

    @property
    def delivered(self) -> set[int]:
        self.materialize()
        return self._delivered

    @property
    def pending(self) -> dict[int, int]:
        self.materialize()
        return self._pending

    def materialize(self) -> None:
        """Move the blocks into the per-offset dicts (their records stay where they are)."""
        if not self._blocks:
            return
        for b in self._blocks:
            offsets = b.offsets
            self._acquired.update(dict.fromkeys(offsets, b.count))
            if b.handed > b.accepted:
                self._delivered.update(offsets[b.accepted:b.handed])
            if b.accepted:
                self._pending.update(dict.fromkeys(offsets[:b.accepted], int(AcknowledgeType.ACCEPT)))
            b.live = False
        self._blocks.clear()

    def snapshot(self) -> tuple[dict[int, int], set[int], dict[int, int]]:
        """Copies of ``(acquired, delivered, pending)`` per offset, the blocks left as they are."""
        acquired, delivered, pending = dict(self._acquired), set(self._delivered), dict(self._pending)
        for b in self._blocks:
            acquired.update(dict.fromkeys(b.offsets, b.count))
            delivered.update(b.offsets[b.accepted:b.handed])
            pending.update(dict.fromkeys(b.offsets[:b.accepted], int(AcknowledgeType.ACCEPT)))
        return acquired, delivered, pending

    @property
    def has_pending(self) -> bool:
        """Acks wait to be sent (without moving the blocks)."""
        return bool(self._pending) or any(b.accepted for b in self._blocks)

    @property
    def empty(self) -> bool:
        return not (self._acquired or self._pending or self._blocks)

    # -- the steps ----------------------------------------------------------------------------
    def add_acquired(self, ranges: Iterable[tuple[int, int, int]], record_offsets: Iterable[int], *,
                     ascending: bool = False) -> list[int]:
        """Take the broker's AcquiredRecords ``(first, last, delivery_count)``; offsets in them
        without a data record are queued as GAP at once. Returns the record offsets that are
        acquired (records outside every acquired range belong to someone else: drop them).
        ``ascending``: ``record_offsets`` is a list already in order (the record walk's); then
        ranges wholly above every offset held, of one delivery count, become a block
        (``last_block``). Otherwise per range a few set and dict operations on whole slices, not
        a Python step per offset."""
        ranges = list(ranges)
        present = record_offsets if ascending and isinstance(record_offsets, list) else sorted(record_offsets)
        self.reacquired = False
        self.last_block = None
        if ascending and ranges and min(r[0] for r in ranges) > self.high and len({r[2] for r in ranges}) == 1:
            runs = [(first, last, present[bisect.bisect_left(present, first):bisect.bisect_right(present, last)])
                    for first, last, _ in sorted(ranges)] if len(ranges) > 1 else [(*ranges[0][:2], present)]
            # the fetcher's chunk holds every record of ``present``: the block must match it
            if sum(len(run) for _, _, run in runs) == len(present) and \
                    (len(ranges) > 1 or not present or ranges[0][0] <= present[0] <= present[-1] <= ranges[0][1]):
                for first, last, run in runs:
                    self._gaps(first, last, run)
                self.high = max(self.high, max(r[1] for r in ranges))
                if present:
                    self.last_block = Block(present, ranges[0][2])  # the walk's own list: no copy
                    self._blocks.append(self.last_block)
                return present
        return self._add_per_offset(ranges, present)

    def _add_per_offset(self, ranges: list[tuple[int, int, int]], present: list[int]) -> list[int]:
        """add_acquired into the per-offset dicts."""
        self.materialize()
        kept: list[int] = []
        for first, last, count in ranges:
            run = present[bisect.bisect_left(present, first):bisect.bisect_right(present, last)]
            if first <= self.high:  # records this member may hold already: their copies are stale
                if self._acquired and not self.reacquired:
                    self.reacquired = not self._acquired.keys().isdisjoint(run)
                if self._delivered:
                    self._delivered.difference_update(run)
                if self._pending and not self._pending.keys().isdisjoint(run):
                    stale = self._pending.keys() & run  # rare: a queued ack whose record came again
                    self.superseded += len(stale)
                    for offset in stale:
                        del self._pending[offset]
            self.high = max(self.high, last)
            self._acquired.update(dict.fromkeys(run, count))
            self._gaps(first, last, run)
            kept += run
        kept.sort()
        return kept

    def _gaps(self, first: int, last: int, run: list[int]) -> None:
        """Offsets of ``first..last`` without a record in ``run``: GAP, queued at once."""
        if len(run) < last - first + 1:
            gaps = set(range(first, last + 1)).difference(run)
            self._pending.update(dict.fromkeys(gaps, int(AcknowledgeType.GAP)))

    def hand_out(self, block: Block | None, offsets: list[int]) -> None:
        """``offsets`` were handed to the application: the next ones of ``block`` if it is still
        one (the fetcher hands a chunk out in order), else marked delivered one by one."""
        if block is not None and block.live:
            block.handed += len(offsets)
        else:  # its offsets are in the dicts already (a dead block's were moved there whole)
            self._delivered.update(offsets)

    def release(self, ranges: Iterable[tuple[int, int, int]]) -> None:
        """Acquired ranges whose records cannot be decoded: queue RELEASE for all of them, so
        that another consumer (one with the codec, say) gets them."""
        self.materialize()
        for first, last, _ in ranges:
            self._pending.update(dict.fromkeys(range(first, last + 1), int(AcknowledgeType.RELEASE)))
            self.high = max(self.high, last)

    def deliver(self, offset: int) -> None:
        if offset in self.acquired:
            self._delivered.add(offset)

    def acknowledge(self, offset: int, ack_type: int) -> None:
        """Queue an ack; a later ack of the same record before it is sent replaces the earlier."""
        if ack_type not in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT):
            raise ValueError(f"cannot acknowledge with {ack_type!r}; use ACCEPT, RELEASE or REJECT")
        if offset not in self.acquired:
            raise AckStateError(f"offset {offset} is not acquired by this consumer")
        self._pending[offset] = int(ack_type)
        self._delivered.discard(offset)

    def accept_delivered(self, skip: Iterable[int] = ()) -> None:
        """Implicit mode: every record handed out and not acknowledged explicitly is accepted
        (except ``skip``: handed out but not seen by the application yet)."""
        if self._blocks:
            if not self._accept_blocks(skip):
                self.materialize()
        keep = self._delivered.intersection(skip)
        seen = self._delivered - keep if keep else self._delivered
        pending = self._pending
        if pending:  # an ack already queued for an offset stays
            seen = seen.difference(pending)
        # added in place: the acks of one ShareFetch answer are taken once, after several polls,
        # and copying the ones queued so far at every poll made handing out a big answer quadratic
        if pending:
            pending.update(dict.fromkeys(seen, int(AcknowledgeType.ACCEPT)))
        else:
            self._pending = dict.fromkeys(seen, int(AcknowledgeType.ACCEPT))
        self._delivered = keep

    def _accept_blocks(self, skip: Iterable[int]) -> bool:
        """Accept what the blocks handed out, but the tail ``skip`` names; False when ``skip``
        is not the tail of the last block that has records handed out and not accepted."""
        unseen = set(skip)
        tail = next((b for b in reversed(self._blocks) if b.handed > b.accepted), None)
        if unseen:
            k = len(unseen)
            if tail is None or tail.handed - tail.accepted < k or \
                    unseen != set(tail.offsets[tail.handed - k:tail.handed]):
                return False
        for b in self._blocks:
            b.accepted = b.handed
        if unseen and tail is not None:
            tail.accepted = tail.handed - len(unseen)
        return True

    def take_pending(self) -> list[AckBatch]:
        """The queued acks as batches; they leave the books (sent means settled, whatever the
        answer: a failed ack is not retried, as in Kafka's and librdkafka's clients)."""
        if self._blocks and not self._pending:
            batches = self._take_blocks()
            if batches is not None:
                return batches
        self.materialize()
        pending = self._pending
        if not pending:
            return []
        batches = ack_batches(pending)
        acquired = self._acquired
        # set operations in C, not a Python step per offset: the acked offsets are usually all
        # of them (a subset test: lookups, no set built), or all but a batch fetched ahead
        if pending.keys() >= acquired.keys():
            acquired.clear()
        else:
            rest = acquired.keys() - pending.keys()
            if len(rest) < len(acquired):
                self._acquired = dict(zip(rest, map(acquired.__getitem__, rest)))
        self._pending = {}
        return batches

    def _take_blocks(self) -> list[AckBatch] | None:
        """The blocks' accepted prefixes as ACCEPT batches, adjacent ones merged (what
        :func:`ack_batches` makes of the same offsets); None when a prefix has holes in it (its
        GAPs went out earlier): the per-offset way then."""
        out: list[AckBatch] = []
        accept = (int(AcknowledgeType.ACCEPT),)
        for b in self._blocks:
            if b.accepted:
                first, last = b.offsets[0], b.offsets[b.accepted - 1]
                if last - first + 1 != b.accepted:
                    return None
                if out and out[-1].last_offset + 1 == first:
                    out[-1] = AckBatch(out[-1].first_offset, last, accept)
                else:
                    out.append(AckBatch(first, last, accept))
        if len(out) > 1 and any(x.last_offset >= y.first_offset for x, y in zip(out, out[1:])):
            return None  # not in offset order: leave the sorting to ack_batches
        kept: list[Block] = []
        for b in self._blocks:
            if b.accepted:
                b.offsets = b.offsets[b.accepted:]
                b.handed -= b.accepted
                b.accepted = 0
            if b.offsets:
                kept.append(b)
            else:
                b.live = False
        self._blocks = kept
        return out

    def drop(self) -> int:
        """The share session ended (the broker released the records): forget everything.
        Returns how many acks were lost."""
        self.materialize()
        lost = len(self._pending)
        self._acquired.clear()
        self._delivered.clear()
        self._pending.clear()
        return lost


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

    @property
    def has_pending(self) -> bool:
        return bool(self.pending)
