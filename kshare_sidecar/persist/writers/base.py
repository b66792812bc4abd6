"""What every write mode's writers share (persist/writers/__init__.py chooses one)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kshare_sidecar.backend.health import drop_connections
from kshare_sidecar.persist.errors import CommitOutcomeUnknownError, PersistError, WriterFencedError
from kshare_sidecar.persist.txnclient import is_fenced

if TYPE_CHECKING:
    from kshare_sidecar.persist.ops import Record
    from kshare_sidecar.persist.settings import TopicSettings

log = logging.getLogger("kshare_sidecar.persist.topic")


class StateWriters:
    """One writer per state partition, for one write mode (subclasses say how a batch is written)."""

    #: the replay's stale-record rule this mode needs (replay.RULES)
    replay_rule = "owner"
    #: whether the backend fences a superseded writer (persist/layout.py checks otherwise)
    fences_writers = True

    def __init__(self, settings: TopicSettings) -> None:
        self.settings = settings
        self.producers: dict[int, Any] = {}  # partition -> its writer (producer or EpochWriter)

    # ------------------------------------------------------------------ what a mode supplies
    def new(self, partition: int) -> Any:
        """A writer for ``partition``, not yet started."""
        raise NotImplementedError

    async def write(self, producer: Any, partition: int, records: list[Record]) -> None:
        """Write ``records`` with ``producer``; done when they are durable."""
        raise NotImplementedError

    def unusable(self, producer: Any) -> bool:
        """Whether ``producer`` can write no more (a fatal error): the commit counts as fenced."""
        return False

    async def settle(self, partition: int) -> bool:
        """Wait until the last commit on ``partition`` ended; False when its writer is unusable."""
        return partition in self.producers

    # --------------------------------------------------------------------------- the rest
    async def open(self) -> None:
        """Resources every partition's writer shares (opened once, before any writer)."""

    async def start_all(self, partitions: int) -> None:
        """A single sidecar: a started writer for every partition (their init fences older writers)."""
        producers = {p: self.new(p) for p in range(partitions)}
        results = await asyncio.gather(*(pr.start() for pr in producers.values()), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(self._stop(pr) for pr in producers.values()), return_exceptions=True)
            raise errors[0]
        self.producers = producers

    async def commit(self, partition: int, records: list[Record]) -> None:
        producer = self.producers.get(partition)
        if producer is None:
            raise WriterFencedError(f"state partition {partition} of {self.settings.topic!r} has no usable writer")
        try:
            # a timeout scope, not wait_for: no task of its own per state write (Python 3.11's
            # wait_for wraps the coroutine in one)
            async with asyncio.timeout(self.settings.commit_timeout_s):
                await self.write(producer, partition, records)
        except PersistError:
            raise
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            if is_fenced(exc) or self.unusable(producer):
                raise WriterFencedError(
                    f"state partition {partition} of {self.settings.topic!r}: transactional.id "
                    f"{self.settings.transactional_id(partition)!r} was fenced ({type(exc).__name__}); re-reading "
                    f"ownership") from exc
            raise CommitOutcomeUnknownError(f"state write to {self.settings.topic!r} partition {partition} not "
                                            f"confirmed: {exc!r}") from exc

    async def reopen(self, partition: int) -> None:
        """Takeover of one partition: a fresh writer whose init fences every other writer of this
        transactional.id (and aborts its open transaction)."""
        await self.drop(partition)
        producer = self.new(partition)
        try:
            await producer.start()
        except BaseException:
            await asyncio.gather(self._stop(producer), return_exceptions=True)
            raise
        self.producers[partition] = producer

    async def drop(self, partition: int) -> None:
        producer = self.producers.pop(partition, None)
        if producer is None:
            return
        try:
            await asyncio.wait_for(self._stop(producer), 10)
        except BaseException as exc:  # noqa: BLE001 - fenced or broken; just release it
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.debug("stopping producer %d: %r", partition, exc)

    async def _stop(self, producer: Any) -> None:
        await producer.stop()

    def serving(self, persister: Any, positions: dict[int, int]) -> None:
        """The persister serves now (the idempotent mode starts its watch here)."""

    def drop_connections(self) -> int:
        """Close the writers' backend connections (aiokafka producers: each its own client)."""
        return sum(drop_connections(producer.client) for producer in self.producers.values())

    async def close(self) -> None:
        producers, self.producers = self.producers, {}
        await asyncio.gather(*(self._stop(p) for p in producers.values()), return_exceptions=True)
