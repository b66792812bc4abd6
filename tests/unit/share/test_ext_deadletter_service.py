"""The dead-letter drain over the real engine and memory persister, with a writer that fails.

As Kafka 4.4: a topic that may not be written to (missing, no opt-in) archives the records at
once, unwritten; a failing write is retried a few times and then archived; never held for ever.
With kshare's ``deadletter.hold.until.written``: rejected records stay held (not archived, not
delivered, the durable state says so) until a write succeeds, then they are archived — the write
always before the archiving state write — except a write that can never succeed."""

from __future__ import annotations

import asyncio
import time

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.metrics import STATS
from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.persist.model import DeliveryState
from kshare_sidecar.share import dead_letter as deadletter
from kshare_sidecar.share.dead_letter import (
    INVALID,
    MAX_ATTEMPTS,
    PERMANENT,
    TRANSIENT,
    UNAVAILABLE,
    DeadLetterError,
    DeadLetterService,
    dlq_headers,
    name_problem,
)
from kshare_sidecar.share.cache import SharePartitionCache
from kshare_sidecar.share.manager import SharePartitionManager
from kshare_sidecar.share.engine.sessions import ShareSessionCache
from kshare_sidecar.share.engine.types import AckBatch
from tests.unit.share.test_share_service import CONFIG, MemoryLog, fetch

DLQ_CONFIG = {**CONFIG, "errors.deadletterqueue.topic.name": "dlq.t",
              "errors.deadletterqueue.copy.record.enable": True}


class FlakyWriter:
    def __init__(self, persister, failures: int, kind: str = UNAVAILABLE) -> None:
        self.persister, self.failures, self.calls, self.written, self.kind = persister, failures, 0, [], kind

    async def write(self, *, group, topic, partition, pending, dlq_topic, copy_record):
        self.calls += 1
        if self.calls <= self.failures:
            raise DeadLetterError("dead-letter topic 'dlq.t' does not exist", self.kind)
        self.written.append([(f, last, c, cause) for f, last, c, cause in pending])
        return sum(last - f + 1 for f, last, _c, _cause in pending)

    async def close(self):
        pass


def clock() -> int:
    return int(time.monotonic() * 1000)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(deadletter, "backoff_s", lambda attempt: 0.5 if attempt == 1 else 0.05)


async def test_hold_mode_keeps_failed_records_held_then_archives_after_the_write():
    persister = MemoryPersister()
    await persister.start()
    backend = MemoryLog(batches=1)
    parts = SharePartitionCache(persister=persister, backend=backend, clock=clock,
                                  group_config=lambda g: DLQ_CONFIG, epoch=5)
    parts.start()
    writer = FlakyWriter(persister, failures=2)
    dlq = DeadLetterService(partitions=parts, writer=writer, group_config=lambda g: DLQ_CONFIG,
                            hold_until_written=True)
    parts.on_change = dlq.kick
    svc = SharePartitionManager(sessions=ShareSessionCache(10), partitions=parts, backend=backend,
                       group_config=lambda g: DLQ_CONFIG)
    try:
        await fetch(svc, "m1", 0)
        out = await fetch(svc, "m1", 1, acks=[AckBatch(0, 2, (3,)), AckBatch(3, 9, (1,))], max_wait_ms=10)
        assert [p.ack_error for p in out.partitions] == [ErrorCode.none]
        [slot] = parts.slots.values()
        await asyncio.sleep(0.2)  # first write failed
        assert writer.calls >= 1 and not writer.written
        durable = (await persister.read([slot.key]))[slot.key]
        assert durable.start_offset == 0
        assert [(b.first_offset, b.last_offset, b.delivery_state, b.dead_letter) for b in durable.state_batches][0] \
            == (0, 2, DeliveryState.AVAILABLE, "r"), "held for the dead-letter write, durably"
        other = await fetch(svc, "m2", 0, max_wait_ms=10)
        assert all(not p.acquired for p in other.partitions), "held records are not delivered"
        for _ in range(40):  # retries: 0.5 s, then 0.05 s
            await asyncio.sleep(0.1)
            if writer.written and slot.partition.spso == 10:
                break
        assert writer.written == [[(0, 2, 1, "r")]]
        assert slot.partition.spso == 10, "archived after the write"
        durable = (await persister.read([slot.key]))[slot.key]
        assert durable.start_offset == 10
    finally:
        await dlq.close()
        await parts.close()
        await persister.close()


def test_dlq_headers_are_kafkas():
    h = dict(dlq_headers("orders", 3, 42, "g1", 5, "l"))
    assert h == {"__dlq.errors.topic": b"orders", "__dlq.errors.partition": b"3", "__dlq.errors.offset": b"42",
                 "__dlq.errors.group": b"g1", "__dlq.errors.delivery.count": b"5",
                 "__dlq.errors.message": b"Offset delivery count exceeded the threshold."}


async def _reject_three(writer, *, hold: bool = False):
    """Reject offsets 0-2, accept 3-9; -> (dead-letter service, the slot, durable state) once drained."""
    persister = MemoryPersister()
    await persister.start()
    backend = MemoryLog(batches=1)
    parts = SharePartitionCache(persister=persister, backend=backend, clock=clock,
                                  group_config=lambda g: DLQ_CONFIG, epoch=5)
    parts.start()
    dlq = DeadLetterService(partitions=parts, writer=writer, group_config=lambda g: DLQ_CONFIG,
                            hold_until_written=hold)
    parts.on_change = dlq.kick
    svc = SharePartitionManager(sessions=ShareSessionCache(10), partitions=parts, backend=backend,
                       group_config=lambda g: DLQ_CONFIG)
    try:
        await fetch(svc, "m1", 0)
        await fetch(svc, "m1", 1, acks=[AckBatch(0, 2, (3,)), AckBatch(3, 9, (1,))], max_wait_ms=10)
        [slot] = parts.slots.values()
        for _ in range(60):
            await asyncio.sleep(0.05)
            # The drain counts after its archiving state write returns, which is after the
            # share-partition moved on: wait for the drain itself, not only for the SPSO.
            if slot.partition.spso == 10 and not dlq._tasks:
                break
        durable = (await persister.read([slot.key]))[slot.key]
        return dlq, slot, durable
    finally:
        await dlq.close()
        await parts.close()
        await persister.close()


@pytest.mark.parametrize("kind", [UNAVAILABLE, INVALID])
async def test_a_topic_that_may_not_be_written_archives_at_once_unwritten(kind):
    """Kafka 4.4: a missing topic, one without the opt-in or a name outside the prefix: archived, never written."""
    writer = FlakyWriter(None, failures=10**6, kind=kind)
    before = dict(STATS.dlq["unwritten"])
    dlq, slot, durable = await _reject_three(writer)
    assert writer.calls == 1 and not writer.written
    assert slot.partition.spso == 10 and durable.start_offset == 10
    assert dlq.archived_unwritten == 3 and dlq.written == 0
    group = slot.key.group_id  # kshare_dead_letter_queue_unwritten_records_total: the operator sees it
    assert STATS.dlq["unwritten"][group] - before.get(group, 0) == 3


@pytest.mark.parametrize("hold", [False, True])
async def test_a_write_that_can_never_succeed_archives_after_the_attempts(hold):
    """The bug this guards: a write failing the same way for ever (aiokafka refusing a record)
    held every dead-lettered record for ever. Never, in either mode."""
    writer = FlakyWriter(None, failures=10**6, kind=PERMANENT)
    dlq, slot, durable = await _reject_three(writer, hold=hold)
    assert writer.calls == MAX_ATTEMPTS and not writer.written
    assert slot.partition.spso == 10 and durable.start_offset == 10 and dlq.archived_unwritten == 3


async def test_transient_failures_are_retried_then_written():
    writer = FlakyWriter(None, failures=2, kind=TRANSIENT)
    dlq, _slot, _durable = await _reject_three(writer)
    assert writer.calls == 3 and writer.written == [[(0, 2, 1, "r")]] and dlq.written == 3


def test_name_problems_are_kafkas():
    assert name_problem("g", "dlq.x", "dlq.") is None
    assert name_problem("g", "x", "") is None
    assert "cannot start with __" in name_problem("g", "__x", "")
    assert "does not comply with the DLQ topic prefix" in name_problem("g", "x", "dlq.")
    assert "is empty" in name_problem("g", "", "dlq.")
