"""The state writer of ``state.write.mode=fenced``: idempotent batches fenced by the backend
through a transactional id's producer epoch, without a transaction per write.

Why: a Kafka transaction per state write (AddPartitionsToTxn + Produce + EndTxn, then the
markers) costs ~8-25 ms, and every ShareFetch carrying acknowledgements waits for one. What the
transaction buys is *fencing*: a paused old sidecar that wakes up must not append state after
its successor took over. The partition leader enforces that without transactions: a producer id
obtained by ``InitProducerId(transactional.id)`` gets a higher epoch at every init, and once a
batch at the new epoch is on a partition, the leader refuses every later batch of the same
producer id at an older epoch (INVALID_PRODUCER_EPOCH). So the takeover pays one InitProducerId
(which also aborts a transaction the old owner left open) and the owner record written at the
new epoch; every state write after that is one idempotent produce round trip (acks=all), and a
zombie's late write fails on the broker instead of landing. Checked against Kafka 3.9 in
``tests/integration/test_epoch_writer.py``.

Sequence numbers are this writer's (one in-flight batch per state partition: the persister's
writer task is serial, and :meth:`send` holds a lock): a batch whose answer was lost is sent
again with the same base sequence until it is answered, and the leader's duplicate detection
makes "sent twice" land once — that is :meth:`settle`, the unknown-outcome path of
:class:`~kshare_sidecar.persist.base.BasePersister`.

The broker keeps a producer id's state per partition only while it writes
(``producer.id.expiration.ms``, default 1 day) and a transactional id only while it is used
(``transactional.id.expiration.ms``, default 7 days). :meth:`refresh` — called by the persister
every ``writer_refresh_s`` — re-initialises the producer id (a new epoch) and the persister then
writes its owner record at it, so both stay alive on every owned state partition. Replay keeps
the owner rule (docs/persistence.md) as a second line behind the broker's fence.

aiokafka's producer cannot send a non-transactional batch under a transactional id, so this
sends Produce and InitProducerId itself — kio request types over aiokafka's client (its
connections, metadata, security), aiokafka's record-batch builder for the batch; the Produce
body of the one batch is written by hand (protocol/produce.py).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import KafkaError
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from kshare_sidecar.backend.kio_bridge import KioRequest, make
from kshare_sidecar.backend.kio_bridge import send as kio_send
from kshare_sidecar.protocol.produce import FIRST_VERSION, LAST_VERSION, produce_body

log = logging.getLogger("kshare_sidecar.persist.topic")

PRODUCE_API, PRODUCE_VERSIONS = 0, range(FIRST_VERSION, LAST_VERSION + 1)  # v13 names topics by id
INIT_PRODUCER_ID_API, INIT_PRODUCER_ID_VERSIONS = 22, range(0, 6)

# Kafka error codes met on this path (names as in Kafka's Errors).
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
KAFKA_STORAGE_ERROR = 56
UNKNOWN_PRODUCER_ID = 59
PRODUCER_FENCED = 90

_RETRIABLE_PRODUCE = frozenset({UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
                                NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_STORAGE_ERROR})
_RETRIABLE_INIT = frozenset({COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
                             CONCURRENT_TRANSACTIONS, REQUEST_TIMED_OUT})
_FENCED = frozenset({INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
RETRY_BACKOFF_S = 0.02


class EpochFencedError(KafkaError):
    """The leader refused a batch at this writer's producer epoch: a newer owner has taken the
    transactional id over (the persister treats it as a fenced writer)."""


class EpochWriterError(KafkaError):
    """A definitive failure that is not fencing (sequence lost, authorization, a bad answer)."""


def _code(value: Any) -> int:
    return int(getattr(value, "value", value))


class EpochWriter:
    """The writer of one state partition (see the module docstring)."""

    def __init__(self, client: AIOKafkaClient, topic: str, partition: int, transactional_id: str, *,
                 transaction_timeout_ms: int, request_timeout_ms: int) -> None:
        self.client = client
        self.tp = TopicPartition(topic, partition)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequence = 0
        self.initialized_at = 0.0
        self.fenced = False
        self._pending: tuple[bytes, int] | None = None  # a batch whose answer is not known yet
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return (f"EpochWriter({self.tp.topic}-{self.tp.partition}, {self.transactional_id!r}, "
                f"pid {self.producer_id} epoch {self.producer_epoch} seq {self.sequence})")

    async def start(self) -> None:
        """InitProducerId for the transactional id: fences every older writer of it (and aborts a
        transaction one left open — the coordinator answers CONCURRENT_TRANSACTIONS meanwhile)."""
        async with self._lock:
            await self._init()

    async def refresh(self) -> None:
        """A new epoch for the same transactional id, so neither the id nor the producer state on
        the partition expires while this sidecar owns it; the caller then writes at it. Asked as
        KIP-360's conditional bump (this writer's producer id and epoch in the request): the
        coordinator refuses it (PRODUCER_FENCED) when a newer owner has initialized the id since,
        so a sidecar that slept through a takeover cannot fence its successor by refreshing."""
        async with self._lock:
            if self._pending is not None:
                await self._settle_locked()
            if self.fenced or self.producer_id < 0:
                raise EpochFencedError(f"{self!r} was fenced")
            try:
                await self._init(expected=(self.producer_id, self.producer_epoch))
            except EpochFencedError:
                self.fenced = True
                raise

    async def _init(self, expected: tuple[int, int] = (-1, -1)) -> None:
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        timeout = datetime.timedelta(milliseconds=self.transaction_timeout_ms)

        def build(module: Any, _version: int) -> Any:
            return make(module.InitProducerIdRequest, transactional_id=self.transactional_id,
                        transaction_timeout=timeout, producer_id=expected[0], producer_epoch=expected[1])

        versions = INIT_PRODUCER_ID_VERSIONS if expected[0] < 0 else range(3, INIT_PRODUCER_ID_VERSIONS.stop)
        while True:
            code = REQUEST_TIMED_OUT
            try:
                node = await self.client.coordinator_lookup(CoordinationType.TRANSACTION, self.transactional_id)
                response = await kio_send(self.client, node, KioRequest(INIT_PRODUCER_ID_API, versions, build))
                code = _code(response.error_code)
            except KafkaError as exc:  # coordinator moving, connection lost: retried below
                log.debug("%r: InitProducerId: %r", self, exc)
            else:
                if code == NONE:
                    self.producer_id, self.producer_epoch = int(response.producer_id), int(response.producer_epoch)
                    self.sequence = 0
                    self._pending = None
                    self.fenced = False
                    self.initialized_at = time.monotonic()
                    return
                if code in _FENCED:
                    raise EpochFencedError(f"InitProducerId for {self.transactional_id!r}: error {code}")
                if code not in _RETRIABLE_INIT:
                    raise EpochWriterError(f"InitProducerId for {self.transactional_id!r}: error {code}")
            if time.monotonic() > deadline:
                raise EpochWriterError(f"InitProducerId for {self.transactional_id!r} not answered in time "
                                       f"(last error {code})")
            await asyncio.sleep(RETRY_BACKOFF_S if code == CONCURRENT_TRANSACTIONS else 0.1)

    async def send(self, records: Sequence[tuple[bytes | None, bytes | None]]) -> int:
        """Append ``records`` as one batch at the next sequence; returns the offset of the last one
        (-1 when the leader reports the batch as a duplicate of one it already has). Raises
        :class:`EpochFencedError` when a newer epoch owns the partition."""
        async with self._lock:
            if self._pending is not None:  # the previous answer was lost: that batch first
                await self._settle_locked()
            if self.fenced:
                raise EpochFencedError(f"{self!r} was fenced")
            batch = self._build(records)
            self._pending = (batch, len(records))
            return await self._deliver(batch, len(records))

    async def settle(self) -> bool:
        """Resolve a batch whose answer was lost by sending it again with the same sequence: the
        leader appends it once. False when the writer is fenced or its sequence is lost."""
        async with self._lock:
            try:
                await self._settle_locked()
            except KafkaError as exc:
                log.debug("%r: settling: %r", self, exc)
                return False
            return not self.fenced and self.producer_id >= 0

    async def _settle_locked(self) -> None:
        if self._pending is None:
            return
        batch, count = self._pending
        await self._deliver(batch, count)

    def _build(self, records: Sequence[tuple[bytes | None, bytes | None]]) -> bytes:
        if self.producer_id < 0:
            raise EpochWriterError(f"{self!r} is not initialized")
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                            base_sequence=self.sequence, batch_size=2 ** 31 - 1)
        now = int(time.time() * 1000)
        for offset, (key, value) in enumerate(records):
            builder.append(offset, timestamp=now, key=key, value=value, headers=[])
        return bytes(builder.build())

    async def _deliver(self, batch: bytes, count: int) -> int:
        """Send until the leader answers definitively (retriable errors and lost connections are
        retried with the same bytes, so the same sequence). The caller bounds the time."""
        tp = self.tp

        def body(version: int) -> bytes:  # written by hand: no kio entities per write (protocol/produce.py)
            return produce_body(version, tp.topic, tp.partition, batch, acks=-1, timeout_ms=self.request_timeout_ms)

        backoff = RETRY_BACKOFF_S
        while True:
            node = self.client.cluster.leader_for_partition(tp)
            if node is None or node < 0:
                self.client.add_topic(tp.topic)
                await self.client.force_metadata_update()
                await asyncio.sleep(backoff)
                continue
            try:
                response = await kio_send(self.client, node, KioRequest(PRODUCE_API, PRODUCE_VERSIONS, body=body))
            except KafkaError as exc:  # connection lost or request timed out: same batch again
                log.debug("%r: produce: %r", self, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            answer = response.responses[0].partition_responses[0]
            code = _code(answer.error_code)
            if code in (NONE, DUPLICATE_SEQUENCE_NUMBER):
                self.sequence = (self.sequence + count) % (2 ** 31)
                self._pending = None
                base = int(answer.base_offset)
                return base + count - 1 if code == NONE and base >= 0 else -1
            if code in _FENCED:
                self.fenced = True
                self._pending = None
                raise EpochFencedError(f"{self!r}: the leader refused epoch {self.producer_epoch} (error {code}): "
                                       f"a newer owner initialized {self.transactional_id!r}")
            if code in _RETRIABLE_PRODUCE:
                if code in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION):
                    await self.client.force_metadata_update()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            # OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID: the leader lost this producer's
            # sequence; the batch did not land, but this writer cannot go on: re-initialise.
            self._pending = None
            self.producer_id = -1
            raise EpochWriterError(f"{self!r}: produce refused with error {code}")
