"""The coalescing writer: the part of a persister that queues and commits writes.

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
partition is blocked until the truth is re-read (``on_commit_failed``: :meth:`Ownership.block`, ownership.py).

The writer also keeps, per state partition, why it takes no writes now (:attr:`CoalescingWriter.blocked`):
the ownership and cluster parts block and unblock partitions; every request meets it here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
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
from kshare_sidecar.persist.placement import EntityKey
from kshare_sidecar.persist.ops import Decision, _Op

if TYPE_CHECKING:
    from kshare_sidecar.persist.store import StateStore
    from kshare_sidecar.persist.view import StateView

log = logging.getLogger("kshare_sidecar.persist")


def blocked_error(p: int, reason: str | None) -> PersistError:
    """What a request to state partition ``p`` gets while it is blocked for ``reason``."""
    if reason == "unowned":
        return WriterFencedError(f"state partition {p} is owned by another sidecar of the cluster")
    if reason == "acquiring":
        return NotReadyError(f"state partition {p}: taking it over (replaying its state)")
    if reason == "unknown":
        return NotReadyError(f"state partition {p}: re-reading the state after an unconfirmed commit")
    if reason == "releasing":
        return WriterFencedError(f"state partition {p} is being handed over to another sidecar of the cluster")
    if reason == "superseded":
        return WriterFencedError(f"state partition {p} is owned by a newer sidecar; this one stopped serving")
    return WriterFencedError(f"state partition {p}: writer fenced, re-reading ownership from the backend")


#: Told that a commit of state partition ``p`` failed: ``(p, "fenced" | "unknown", error)``.
CommitFailed = Callable[[int, str, PersistError], None]


class CoalescingWriter:
    """Per state partition: a queue, a wake-up event and a writer task that flushes in batches."""

    def __init__(self, view: StateView, store: StateStore, *, linger_ms: float = 0.0, max_batch: int = 10_000,
                 on_commit_failed: CommitFailed | None = None) -> None:
        self.view = view
        self.store = store
        self.linger_ms = linger_ms
        self.max_batch = max_batch
        self.on_commit_failed = on_commit_failed
        #: partition -> why it takes no writes now ("unknown" outcome, "fenced", "superseded",
        #: "unowned", "acquiring", "releasing")
        self.blocked: dict[int, str] = {}
        self.commits = 0  # backend commits made (observability / tests)
        #: state records and their key + value bytes committed so far (kshare_state_*_written_total)
        self.records_written = 0
        self.bytes_written = 0
        self._queues: dict[int, list[_Op]] = {}
        self._wakeups: dict[int, asyncio.Event] = {}
        self._writers: dict[int, asyncio.Task[None]] = {}
        #: per partition, the batch being committed (a lapsed lease answers it at once: persist/cluster.py)
        self.flushing: dict[int, list[_Op]] = {}
        #: per partition: set while no batch is in flight (a release waits for it: persist/cluster.py)
        self.idle: dict[int, asyncio.Event] = {}

    def blocked_error(self, p: int) -> PersistError:
        return blocked_error(p, self.blocked.get(p))

    def fail_queued(self, p: int) -> None:
        """Answer every request queued for ``p`` with its blocked error (they may build on state
        that is not durable, or on a partition no longer owned)."""
        queue = self._queues.get(p)
        if not queue:
            return
        for op in queue:
            if not op.future.done():
                op.future.set_exception(self.blocked_error(p))
        queue.clear()

    def start(self, blocked: str | None = None) -> None:
        """One writer task per state partition (``blocked``: every partition starts blocked for
        that reason, e.g. "unowned" in a cluster until the sidecars' group assigns it)."""
        loop = asyncio.get_running_loop()
        for p in range(self.view.partitions):
            self._queues[p] = []
            self._wakeups[p] = asyncio.Event()
            self.idle[p] = asyncio.Event()
            self.idle[p].set()
            if blocked is not None:
                self.blocked[p] = blocked
            self._writers[p] = loop.create_task(self._writer(p), name=f"kshare-persist-writer-{p}")

    async def stop(self) -> None:
        """After the view is closed: let each writer finish its batch and exit; fail what is queued."""
        for event in self._wakeups.values():
            event.set()
        if self._writers:
            await asyncio.gather(*self._writers.values(), return_exceptions=True)
        for queue in self._queues.values():
            for op in queue:
                if not op.future.done():
                    op.future.set_exception(PersisterClosedError(f"{self.view.name} persister closed"))
            queue.clear()

    def enqueue(self, kind: str, ident: Any, fn: Decision) -> asyncio.Future[Any]:
        """Queue a decision on the entity's state partition; its future gets the decision's result
        once the batch is durable (or the PersistError that answers it)."""
        self.view.check_serving()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        p = self.view.home((kind, ident))
        if p in self.blocked:
            future.set_exception(self.blocked_error(p))
            return future
        self._queues[p].append(_Op(kind, ident, fn, future))
        self._wakeups[p].set()
        return future

    async def _writer(self, p: int) -> None:
        event, queue = self._wakeups[p], self._queues[p]
        while True:
            await event.wait()
            if self.linger_ms > 0 and not self.view.closed:
                await asyncio.sleep(self.linger_ms / 1000)
            event.clear()
            if not queue:
                if self.view.closed:
                    return
                continue
            batch = queue[: self.max_batch]
            del queue[: self.max_batch]
            if queue:
                event.set()
            idle = self.idle.get(p)
            if idle is not None:
                idle.clear()  # a release waits for the batch in flight (persist/cluster.py)
            self.flushing[p] = batch
            try:
                await self._flush(p, batch)
            except Exception as exc:  # never let one batch kill the writer
                log.exception("state partition %d: flush failed", p)
                for op in batch:
                    if not op.future.done():
                        op.future.set_exception(BackendWriteError(f"internal error: {exc!r}"))
            finally:
                self.flushing.pop(p, None)
                if idle is not None:
                    idle.set()

    async def _flush(self, p: int, batch: list[_Op]) -> None:
        if p in self.blocked:
            for op in batch:
                if not op.future.done():
                    op.future.set_exception(self.blocked_error(p))
            return
        overlay: dict[EntityKey, Any] = {}
        accepted: list[tuple[_Op, Any]] = []
        for op in batch:
            if op.future.done():  # caller gave up
                continue
            k = (op.kind, op.ident)
            current = overlay[k] if k in overlay else self.view.entities.get(k)
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
                await self.store.commit(p, records)
            except Exception as exc:  # noqa: BLE001 - any failure is an unknown outcome, not a failure
                # Never a certain failure: block the partition, read the truth back, then go on.
                fenced = isinstance(exc, WriterFencedError)
                failure: PersistError = exc if isinstance(exc, (WriterFencedError, CommitOutcomeUnknownError)) \
                    else CommitOutcomeUnknownError(f"state write to partition {p} not confirmed: {exc!r}")
                if self.on_commit_failed is not None:
                    self.on_commit_failed(p, "fenced" if fenced else "unknown", failure)
                self._fail(accepted, failure)
                return
            self.commits += 1
            self.records_written += len(records)
            self.bytes_written += sum(len(key) + len(value or b"") for key, value in records)
            entities = self.view.entities
            for k, entity in overlay.items():
                if entity is None:
                    entities.pop(k, None)
                else:
                    entities[k] = entity
        for op, result in accepted:
            if not op.future.done():
                op.future.set_result(result)

    @staticmethod
    def _fail(accepted: list[tuple[_Op, Any]], exc: PersistError) -> None:
        for op, _ in accepted:
            if not op.future.done():
                op.future.set_exception(exc)

    @staticmethod
    async def gather(keys: Sequence[Any], futures: Sequence[asyncio.Future[Any]]) -> dict[Any, Any]:
        """Await every future; per key its result or PersistError (anything else is raised)."""
        results = await asyncio.gather(*futures, return_exceptions=True)
        out: dict[Any, Any] = {}
        for key, res in zip(keys, results, strict=True):
            if isinstance(res, BaseException) and not isinstance(res, PersistError):
                raise res
            out[key] = res
        return out
