"""The compacted-topic persister (the default): share-group state in a topic on the backend.

* The topic (default ``__kshare_state``) is created when missing with ``cleanup.policy=compact``
  and settings that keep it small; an existing topic that is not compacted is refused with a
  message naming the topic and the fix (:mod:`kshare_sidecar.persist.topicsetup`).
* One record per entity (share-partition snapshot, group record, topic-id entry), keyed by
  :mod:`kshare_sidecar.persist.codec`; deletes are tombstones.
* Writes are coalesced per state-topic partition (``linger_ms``); each batch is written by the
  partition's writer (:data:`WRITE_MODES`; by default idempotent batches at the producer epoch of
  ``transactional.id`` ``<prefix>-<topic>-<partition>``, persist/epochwriter.py, or one Kafka
  transaction per batch under that id): starting a second instance for the same partition bumps
  the producer epoch and the backend fences the first one, which then fails its writes with
  :class:`WriterFencedError` and re-reads ownership (never a silent loss). Callers proceed
  only after the commit (acks=all, idempotent) returned. A commit that times out is *not*
  a failure: the producer is never re-initialised to recover from it (that would fence a live
  owner); the engine waits for the producer's transaction to end and re-reads the partition.
  (``idempotent`` mode, for backends without transactions, is fenced by replay and
  persist/watch.py instead.)
* Recovery replays every partition with ``isolation_level=read_committed`` up to the
  last-stable offset before the persister is ``ready``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.producer.transaction_manager import TransactionState

from kshare_sidecar.backend.health import drop_connections
from kshare_sidecar.persist.base import BasePersister, Record, ReplaySink
from kshare_sidecar.persist.codec import KIND_OWNER
from kshare_sidecar.persist import codec, topicsetup
from kshare_sidecar.persist.epochwriter import EpochWriter
from kshare_sidecar.persist.ownership import PLACEMENTS
from kshare_sidecar.persist.records import RecoveryStats
from kshare_sidecar.persist.txnclient import fast_concurrent_txn_retry, is_fenced
from kshare_sidecar.persist.watch import StateWatchMixin
from kshare_sidecar.persist.errors import (
    BackendWriteError,
    CommitOutcomeUnknownError,
    NotReadyError,
    PersistError,
    WriterFencedError,
)
from kshare_sidecar.persist.topicsetup import DEFAULT_TOPIC_CONFIGS

log = logging.getLogger("kshare_sidecar.persist.topic")

DEFAULT_TOPIC = "__kshare_state"

#: Fault-injection hook for the fencing e2e tests only: hold every state transaction open this long
#: between its records and its commit, so a SIGSTOP lands inside an open transaction for certain.
_TEST_COMMIT_HOLD_S = float(os.environ.get("KSHARE_TEST_STATE_COMMIT_HOLD_MS", "0") or 0) / 1000

#: ``fenced`` (the default): idempotent batches under a transactional id's producer epoch, fenced by
#: the partition leader (persist/epochwriter.py); ``transactional``: a Kafka transaction per write;
#: ``idempotent``: plain idempotent produce, for backends without transactions (docs/persistence.md).
WRITE_MODES = ("fenced", "transactional", "idempotent")

#: How often a ``fenced``-mode writer takes a new producer epoch and writes its owner record again,
#: so that neither the transactional id (``transactional.id.expiration.ms``, Kafka's default 7 days)
#: nor the producer state on the state partition (``producer.id.expiration.ms``, default 1 day)
#: expires while this sidecar owns it — an expired one would let a zombie's write land. The
#: sidecar's ``state.write.refresh.ms``; 0 turns it off for backends that expire neither and cannot
#: serve the conditional InitProducerId it sends (tansu 0.6.0's libSQL engine panics on it).
WRITER_REFRESH_S = 3600.0


class TopicPersister(StateWatchMixin, BasePersister):
    """State in a compacted topic, written by per-partition transactional producers.

    ``bootstrap_servers``: the backend. ``client_options``: extra keyword arguments for every
    aiokafka client (``security_protocol``, ``ssl_context``, ``sasl_mechanism``, ...).
    ``topic_configs``: overrides of :data:`DEFAULT_TOPIC_CONFIGS` used when creating the topic
    (a value of ``None`` drops a default, for backends that reject a setting).
    ``partitions`` only applies when creating the topic; an existing topic's count is used.
    """

    name = "topic"

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        *,
        topic: str = DEFAULT_TOPIC,
        partitions: int = 4,
        replication_factor: int = -1,
        topic_configs: Mapping[str, str | None] | None = None,
        create_topic: bool = True,
        transactional_id_prefix: str = "kshare-state",
        linger_ms: float = 5.0,
        max_batch: int = 10_000,
        client_options: Mapping[str, Any] | None = None,
        request_timeout_ms: int = 30_000,
        transaction_timeout_ms: int = 60_000,
        commit_timeout_s: float = 30.0,
        recovery_timeout_s: float = 300.0,
        write_mode: str = "fenced",
        writer_refresh_s: float = WRITER_REFRESH_S,
        placement: str | None = None,
    ):
        self._options = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        super().__init__(partitions=partitions, linger_ms=linger_ms, max_batch=max_batch)
        # "topic-partition" (every sidecar); "key" emulates an older build's single sidecar, for
        # the tests of persist/layout.py only (KSHARE_TEST_STATE_PLACEMENT reaches a sidecar process)
        self.placement = placement or os.environ.get("KSHARE_TEST_STATE_PLACEMENT") or "topic-partition"
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if write_mode not in WRITE_MODES:
            raise ValueError(f"write_mode must be one of {', '.join(WRITE_MODES)}, got {write_mode!r}")
        self.write_mode = write_mode
        # fenced: the leader refuses a zombie's batches once the owner record is written at the new
        # epoch; the owner rule of replay stays behind it (an expired producer state, see above).
        self.replay_rule = "key" if write_mode == "transactional" else "owner"
        self.backend_fences_writers = write_mode != "idempotent"
        self.writer_refresh_s = writer_refresh_s
        self._client: AIOKafkaClient | None = None  # fenced mode: the writers' client
        self._refresher: asyncio.Task | None = None
        self._replayed_to: dict[int, int] = {}  # partition -> offset the last full replay reached
        self._watcher = None  # idempotent mode: the state-topic watch (persist/watch.py)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.replication_factor = replication_factor
        configs: dict[str, str] = dict(DEFAULT_TOPIC_CONFIGS)
        for k, v in (topic_configs or {}).items():
            if v is None:
                configs.pop(k, None)
            else:
                configs[k] = str(v)
        if configs.get("cleanup.policy") != "compact":
            raise ValueError("the state topic must be created with cleanup.policy=compact")
        self.topic_configs = configs
        self.create_topic = create_topic
        self.transactional_id_prefix = transactional_id_prefix
        self.client_options = dict(client_options or {})
        self.request_timeout_ms = request_timeout_ms
        self.transaction_timeout_ms = transaction_timeout_ms
        self.commit_timeout_s = commit_timeout_s
        self.recovery_timeout_s = recovery_timeout_s
        self.takeover_grace_s = 2.0
        self._producers: dict[int, Any] = {}  # AIOKafkaProducer, or EpochWriter in fenced mode
        self._admin: AIOKafkaAdminClient | None = None

    async def layout_report(self) -> RecoveryStats:
        """Without starting (nothing is taken over or written): the existing state topic's partition
        count is adopted and every partition read for its layout and misplaced records (`kshare
        state migrate`'s dry run; persist/layout.py)."""
        await self.adopt_topic()
        return await self.scan_layout()

    async def adopt_topic(self) -> None:
        """Take the existing state topic's partition count without creating anything (a tool
        reading the topic: `kshare state migrate`, `migrate-to-native`)."""
        self.create_topic = False
        await self._ensure_topic()

    def _single_twin(self) -> TopicPersister:
        """Same backend, topic and writers, owning every partition when started (persist/layout.py)."""
        return TopicPersister(**{**self._options, "partitions": self.partitions, "create_topic": False})

    def transactional_id(self, partition: int) -> str:
        return f"{self.transactional_id_prefix}-{self.topic}-{partition}"

    # ------------------------------------------------------------------------------- open
    async def _open(self) -> None:
        await self._ensure_topic()
        if self.write_mode == "fenced" and self._client is None:
            self._client = AIOKafkaClient(bootstrap_servers=self.bootstrap_servers,
                                          request_timeout_ms=self.request_timeout_ms,
                                          client_id="kshare-state-writer", **self.client_options)
            await self._client.bootstrap()
            self._client.add_topic(self.topic)
            await self._client.force_metadata_update()
            if self.writer_refresh_s > 0:  # 0: the backend expires no producer state (state.write.refresh.ms)
                self._refresher = asyncio.get_running_loop().create_task(self._refresh_writers(),
                                                                         name="kshare-state-writer-refresh")
        if self.cluster:  # writers are opened per state partition when the group assigns it
            return
        # Producers first: init_transactions fences older writers and resolves their open
        # transactions, so the replay that follows sees a stable end.
        producers = {p: self._new_producer(p) for p in range(self.partitions)}
        results = await asyncio.gather(*(pr.start() for pr in producers.values()), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(pr.stop() for pr in producers.values()), return_exceptions=True)
            raise BackendWriteError(f"cannot start transactional producers for state topic "
                                    f"{self.topic!r}: {errors[0]!r}")
        self._producers = producers

    def _new_producer(self, partition: int) -> Any:
        if self.write_mode == "fenced":
            assert self._client is not None
            return EpochWriter(self._client, self.topic, partition, self.transactional_id(partition),
                               transaction_timeout_ms=self.transaction_timeout_ms,
                               request_timeout_ms=self.request_timeout_ms)
        if self.write_mode == "idempotent":
            return AIOKafkaProducer(
                bootstrap_servers=self.bootstrap_servers, enable_idempotence=True, acks="all", linger_ms=0,
                retry_backoff_ms=20, max_batch_size=1024 * 1024, request_timeout_ms=self.request_timeout_ms,
                client_id=f"kshare-state-writer-{partition}", **self.client_options)
        fast_concurrent_txn_retry()
        return AIOKafkaProducer(
            bootstrap_servers=self.bootstrap_servers,
            transactional_id=self.transactional_id(partition),
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            # Other retriable errors (coordinator moves, NOT_ENOUGH_REPLICAS) wait 20 ms, as Java's
            # producer waits for CONCURRENT_TRANSACTIONS; that case itself: txnclient.CONCURRENT_TXN_RETRY_S.
            retry_backoff_ms=20,
            max_batch_size=1024 * 1024,
            request_timeout_ms=self.request_timeout_ms,
            transaction_timeout_ms=self.transaction_timeout_ms,
            client_id=f"kshare-state-writer-{partition}",
            **self.client_options,
        )

    async def _ensure_topic(self) -> None:
        """Create the state topic when missing (persist/topicsetup.py); adopt an existing topic's
        partition count; refuse a topic that is not compacted."""
        admin = self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers,
                                                  request_timeout_ms=self.request_timeout_ms, **self.client_options)
        await admin.start()
        try:
            await topicsetup.check_write_mode(admin, self.write_mode)  # before anything is created
            timeout_s = self.request_timeout_ms / 1000
            count = await topicsetup.create_or_describe(
                admin, self.topic, partitions=self.partitions, replication_factor=self.replication_factor,
                configs=self.topic_configs, create=self.create_topic, timeout_s=timeout_s)
            if count != self.partitions:
                if self.create_topic:  # a tool adopting the topic (adopt_topic) configured no count
                    log.warning("state topic %r has %d partitions (configured %d): using %d; the partition count "
                                "of an existing state topic must never change", self.topic, count, self.partitions, count)
                self.partitions = count
            await topicsetup.check_compacted(admin, self.topic, timeout_s)
        finally:
            await admin.close()
            self._admin = None

    # ----------------------------------------------------------------------------- replay
    def _replay_positions(self) -> dict[int, int]:
        return dict(self._replayed_to)

    async def _replay(self, sink: ReplaySink, partitions=None, *, start=None) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=16 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
            request_timeout_ms=self.request_timeout_ms,
            client_id="kshare-state-recovery",
            **self.client_options,
        )
        try:
            await consumer.start()  # inside: a replay cancelled while starting still stops its consumer
            tps = [TopicPartition(self.topic, p)
                   for p in (range(self.partitions) if partitions is None else partitions)]
            consumer.assign(tps)
            if start is None:
                await consumer.seek_to_beginning(*tps)
            else:  # going on from an earlier replay (BasePersister.recover(resume=True))
                for tp in tps:
                    consumer.seek(tp, start.get(tp.partition, 0))
            ends = await consumer.end_offsets(tps)  # last stable offsets under read_committed
            for tp in tps:
                self._replayed_to[tp.partition] = ends[tp]
            pending = set()
            for tp in tps:
                if await consumer.position(tp) < ends[tp]:
                    pending.add(tp)
            deadline = time.monotonic() + self.recovery_timeout_s
            while pending:
                if time.monotonic() > deadline:
                    raise NotReadyError(f"state topic {self.topic!r}: replay did not reach the end within "
                                        f"{self.recovery_timeout_s}s")
                batches = await consumer.getmany(*pending, timeout_ms=200, max_records=100_000)
                for tp, messages in batches.items():
                    for m in messages:
                        sink(tp.partition, m.offset, m.key, m.value)
                for tp in list(pending):
                    if await consumer.position(tp) >= ends[tp]:
                        pending.discard(tp)
        finally:
            await consumer.stop()

    # ----------------------------------------------------------------------------- commit
    async def _commit(self, partition: int, records: list[Record]) -> None:
        producer = self._producers.get(partition)
        if producer is None:
            raise WriterFencedError(f"state partition {partition} of {self.topic!r} has no usable writer")
        write = {"transactional": self._transaction, "fenced": self._send_fenced}.get(self.write_mode, self._send_all)
        try:
            await asyncio.wait_for(write(producer, partition, records), self.commit_timeout_s)
        except PersistError:
            raise
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            if is_fenced(exc) or (isinstance(producer, AIOKafkaProducer) and producer._txn_manager.is_fatal_error()):
                raise WriterFencedError(
                    f"state partition {partition} of {self.topic!r}: transactional.id "
                    f"{self.transactional_id(partition)!r} was fenced ({type(exc).__name__}); re-reading ownership"
                ) from exc
            raise CommitOutcomeUnknownError(f"state write to {self.topic!r} partition {partition} not confirmed: "
                                            f"{exc!r}") from exc

    async def _transaction(self, producer: AIOKafkaProducer, partition: int, records: list[Record]) -> None:
        futures: list[asyncio.Future] = []
        try:
            await producer.begin_transaction()
            for key, value in records:
                futures.append(await producer.send(self.topic, value=value, key=key, partition=partition))
            if _TEST_COMMIT_HOLD_S:
                await producer.flush()
                await asyncio.sleep(_TEST_COMMIT_HOLD_S)
            await producer.commit_transaction()
            for f in futures:
                f.result()  # surface a failed batch even if the commit call returned
        finally:
            for f in futures:  # the commit error is what we report; consume the batch errors
                if f.done():
                    if not f.cancelled():
                        f.exception()
                else:
                    f.add_done_callback(lambda fut: fut.cancelled() or fut.exception())

    async def _send_fenced(self, writer: EpochWriter, partition: int, records: list[Record]) -> None:
        """Fenced mode: one idempotent batch at the writer's epoch; done when the leader has it."""
        if _TEST_COMMIT_HOLD_S:
            await asyncio.sleep(_TEST_COMMIT_HOLD_S)
        await writer.send(records)

    async def _refresh_writers(self) -> None:
        """Fenced mode, every ``writer_refresh_s``: each owned, serving state partition gets a new
        producer epoch and its owner record written at it (see :data:`WRITER_REFRESH_S`)."""
        while not self._closed:
            await asyncio.sleep(self.writer_refresh_s)
            for p, writer in list(self._producers.items()):
                if self._closed or p in self.blocked or not isinstance(writer, EpochWriter):
                    continue
                try:
                    await asyncio.wait_for(writer.refresh(), self.commit_timeout_s)
                    await asyncio.wait_for(writer.send([codec.encode(KIND_OWNER, p, self._own_epoch(p))]),
                                           self.commit_timeout_s)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the next state write meets the same fault
                    log.warning("state partition %d: refreshing the writer's producer epoch failed: %r", p, exc)

    async def _send_all(self, producer: AIOKafkaProducer, partition: int, records: list[Record]) -> None:
        """Idempotent mode: the records in one produce batch (acks=all); done when acknowledged and
        the state-topic watch has confirmed no newer owner precedes them (persist/watch.py)."""
        futures = [await producer.send(self.topic, value=value, key=key, partition=partition) for key, value in records]
        try:
            last = -1
            for f in futures:
                last = max(last, (await f).offset)
            await self._confirm_by_watch(partition, last)
        finally:
            for f in futures:
                if not f.done():
                    f.add_done_callback(lambda fut: fut.cancelled() or fut.exception())

    async def _settle(self, partition: int) -> bool:
        """Let the producer finish the transaction whose commit was not confirmed: wait for its
        EndTxn to be answered, or abort a transaction that never reached commit. The producer is
        kept (re-initialising it would fence whoever owns the partition now). False when it is
        unusable (fenced or fatal): then ownership must be re-read."""
        producer = self._producers.get(partition)
        if producer is None:
            return False
        if isinstance(producer, EpochWriter):  # the lost batch sent again at its sequence
            try:
                return await asyncio.wait_for(producer.settle(), self.commit_timeout_s)
            except asyncio.TimeoutError:  # still unanswered: a new epoch (after the owner check) decides
                return False
        if self.write_mode == "idempotent":  # delivered or failed once the producer has drained
            try:
                await asyncio.wait_for(producer.flush(), self.commit_timeout_s)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - a broken producer is replaced
                log.debug("state partition %d: flushing: %r", partition, exc)
                return False
            return True
        tm = producer._txn_manager
        deadline = time.monotonic() + max(self.transaction_timeout_ms / 1000 * 2, self.commit_timeout_s)
        while time.monotonic() < deadline:
            state = tm.state
            if state == TransactionState.READY:
                return True
            if state in (TransactionState.FATAL_ERROR, TransactionState.UNINITIALIZED):
                return False
            try:
                if state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
                    await asyncio.wait_for(producer.abort_transaction(), self.commit_timeout_s)
                else:  # committing or aborting: the sender is still working on EndTxn
                    waiter = tm.wait_for_transaction_end()
                    await asyncio.wait({waiter}, timeout=self.commit_timeout_s)
                    if waiter.done() and not waiter.cancelled():
                        waiter.exception()  # consumed; the state tells the outcome
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - the transaction state decides
                if is_fenced(exc):
                    return False
                log.debug("state partition %d: settling: %r", partition, exc)
                await asyncio.sleep(0.1)
        raise CommitOutcomeUnknownError(f"state partition {partition}: transaction did not end")

    async def _await_stable(self, partition: int) -> None:
        """Wait until the last stable offset reaches the high watermark seen now. EndTxn is answered
        once the commit is decided, *before* its markers are written: a read right after a settled
        commit could miss it and adopt the older state (seen in tests/e2e/test_fencing_faults.py)."""
        tp = TopicPartition(self.topic, partition)
        consumers = {iso: AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, group_id=None,
                                           isolation_level=iso, request_timeout_ms=self.request_timeout_ms,
                                           client_id="kshare-state-stable", **self.client_options)
                     for iso in ("read_uncommitted", "read_committed")}
        try:
            await asyncio.gather(*(c.start() for c in consumers.values()))
            target = (await consumers["read_uncommitted"].end_offsets([tp]))[tp]
            deadline = time.monotonic() + 2 * self.transaction_timeout_ms / 1000 + 10
            while (await consumers["read_committed"].end_offsets([tp]))[tp] < target:
                if time.monotonic() > deadline:
                    raise CommitOutcomeUnknownError(f"state partition {partition}: last stable offset stays below "
                                                    f"{target}")
                await asyncio.sleep(0.05)
        finally:
            await asyncio.gather(*(c.stop() for c in consumers.values()), return_exceptions=True)

    async def _reopen(self, partition: int) -> None:
        """Takeover of one partition: a fresh producer whose init fences every other writer of
        this transactional.id and aborts its open transaction."""
        await self._drop_producer(partition)
        producer = self._new_producer(partition)
        try:
            await producer.start()
        except BaseException:
            await asyncio.gather(producer.stop(), return_exceptions=True)
            raise
        self._producers[partition] = producer

    def drop_connections(self) -> int:
        """Close the state writers' backend connections (backend/health.py): a lapsed cluster member's
        writes in flight fail now, and its next takeover connects afresh."""
        closed = drop_connections(self._client)
        for producer in self._producers.values():
            closed += drop_connections(getattr(producer, "client", None))
        return closed

    async def _drop_producer(self, partition: int) -> None:
        producer = self._producers.pop(partition, None)
        if isinstance(producer, EpochWriter):  # nothing to stop: its client is the persister's
            return
        if producer is not None:
            try:
                await asyncio.wait_for(producer.stop(), 10)
            except BaseException as exc:  # noqa: BLE001 - fenced or broken; just release it
                if isinstance(exc, asyncio.CancelledError):
                    raise
                log.debug("stopping producer %d: %r", partition, exc)

    async def _close(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        refresher, self._refresher = self._refresher, None
        if refresher is not None:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
        producers, self._producers = self._producers, {}
        await asyncio.gather(*(p.stop() for p in producers.values() if isinstance(p, AIOKafkaProducer)),
                             return_exceptions=True)
        client, self._client = self._client, None
        if client is not None:
            await client.close()

