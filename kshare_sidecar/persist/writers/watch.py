"""The state-topic watch of ``state.write.mode=idempotent`` (docs/persistence.md, "Without transactions").

Without transactions the backend fences no writer: a paused sidecar that wakes up can still
append to the state topic after its successor took over. Replay ignores such records (the owner
rule of :mod:`kshare_sidecar.persist.replay`), and this watch makes the running owners act on
them: it tails the state topic from where the replay ended; a newer owner record supersedes this
sidecar (it stops serving, as a fenced transactional writer does at its next write), and an older
owner's late record makes the current owner write its own view of that key again, so that
compaction cannot keep the zombie's record as the newest of its key.

**Acknowledged only once it counts.** A write at offset *o* is honoured by every replay exactly
when no owner record with a higher epoch precedes *o* on its partition (the owner rule). So in
idempotent mode a state write is answered only after this watch has read past *o* without seeing
such a record; otherwise the writer was superseded and the write fails as a fenced one would
(``WriterFencedError``). A zombie therefore never answers an acknowledgement as durable — the
transactional mode's guarantee — at the cost of one more fetch round trip, not a transaction.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_GROUP, KIND_MEMBER, KIND_OWNER, KIND_PARTITION, CodecError
from kshare_sidecar.persist.errors import WriterFencedError

if TYPE_CHECKING:
    from kshare_sidecar.persist.base import BasePersister
    from kshare_sidecar.persist.settings import TopicSettings

log = logging.getLogger("kshare_sidecar.persist.topic")


class StateWatch:
    """Tails the state topic for a serving persister, from ``positions`` on (the store's replay
    positions, advanced here as the watch reads)."""

    def __init__(self, settings: TopicSettings, persister: BasePersister, positions: dict[int, int]) -> None:
        self.settings = settings
        self.persister = persister
        self.positions = positions  # partition -> offset the last full replay (then this watch) reached
        self.newer_owner_at: dict[int, int] = {}  # partition -> offset of the first newer owner record
        self.progress = asyncio.Condition()
        self._rewrites: set[asyncio.Future[None]] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="kshare-state-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _stopped(self) -> bool:
        return self.persister.view.closed or self.persister.ownership.superseded

    async def confirm(self, partition: int, offset: int) -> None:
        """Return once the watch has read past ``offset`` with no newer owner record before it;
        raise :class:`WriterFencedError` when one precedes it (the write will never count)."""
        async with self.progress:
            while self.positions.get(partition, 0) <= offset:
                if self._stopped():
                    break
                await self.progress.wait()
        newer = self.newer_owner_at.get(partition)
        if newer is not None and newer < offset or self.positions.get(partition, 0) <= offset:
            raise WriterFencedError(f"state partition {partition}: write at offset {offset} follows a newer owner's "
                                    f"record (offset {newer}); it will never count")

    async def _watch(self) -> None:
        """A newer owner record supersedes this sidecar; an older owner's late record is ignored by
        every replay, and the key is written again by us so that compaction cannot keep it."""
        s = self.settings
        while not self._stopped():
            consumer = s.bound(AIOKafkaConsumer(bootstrap_servers=s.bootstrap_servers, group_id=None,
                                                enable_auto_commit=False, isolation_level="read_uncommitted",
                                                request_timeout_ms=s.request_timeout_ms,
                                                client_id="kshare-state-watch", **s.client_options))
            try:
                await consumer.start()
                tps = [TopicPartition(s.topic, p) for p in range(self.persister.partitions)]
                consumer.assign(tps)
                for tp in tps:
                    consumer.seek(tp, self.positions.get(tp.partition, 0))
                while not self._stopped():
                    batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
                    stale: set = set()
                    for tp, messages in batches.items():
                        for m in messages:
                            self._watched(tp.partition, m.offset, m.key, m.value, stale)
                            self.positions[tp.partition] = m.offset + 1
                    async with self.progress:
                        self.progress.notify_all()
                    if stale and not self.persister.ownership.superseded:  # not awaited: those writes wait for us
                        task = asyncio.ensure_future(self.persister.rewrite_current(stale))
                        self._rewrites.add(task)
                        task.add_done_callback(self._rewrites.discard)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the backend comes and goes; watch again
                log.warning("state topic watch failed, restarting: %r", exc)
                await asyncio.sleep(1.0)
            finally:
                await asyncio.gather(consumer.stop(), return_exceptions=True)
        async with self.progress:  # superseded or closed: release whoever still waits
            self.progress.notify_all()

    def _watched(self, partition: int, offset: int, raw_key: bytes | None, raw_value: bytes | None,
                 stale: set[Any]) -> None:
        try:
            kind, ident, entity = codec.decode(raw_key, raw_value)
        except CodecError:
            return
        own_epoch = self.persister.ownership.owner_epoch
        own = own_epoch if own_epoch is not None else -1
        if kind == KIND_OWNER and entity is not None and entity > own:
            self.newer_owner_at.setdefault(partition, offset)
            self.persister.ownership.supersede(partition, entity)
        elif kind == KIND_PARTITION and entity is not None and 0 <= entity.state.leader_epoch < own:
            log.warning("state partition %d offset %d: a record written at older owner epoch %d (ours %d); "
                        "ignored by replay, rewriting the key", partition, offset, entity.state.leader_epoch, own)
            stale.add((kind, ident))
        elif kind in (KIND_GROUP, KIND_MEMBER) and entity is not None and 0 <= entity.owner_epoch < own:
            log.warning("state partition %d offset %d: a %s record written at older owner epoch %d (ours %d); "
                        "ignored by replay, rewriting the key", partition, offset, kind, entity.owner_epoch, own)
            stale.add((kind, ident))
