"""The memory persister: same semantics as the topic persister, state kept in-process.

It writes encoded records to a :class:`MemoryLog`, an in-process stand-in for the compacted
topic. Pass the same log to a new ``MemoryPersister`` to simulate a restart (it replays the
log); opening a persister on a log fences the previous one on the same partitions, exactly as
a transactional producer with the same ``transactional.id`` would.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence

from kshare_sidecar.persist.base import BasePersister, Record, ReplaySink
from kshare_sidecar.persist.errors import CommitOutcomeUnknownError, WriterFencedError
from kshare_sidecar.persist.store import StateStore


#: What the log holds: the persister's records, and (``produce_raw``, tests) records a producer
#: other than kshare might leave on a state topic, such as one without a key.
LogRecord = tuple[bytes | None, bytes | None]


class MemoryLog:
    """Per-partition lists of ``(key, value)`` records, with writer fencing and compaction."""

    _tokens = itertools.count(1)

    def __init__(self, partitions: int = 1):
        self.partitions: list[list[LogRecord]] = [[] for _ in range(partitions)]
        self._owner: dict[int, int] = {}
        self._faults: dict[int, list[str]] = {}

    def fail_next_commit(self, partition: int, *, landed: bool) -> None:
        """Fault injection: the next commit to ``partition`` raises CommitOutcomeUnknownError,
        after its records landed (``landed``: a lost confirmation) or before (an abort)."""
        self._faults.setdefault(partition, []).append("landed" if landed else "aborted")

    def open_writer(self, partition: int) -> int:
        """Become the writer of ``partition``; any previous writer is fenced."""
        token = next(self._tokens)
        self._owner[partition] = token
        return token

    def append(self, partition: int, token: int, records: list[Record]) -> None:
        if self._owner.get(partition) != token:
            raise WriterFencedError(f"memory log partition {partition}: a newer writer took over")
        faults = self._faults.get(partition)
        fault = faults.pop(0) if faults else None
        if fault != "aborted":
            self.partitions[partition].extend(records)
        if fault is not None:
            raise CommitOutcomeUnknownError(f"memory log partition {partition}: injected fault ({fault})")

    def produce_raw(self, partition: int, key: bytes | None, value: bytes | None) -> None:
        """Append a record without any checks (tests: garbage records)."""
        self.partitions[partition].append((key, value))

    def compact(self) -> None:
        """Keep the last record per key; drop tombstones (what log compaction converges to)."""
        for p, records in enumerate(self.partitions):
            last: dict[bytes | None, LogRecord] = {}
            for rec in records:
                last.pop(rec[0], None)
                last[rec[0]] = rec
            self.partitions[p] = [r for r in last.values() if r[1] is not None]

    def __len__(self) -> int:
        return sum(len(p) for p in self.partitions)


class MemoryStore(StateStore):
    """A :class:`MemoryLog` as a persister's store: one writer token per partition."""

    def __init__(self, log: MemoryLog) -> None:
        super().__init__(len(log.partitions))
        self.log = log
        self._tokens: dict[int, int] = {}
        self._replayed_to: dict[int, int] = {}  # partition -> its length at the last replay
        #: tests: when set, resolving an unconfirmed commit waits for this event
        self.settle_gate: asyncio.Event | None = None

    async def open(self, *, cluster: bool) -> None:
        if cluster:  # a writer per partition when it is acquired (persist/cluster.py)
            return
        self._tokens = {p: self.log.open_writer(p) for p in range(self.partitions)}

    def single_twin(self) -> MemoryStore:
        return MemoryStore(self.log)

    async def release(self, partition: int) -> None:
        self._tokens.pop(partition, None)

    async def replay(self, sink: ReplaySink, partitions: Sequence[int] | None = None, *,
                     start: Mapping[int, int] | None = None) -> None:
        for p, records in enumerate(self.log.partitions):
            if partitions is not None and p not in partitions:
                continue
            first = start.get(p, 0) if start is not None else 0
            records = list(records)
            for offset in range(first, len(records)):
                key, value = records[offset]
                sink(p, offset, key, value)
            self._replayed_to[p] = len(records)

    def replay_positions(self) -> dict[int, int]:
        return dict(self._replayed_to)

    async def settle(self, partition: int) -> bool:
        if self.settle_gate is not None:
            await self.settle_gate.wait()
        return True

    async def reopen(self, partition: int) -> None:
        self._tokens[partition] = self.log.open_writer(partition)

    async def commit(self, partition: int, records: list[Record]) -> None:
        token = self._tokens.get(partition)
        if token is None:
            raise WriterFencedError(f"memory log partition {partition}: no writer here")
        self.log.append(partition, token, records)


class MemoryPersister(BasePersister):
    """The persister over a :class:`MemoryLog` (a new one unless ``log`` is given)."""

    name = "memory"

    def __init__(self, *, log: MemoryLog | None = None, partitions: int | None = None,
                 linger_ms: float = 0.0, max_batch: int = 10_000, placement: str = "topic-partition"):
        if log is None:
            log = MemoryLog(partitions or 1)
        elif partitions is not None and partitions != len(log.partitions):
            raise ValueError(f"log has {len(log.partitions)} partitions, not {partitions}")
        # placement "key": an older build's layout (tests of persist/layout.py)
        self.memory = MemoryStore(log)
        super().__init__(self.memory, linger_ms=linger_ms, max_batch=max_batch, placement=placement)

    @property
    def log(self) -> MemoryLog:
        return self.memory.log

    @property
    def settle_gate(self) -> asyncio.Event | None:
        return self.memory.settle_gate

    @settle_gate.setter
    def settle_gate(self, gate: asyncio.Event | None) -> None:
        self.memory.settle_gate = gate

    def single_twin(self) -> MemoryPersister:
        return MemoryPersister(log=self.log, linger_ms=self.writer.linger_ms, max_batch=self.writer.max_batch)
