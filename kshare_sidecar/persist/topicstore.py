"""The compacted state topic as a persister's store: the topic made sure of, read back, and written
by the writers of its ``state.write.mode`` (persist/writers/).

* The topic (default ``__kshare_state``) is created when missing with ``cleanup.policy=compact``
  and settings that keep it small; an existing topic that is not compacted is refused with a
  message naming the topic and the fix (:mod:`kshare_sidecar.persist.topicsetup`); an existing
  topic's partition count is adopted.
* Replays read ``isolation_level=read_committed`` up to the last stable offset.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from kshare_sidecar.persist import topicsetup
from kshare_sidecar.persist.errors import BackendWriteError, CommitOutcomeUnknownError, NotReadyError
from kshare_sidecar.persist.settings import TopicSettings
from kshare_sidecar.persist.store import StateStore
from kshare_sidecar.persist.writers import for_mode
from kshare_sidecar.persist.writers.base import StateWriters

if TYPE_CHECKING:
    from kshare_sidecar.persist.ops import Record, ReplaySink

log = logging.getLogger("kshare_sidecar.persist.topic")


class TopicStore(StateStore):
    """The state topic on the backend, with one writer strategy chosen once from the settings."""

    # A fenced writer that is still the newest owner waits this long before taking its partition
    # back: a starting sidecar fences first and records its epoch just after.
    takeover_grace_s = 2.0

    def __init__(self, settings: TopicSettings, writers: StateWriters | None = None) -> None:
        super().__init__(settings.partitions)
        self.settings = settings
        self.topic = settings.topic
        self.transactional_id_prefix = settings.transactional_id_prefix
        self.create_topic = settings.create_topic
        self.writers = writers if writers is not None else for_mode(settings)
        self.replay_rule = self.writers.replay_rule
        self.fences_writers = self.writers.fences_writers
        self._replayed_to: dict[int, int] = {}  # partition -> offset the last full replay (then the watch) reached

    def single_twin(self) -> TopicStore:
        """Same backend, topic and writer mode, for a persister owning every partition (persist/layout.py)."""
        return TopicStore(dataclasses.replace(self.settings, partitions=self.partitions, create_topic=False))

    # ------------------------------------------------------------------------------- open
    async def open(self, *, cluster: bool) -> None:
        await self.ensure_topic()
        await self.writers.open()
        if cluster:  # writers are opened per state partition when the group assigns it
            return
        # Writers first: their init fences older writers and resolves their open transactions, so
        # the replay that follows sees a stable end.
        try:
            await self.writers.start_all(self.partitions)
        except Exception as exc:
            raise BackendWriteError(f"cannot start transactional producers for state topic "
                                    f"{self.topic!r}: {exc!r}") from exc

    async def adopt_topic(self) -> None:
        """Take the existing state topic's partition count without creating anything (a tool
        reading the topic: `kshare state migrate`, `migrate-to-native`)."""
        self.create_topic = False
        await self.ensure_topic()

    async def ensure_topic(self) -> None:
        """Create the state topic when missing (persist/topicsetup.py); adopt an existing topic's
        partition count; refuse a topic that is not compacted."""
        s = self.settings
        admin = s.bound(AIOKafkaAdminClient(bootstrap_servers=s.bootstrap_servers,
                                            request_timeout_ms=s.request_timeout_ms, **s.client_options))
        await admin.start()
        try:
            await topicsetup.check_write_mode(admin, s.write_mode)  # before anything is created
            timeout_s = s.request_timeout_ms / 1000
            count = await topicsetup.create_or_describe(
                admin, self.topic, partitions=self.partitions, replication_factor=s.replication_factor,
                configs=s.created_configs(), create=self.create_topic, timeout_s=timeout_s)
            if count != self.partitions:
                if self.create_topic:  # a tool adopting the topic (adopt_topic) configured no count
                    log.warning("state topic %r has %d partitions (configured %d): using %d; the partition count "
                                "of an existing state topic must never change", self.topic, count, self.partitions, count)
                self.partitions = count
            await topicsetup.check_compacted(admin, self.topic, timeout_s)
        finally:
            await admin.close()

    # ----------------------------------------------------------------------------- replay
    def replay_positions(self) -> dict[int, int]:
        return dict(self._replayed_to)

    async def replay(self, sink: ReplaySink, partitions: Sequence[int] | None = None, *,
                     start: Mapping[int, int] | None = None) -> None:
        s = self.settings
        consumer = s.bound(AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=16 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
            request_timeout_ms=s.request_timeout_ms,
            client_id="kshare-state-recovery",
            **s.client_options,
        ))
        try:
            await consumer.start()  # inside: a replay cancelled while starting still stops its consumer
            tps = [TopicPartition(self.topic, p)
                   for p in (range(self.partitions) if partitions is None else partitions)]
            consumer.assign(tps)
            if start is None:
                await consumer.seek_to_beginning(*tps)
            else:  # going on from an earlier replay (Replay.recover(resume=True))
                for tp in tps:
                    consumer.seek(tp, start.get(tp.partition, 0))
            ends = await consumer.end_offsets(tps)  # last stable offsets under read_committed
            for tp in tps:
                self._replayed_to[tp.partition] = ends[tp]
            pending = set()
            for tp in tps:
                if await consumer.position(tp) < ends[tp]:
                    pending.add(tp)
            deadline = time.monotonic() + s.recovery_timeout_s
            while pending:
                if time.monotonic() > deadline:
                    raise NotReadyError(f"state topic {self.topic!r}: replay did not reach the end within "
                                        f"{s.recovery_timeout_s}s")
                batches = await consumer.getmany(*pending, timeout_ms=200, max_records=100_000)
                for tp, messages in batches.items():
                    for m in messages:
                        sink(tp.partition, m.offset, m.key, m.value)
                for tp in list(pending):
                    if await consumer.position(tp) >= ends[tp]:
                        pending.discard(tp)
        finally:
            await consumer.stop()

    async def await_stable(self, partition: int) -> None:
        """Wait until the last stable offset reaches the high watermark seen now. EndTxn is answered
        once the commit is decided, *before* its markers are written: a read right after a settled
        commit could miss it and adopt the older state (seen in tests/e2e/test_fencing_faults.py)."""
        s = self.settings
        tp = TopicPartition(self.topic, partition)
        consumers = {iso: s.bound(AIOKafkaConsumer(bootstrap_servers=s.bootstrap_servers, group_id=None,
                                                   isolation_level=iso, request_timeout_ms=s.request_timeout_ms,
                                                   client_id="kshare-state-stable", **s.client_options))
                     for iso in ("read_uncommitted", "read_committed")}
        try:
            await asyncio.gather(*(c.start() for c in consumers.values()))
            target = (await consumers["read_uncommitted"].end_offsets([tp]))[tp]
            deadline = time.monotonic() + 2 * s.transaction_timeout_ms / 1000 + 10
            while (await consumers["read_committed"].end_offsets([tp]))[tp] < target:
                if time.monotonic() > deadline:
                    raise CommitOutcomeUnknownError(f"state partition {partition}: last stable offset stays below "
                                                    f"{target}")
                await asyncio.sleep(0.05)
        finally:
            await asyncio.gather(*(c.stop() for c in consumers.values()), return_exceptions=True)

    # ------------------------------------------------------------------------ the writers
    async def commit(self, partition: int, records: list[Record]) -> None:
        await self.writers.commit(partition, records)

    async def settle(self, partition: int) -> bool:
        return await self.writers.settle(partition)

    async def reopen(self, partition: int) -> None:
        await self.writers.reopen(partition)

    async def release(self, partition: int) -> None:
        await self.writers.drop(partition)

    def serving(self, persister: Any) -> None:
        self.writers.serving(persister, self._replayed_to)

    def drop_connections(self) -> int:
        return self.writers.drop_connections()

    async def close(self) -> None:
        await self.writers.close()
