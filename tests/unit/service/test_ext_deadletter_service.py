"""The dead-letter drain over the real engine and memory persister, with a writer that fails:
rejected records stay held (not archived, not delivered, the durable state says so) until a
write succeeds, then they are archived — the write always before the archiving state write."""

from __future__ import annotations

import asyncio
import time

from kio.schema.errors import ErrorCode

from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.persist.model import DeliveryState
from kshare_sidecar.service.deadletter import DeadLetterError, DeadLetterService, dlq_headers
from kshare_sidecar.service.partitions import SharePartitionManager
from kshare_sidecar.service.shares import ShareService
from kshare_sidecar.share.sessions import ShareSessionCache
from kshare_sidecar.share.types import AckBatch
from tests.unit.service.test_share_service import CONFIG, MemoryLog, fetch

DLQ_CONFIG = {**CONFIG, "errors.deadletterqueue.topic.name": "dlq.t",
              "errors.deadletterqueue.copy.record.enable": True}


class FlakyWriter:
    def __init__(self, persister, failures: int) -> None:
        self.persister, self.failures, self.calls, self.written = persister, failures, 0, []

    async def write(self, *, group, topic, partition, pending, dlq_topic, copy_record):
        self.calls += 1
        if self.calls <= self.failures:
            raise DeadLetterError("dead-letter topic 'dlq.t' does not exist")
        self.written.append([(f, last, c, cause) for f, last, c, cause in pending])
        return sum(last - f + 1 for f, last, _c, _cause in pending)

    async def close(self):
        pass


def clock() -> int:
    return int(time.monotonic() * 1000)


async def test_failed_writes_keep_records_held_then_archive_after_the_write():
    persister = MemoryPersister()
    await persister.start()
    backend = MemoryLog(batches=1)
    parts = SharePartitionManager(persister=persister, backend=backend, clock=clock,
                                  group_config=lambda g: DLQ_CONFIG, epoch=5)
    parts.start()
    writer = FlakyWriter(persister, failures=2)
    dlq = DeadLetterService(partitions=parts, writer=writer, group_config=lambda g: DLQ_CONFIG)
    parts.on_change = dlq.kick
    svc = ShareService(sessions=ShareSessionCache(10), partitions=parts, backend=backend,
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
        for _ in range(40):  # retries: 0.5 s, then 1 s
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
