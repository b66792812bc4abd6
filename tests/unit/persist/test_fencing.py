"""Fencing: owner epochs from the backend, the stale-record rule at write and at replay, and
commits whose outcome is unknown (landed or aborted) or that were fenced. Memory persister: the
topic persister runs the same engine; tests/e2e/test_fencing_faults.py covers real Kafka."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.persist import (
    FencedLeaderEpochError,
    MemoryLog,
    MemoryPersister,
    NotReadyError,
    PartitionState,
    SharePartitionKey,
    StoredPartition,
    WriterFencedError,
    codec,
)
from kshare_sidecar.persist.errors import CommitOutcomeUnknownError
from kshare_sidecar.persist.replay import is_older
from kshare_sidecar.share.state_writes import _ack_error

TID = "0b7ad3b2-2d3b-4f5c-9a3c-1f1e2d3c4b5a"
K = SharePartitionKey("g1", TID, 0)


def st(start: int, state_epoch: int = 1) -> PartitionState:
    return PartitionState(state_epoch=state_epoch, leader_epoch=0, start_offset=start)


async def started(log: MemoryLog) -> MemoryPersister:
    p = MemoryPersister(log=log)
    await p.start()
    return p


async def until(predicate, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def committed_spsos(log: MemoryLog, key: SharePartitionKey) -> list[tuple[int, int, int]]:
    """(state epoch, owner epoch, SPSO) of every snapshot of ``key`` in log order."""
    out = []
    for raw_key, raw_value in log.partitions[0]:
        if raw_value is not None and raw_key == codec.partition_key(key):
            s = codec.decode_partition(raw_value).state
            out.append((s.state_epoch, s.leader_epoch, s.start_offset))
    return out


# ------------------------------------------------------------------------------ owner epochs
async def test_owner_epochs_come_from_the_log_and_grow_with_every_takeover():
    log = MemoryLog(1)
    a = await started(log)
    b = await started(log)
    c = await started(log)
    assert (a.owner_epoch, b.owner_epoch, c.owner_epoch) == (0, 1, 2)
    owners = [orjson.loads(v)["e"] for k, v in log.partitions[0] if orjson.loads(k)[0] == "o"]
    assert owners == [0, 1, 2]
    for p in (a, b, c):
        await p.close()


async def test_owner_epoch_is_above_every_legacy_clock_epoch_in_the_log():
    """State written by a build with clock-derived epochs: the new epoch is still larger."""
    log = MemoryLog(1)
    legacy = StoredPartition(PartitionState(1, 217_000_000, 5), 217_000_000)
    log.produce_raw(0, codec.partition_key(K), codec.encode_partition(legacy))
    p = await started(log)
    assert p.owner_epoch == 217_000_001
    await p.close()


# ------------------------------------------------------------------------------- replay rule
def test_is_older_orders_by_state_epoch_then_owner_epoch():
    def sp(se, le):
        return StoredPartition(PartitionState(se, le, 0), le)
    assert is_older(sp(1, 4), sp(1, 5))
    assert not is_older(sp(1, 5), sp(1, 5))
    assert not is_older(sp(2, -1), sp(1, 9))  # an admin reset (higher state epoch) always wins
    assert is_older(sp(1, 9), sp(2, -1))  # a zombie's snapshot of the old state epoch


async def test_replay_ignores_a_zombie_record_committed_after_the_new_owner():
    log = MemoryLog(1)
    a = await started(log)
    await a.initialize(K, 1, 0)
    await a.read_one(K, leader_epoch=a.owner_epoch)
    await a.write(K, st(4_145), a.owner_epoch)
    b = await started(log)
    await b.read_one(K, leader_epoch=b.owner_epoch)
    await b.write(K, st(14_561), b.owner_epoch)
    # the zombie's record lands after B's (what a late commit of a frozen sidecar would do)
    zombie = StoredPartition(PartitionState(1, a.owner_epoch, 4_200), a.owner_epoch)
    log.produce_raw(0, codec.partition_key(K), codec.encode_partition(zombie))
    c = await started(log)
    assert c.recovery_stats.stale_ignored == 1
    assert (await c.read_one(K)).start_offset == 14_561
    assert c.owner_epoch == b.owner_epoch + 1
    for p in (a, b, c):
        await p.close()


async def test_write_rule_refuses_the_previous_owner_once_its_view_is_current():
    log = MemoryLog(1)
    a = await started(log)
    await a.initialize(K, 1, 0)
    await a.read_one(K, leader_epoch=a.owner_epoch)
    b = await started(log)
    await b.read_one(K, leader_epoch=b.owner_epoch)
    with pytest.raises(FencedLeaderEpochError):  # assignment epoch (B's) > A's epoch
        await b.write(K, st(10), a.owner_epoch)
    await b.write(K, st(10), b.owner_epoch)
    await a.close()
    await b.close()


# ------------------------------------------------------------------------- unknown outcomes
async def test_unknown_outcome_that_landed_blocks_then_adopts_the_durable_state():
    log = MemoryLog(1)
    p = await started(log)
    await p.initialize(K, 1, 0)
    await p.write(K, st(100), 0)
    changed: list[set] = []
    p.reload_listeners.append(changed.append)
    p.settle_gate = asyncio.Event()
    log.fail_next_commit(0, landed=True)
    with pytest.raises(CommitOutcomeUnknownError) as exc:
        await p.write(K, st(200), 0)
    assert exc.value.retriable and exc.value.error_code != ErrorCode.unknown_server_error
    # until the truth is read back the partition takes no writes (retriable, load in progress)
    assert p.blocked == {0: "unknown"}
    with pytest.raises(NotReadyError):
        await p.write(K, st(150), 0)
    p.settle_gate.set()
    await until(lambda: not p.blocked)
    assert changed == [{K}]  # the service layer learns which share-partitions to reload
    assert (await p.read_one(K)).start_offset == 200  # memory == durable
    assert p.reloads == 1 and p.takeovers == 0
    await p.write(K, st(250), 0)
    assert [so for _, _, so in committed_spsos(log, K)] == [0, 100, 200, 250]
    await p.close()


async def test_unknown_outcome_that_was_aborted_keeps_memory_equal_to_durable():
    log = MemoryLog(1)
    p = await started(log)
    await p.initialize(K, 1, 0)
    await p.write(K, st(100), 0)
    changed: list[set] = []
    p.reload_listeners.append(changed.append)
    log.fail_next_commit(0, landed=False)
    with pytest.raises(CommitOutcomeUnknownError):
        await p.write(K, st(200), 0)
    await until(lambda: not p.blocked)
    assert changed == [set()]  # nothing differs: the caller's exact rollback is right
    assert (await p.read_one(K)).start_offset == 100
    await p.close()


# ----------------------------------------------------------------------------------- fencing
async def test_writer_fenced_by_a_newer_owner_is_superseded_and_stops():
    log = MemoryLog(1)
    a = await started(log)
    await a.initialize(K, 1, 0)
    reasons: list[str] = []
    a.superseded_listeners.append(reasons.append)
    b = await started(log)
    with pytest.raises(WriterFencedError) as exc:
        await a.write(K, st(5), 0)
    assert exc.value.error_code == ErrorCode.not_coordinator and exc.value.retriable
    assert _ack_error(exc.value) == ErrorCode.not_leader_or_follower  # never UNKNOWN_SERVER_ERROR
    await until(lambda: a.superseded)
    assert len(reasons) == 1 and "newer sidecar" in reasons[0]
    with pytest.raises(WriterFencedError):
        await a.write(K, st(6), 0)
    assert a.takeovers == 0  # it never re-initialised its writer: B stays the writer
    await b.write(K, st(7), 0)
    assert [so for _, _, so in committed_spsos(log, K)] == [0, 7]
    await a.close()
    await b.close()


async def test_writer_fenced_by_a_non_owner_takes_its_partition_over_again():
    """Something fenced the writer without recording a newer owner (a sidecar that died during
    start-up): the rightful owner re-reads ownership and recovers instead of failing forever."""
    log = MemoryLog(1)
    a = await started(log)
    await a.initialize(K, 1, 0)
    log.open_writer(0)  # fences A; no owner record follows
    with pytest.raises(WriterFencedError):
        await a.write(K, st(5), 0)
    await until(lambda: not a.blocked)
    assert not a.superseded and a.takeovers == 1
    await a.write(K, st(6), 0)
    assert (await a.read_one(K)).start_offset == 6
    await a.close()


async def test_zombie_write_after_the_newer_owners_never_reaches_the_log():
    """A, fenced by B, tries again: nothing of A's lands after B's owner record."""
    log = MemoryLog(1)
    a = await started(log)
    await a.initialize(K, 1, 0)
    await a.read_one(K, leader_epoch=a.owner_epoch)
    await a.write(K, st(4_000), a.owner_epoch)
    b = await started(log)
    await b.read_one(K, leader_epoch=b.owner_epoch)
    await b.write(K, st(14_000), b.owner_epoch)
    for attempt in range(3):
        with pytest.raises(WriterFencedError):
            await a.write(K, st(4_100 + attempt), a.owner_epoch)
    await until(lambda: a.superseded)
    spsos = committed_spsos(log, K)
    assert [so for _, _, so in spsos] == [0, 0, 4_000, 4_000, 14_000]  # init, claim, A, B claims, B
    assert all(x[1] <= y[1] for x, y in zip(spsos, spsos[1:], strict=False))  # owner epochs never go back
    await a.close()
    await b.close()


async def test_start_up_race_with_an_owner_re_asserting_itself_ends_with_the_newer_owner():
    """B fences A, but A (still the newest recorded owner) takes its partition back before B has
    recorded its epoch: B takes it again at start-up and A ends superseded. No ping-pong."""
    log = MemoryLog(1)
    a = await started(log)
    await a.initialize(K, 1, 0)
    b = MemoryPersister(log=log)
    b._started = True
    await b.store.open(cluster=False)  # B's init fences A ...
    await b.recover()
    with pytest.raises(WriterFencedError):
        await a.write(K, st(5), 0)
    await until(lambda: not a.blocked)  # ... A finds no newer owner record and takes p0 back
    assert a.takeovers == 1
    await b.ownership.take_ownership()  # fenced by A's re-takeover, B takes p0 again and records its epoch
    assert b.owner_epoch == a.owner_epoch + 1
    with pytest.raises(WriterFencedError):
        await a.write(K, st(6), 0)
    await until(lambda: a.superseded)
    await a.close()
    await b.close()
