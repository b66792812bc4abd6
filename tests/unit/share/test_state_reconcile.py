"""Fencing at the service layer: after a state write whose outcome was unknown and that landed,
the share-partition is retired and reloads from what is durable; its SPSO never goes back."""

from __future__ import annotations

import asyncio
import uuid

from kio.schema.errors import ErrorCode

from kshare_sidecar.persist import MemoryLog, MemoryPersister, SharePartitionKey
from kshare_sidecar.persist import codec
from kshare_sidecar.share.cache import SharePartitionCache
from kshare_sidecar.share.state_writes import PendingAcks

TOPIC_ID = uuid.UUID(int=7)
KEY = SharePartitionKey("g", str(TOPIC_ID), 0)
CONFIG = {"share.record.lock.duration.ms": 30_000, "share.delivery.count.limit": 5,
          "share.partition.max.record.locks": 2000}
ACCEPT = 1


def spsos(log: MemoryLog) -> list[int]:
    return [codec.decode_partition(v).state.start_offset for k, v in log.partitions[0]
            if v is not None and k == codec.partition_key(KEY)]


async def test_unknown_outcome_that_landed_retires_the_slot_and_reloads_durable_state():
    log = MemoryLog(1)
    persister = MemoryPersister(log=log)
    await persister.start()
    await persister.initialize(KEY, 0, 0)
    mgr = SharePartitionCache(persister=persister, backend=None, clock=lambda: 0,
                                group_config=lambda g: CONFIG)
    assert mgr.epoch == persister.owner_epoch  # the owner epoch comes from the backend
    slot = await mgr.get("g", TOPIC_ID, 0, "t")
    assert slot.partition.acquire("m", [(0, 19, -1, False, False)], 20)
    codes = await mgr.persist_plans([(slot, PendingAcks("m", [(0, 9, [ACCEPT])]))])
    assert codes == {KEY: ErrorCode.none} and slot.partition.spso == 10

    persister.settle_gate = asyncio.Event()
    log.fail_next_commit(0, landed=True)  # the commit lands, its confirmation is lost
    codes = await mgr.persist_plans([(slot, PendingAcks("m", [(10, 19, [ACCEPT])]))])
    assert codes[KEY] not in (ErrorCode.none, ErrorCode.unknown_server_error)
    assert slot.partition.spso == 10  # memory rolled back ...
    persister.settle_gate.set()
    for _ in range(100):
        if not persister.blocked:
            break
        await asyncio.sleep(0.01)
    assert slot.dead and KEY not in mgr.slots  # ... and retired, since durable state differs
    await mgr._write_current(slot)  # a late writer of the retired slot writes nothing
    fresh = await mgr.get("g", TOPIC_ID, 0, "t")
    assert fresh.partition.spso == 20  # reloaded from what is durable
    assert spsos(log) == sorted(spsos(log)) and spsos(log)[-1] == 20
    await mgr.close()
    await persister.close()


async def test_locks_expiring_during_an_ack_write_never_roll_the_spso_back():
    """The regression tests/e2e/test_fencing_faults.py caught: a frozen sidecar wakes up, the records'
    locks expire while their acknowledgement is being written; the write is durable, so memory
    must follow it (before: memory was written again, SPSO 2000 -> 0)."""
    log = MemoryLog(1)
    persister = MemoryPersister(log=log)
    await persister.start()
    await persister.initialize(KEY, 0, 0)
    now = [0]
    mgr = SharePartitionCache(persister=persister, backend=None, clock=lambda: now[0],
                                group_config=lambda g: CONFIG)
    slot = await mgr.get("g", TOPIC_ID, 0, "t")
    assert slot.partition.acquire("m", [(0, 19, -1, False, False)], 20)
    real_write = persister.write

    async def write_while_locks_expire(key, state, epoch):
        now[0] = 60_000  # past every lock deadline
        assert slot.partition.expire(now[0])
        await real_write(key, state, epoch)
    persister.write = write_while_locks_expire
    codes = await mgr.persist_plans([(slot, PendingAcks("m", [(0, 19, [ACCEPT])]))])
    persister.write = real_write
    assert codes == {KEY: ErrorCode.none}  # the acknowledgement is durable
    assert slot.dead
    await mgr._write_current(slot)  # the expiry's pending write of the old memory: nothing
    fresh = await mgr.get("g", TOPIC_ID, 0, "t")
    assert fresh.partition.spso == 20
    assert spsos(log) == sorted(spsos(log)) and spsos(log)[-1] == 20
    await mgr.close()
    await persister.close()
