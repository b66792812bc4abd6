"""The coalescing writer of :class:`~kshare_sidecar.persist.base.BasePersister` (mixed in).

Why coalescing: every share-partition write is a complete snapshot, and a ShareFetch with acks
for many share-partitions (or many concurrent requests) would otherwise cost one backend commit
each. Writes are queued per state partition; one writer task per partition waits ``linger_ms``
after the first queued request, evaluates every queued request in order against the committed
state plus the batch's own earlier changes, writes the final value of each touched key in one
backend commit (``_commit``), and only then updates the in-memory view and answers the callers.

A request is a *decision* ``fn(current) -> (result, new entity)`` (the rules are in
:mod:`kshare_sidecar.persist.fencing`); ``new`` is :data:`~kshare_sidecar.persist.fencing.UNCHANGED`
when nothing is to be written. Requests that fail fencing are answered at once and write nothing;
if the commit fails, every request of the batch fails, the in-memory view is unchanged and the
partition is blocked until the truth is re-read (:meth:`OwnershipMixin._block`, ownership.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.errors import (
    BackendWriteError,
    CommitOutcomeUnknownError,
    NotReadyError,
    PersisterClosedError,
    PersistError,
    WriterFencedError,
)
from kshare_sidecar.persist.fencing import UNCHANGED
from kshare_sidecar.persist.ops import Decision, Record, _Op
from kshare_sidecar.persist.ownership import EntityKey, state_partition_for

log = logging.getLogger("kshare_sidecar.persist")

class CoalescingWriter:
    """Per state partition: a queue, a wake-up event and a writer task that flushes in batches."""

    # Provided by BasePersister and the ownership mixins (declared for the type checker).
    name: str
    partitions: int
    linger_ms: float
    max_batch: int
    placement: str
    blocked: dict[int, str]
    commits: int
    records_written: int
    bytes_written: int
    _entities: dict[EntityKey, Any]
    _ready: bool
    _closed: bool
    _idle: dict[int, asyncio.Event]
    if TYPE_CHECKING:
        async def _commit(self, partition: int, records: list[Record]) -> None: ...
        def _block(self, p: int, reason: str, exc: BaseException) -> None: ...
        def _blocked_error(self, p: int) -> PersistError: ...

    def _init_writers(self) -> None:
        #: state records and their key + value bytes committed so far (kshare_state_*_written_total)
        self.records_written = 0
        self.bytes_written = 0
        self._queues: dict[int, list[_Op]] = {}
        self._wakeups: dict[int, asyncio.Event] = {}
        self._writers: dict[int, asyncio.Task[None]] = {}
        #: per partition, the batch being committed (a lapsed lease answers it at once: persist/cluster.py)
        self._flushing: dict[int, list[_Op]] = {}

    def _start_writers(self, blocked: str | None = None) -> None:
        """One writer task per state partition (``blocked``: every partition starts blocked for
        that reason, e.g. "unowned" in a cluster until the sidecars' group assigns it)."""
        loop = asyncio.get_running_loop()
        for p in range(self.partitions):
            self._queues[p] = []
            self._wakeups[p] = asyncio.Event()
            self._idle[p] = asyncio.Event()
            self._idle[p].set()
            if blocked is not None:
                self.blocked[p] = blocked
            self._writers[p] = loop.create_task(self._writer(p), name=f"kshare-persist-writer-{p}")

    async def _stop_writers(self) -> None:
        """After ``_closed`` is set: let each writer finish its batch and exit; fail what is queued."""
        for event in self._wakeups.values():
            event.set()
        if self._writers:
            await asyncio.gather(*self._writers.values(), return_exceptions=True)
        for queue in self._queues.values():
            for op in queue:
                if not op.future.done():
                    op.future.set_exception(PersisterClosedError(f"{self.name} persister closed"))
            queue.clear()

    def _check_serving(self) -> None:
        if self._closed:
            raise PersisterClosedError(f"{self.name} persister is closed")
        if not self._ready:
            raise NotReadyError(f"{self.name} persister is loading its state")

    def _enqueue(self, kind: str, ident: Any, fn: Decision) -> asyncio.Future[Any]:
        """Queue a decision on the entity's state partition; its future gets the decision's result
        once the batch is durable (or the PersistError that answers it)."""
        self._check_serving()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        p = state_partition_for(kind, ident, self.partitions, self.placement)
        if p in self.blocked:
            future.set_exception(self._blocked_error(p))
            return future
        self._queues[p].append(_Op(kind, ident, fn, future))
        self._wakeups[p].set()
        return future

    async def _writer(self, p: int) -> None:
        event, queue = self._wakeups[p], self._queues[p]
        while True:
            await event.wait()
            if self.linger_ms > 0 and not self._closed:
                await asyncio.sleep(self.linger_ms / 1000)
            event.clear()
            if not queue:
                if self._closed:
                    return
                continue
            batch = queue[: self.max_batch]
            del queue[: self.max_batch]
            if queue:
                event.set()
            idle = self._idle.get(p)
            if idle is not None:
                idle.clear()  # a release waits for the batch in flight (persist/cluster.py)
            self._flushing[p] = batch
            try:
                await self._flush(p, batch)
            except Exception as exc:  # never let one batch kill the writer
                log.exception("state partition %d: flush failed", p)
                for op in batch:
                    if not op.future.done():
                        op.future.set_exception(BackendWriteError(f"internal error: {exc!r}"))
            finally:
                self._flushing.pop(p, None)
                if idle is not None:
                    idle.set()

    async def _flush(self, p: int, batch: list[_Op]) -> None:
        if p in self.blocked:
            for op in batch:
                if not op.future.done():
                    op.future.set_exception(self._blocked_error(p))
            return
        overlay: dict[EntityKey, Any] = {}
        accepted: list[tuple[_Op, Any]] = []
        for op in batch:
            if op.future.done():  # caller gave up
                continue
            k = (op.kind, op.ident)
            current = overlay[k] if k in overlay else self._entities.get(k)
            try:
                result, new = op.fn(current)
            except PersistError as exc:
                op.future.set_exception(exc)
                continue
            if new is not UNCHANGED:
                overlay[k] = new
            accepted.append((op, result))
        if overlay:
            records = [codec.encode(kind, ident, entity) for (kind, ident), entity in overlay.items()]
            try:
                await self._commit(p, records)
            except Exception as exc:  # noqa: BLE001 - any failure is an unknown outcome, not a failure
                # Never a certain failure: block the partition, read the truth back, then go on.
                fenced = isinstance(exc, WriterFencedError)
                failure: PersistError = exc if isinstance(exc, (WriterFencedError, CommitOutcomeUnknownError)) \
                    else CommitOutcomeUnknownError(f"state write to partition {p} not confirmed: {exc!r}")
                self._block(p, "fenced" if fenced else "unknown", failure)
                self._fail(accepted, failure)
                return
            self.commits += 1
            self.records_written += len(records)
            self.bytes_written += sum(len(key) + len(value or b"") for key, value in records)
            for k, entity in overlay.items():
                if entity is None:
                    self._entities.pop(k, None)
                else:
                    self._entities[k] = entity
        for op, result in accepted:
            if not op.future.done():
                op.future.set_result(result)

    @staticmethod
    def _fail(accepted: list[tuple[_Op, Any]], exc: PersistError) -> None:
        for op, _ in accepted:
            if not op.future.done():
                op.future.set_exception(exc)

    @staticmethod
    async def _gather(keys: Sequence[Any], futures: Sequence[asyncio.Future[Any]]) -> dict[Any, Any]:
        """Await every future; per key its result or PersistError (anything else is raised)."""
        results = await asyncio.gather(*futures, return_exceptions=True)
        out: dict[Any, Any] = {}
        for key, res in zip(keys, results, strict=True):
            if isinstance(res, BaseException) and not isinstance(res, PersistError):
                raise res
            out[key] = res
        return out
