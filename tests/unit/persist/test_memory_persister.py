"""Persister semantics, exercised on the memory persister (the topic persister shares the engine)."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.persist import (
    DeliveryState,
    FencedLeaderEpochError,
    FencedStateEpochError,
    GroupRecord,
    InitializeItem,
    InvalidStateError,
    MemoryLog,
    MemoryPersister,
    NotReadyError,
    PartitionState,
    Persister,
    PersisterClosedError,
    SharePartitionKey,
    StateBatch,
    UnknownSharePartitionError,
    WriteItem,
    WriterFencedError,
)

TID = "0b7ad3b2-2d3b-4f5c-9a3c-1f1e2d3c4b5a"
K = SharePartitionKey("g1", TID, 0)


def st(state_epoch=1, start=10, batches=(), leader=0):
    return PartitionState(state_epoch=state_epoch, leader_epoch=leader, start_offset=start,
                          state_batches=tuple(StateBatch(*b) for b in batches))


@pytest.fixture
async def persister():
    p = MemoryPersister(partitions=3)
    await p.start()
    yield p
    await p.close()


async def test_is_a_persister(persister):
    assert isinstance(persister, Persister)
    assert persister.ready


async def test_not_ready_before_start_and_closed_after():
    p = MemoryPersister()
    assert not p.ready
    with pytest.raises(NotReadyError) as exc:
        await p.initialize(K, 1)
    assert exc.value.error_code == ErrorCode.coordinator_load_in_progress
    await p.start()
    await p.close()
    with pytest.raises(PersisterClosedError):
        await p.read_one(K)


async def test_initialize_read_write_roundtrip(persister):
    state = await persister.initialize(K, state_epoch=3)
    assert (state.state_epoch, state.start_offset, state.leader_epoch) == (3, -1, -1)
    claimed = await persister.read_one(K, leader_epoch=5)
    assert claimed.leader_epoch == 5
    new = st(state_epoch=3, start=100, batches=[(100, 104, DeliveryState.ACKNOWLEDGED, 1),
                                               (110, 119, DeliveryState.AVAILABLE, 2)])
    await persister.write(K, new, writer_epoch=5)
    got = await persister.read_one(K)
    assert got.start_offset == 100 and got.state_batches == new.state_batches
    assert got.state_epoch == 3 and got.leader_epoch == 5


async def test_read_unknown_is_unknown_topic_or_partition(persister):
    res = await persister.read([K])
    assert isinstance(res[K], UnknownSharePartitionError)
    assert res[K].error_code == ErrorCode.unknown_topic_or_partition
    with pytest.raises(UnknownSharePartitionError):
        await persister.write(K, st(), 0)


async def test_stale_state_epoch_is_fenced_and_state_unchanged(persister):
    await persister.initialize(K, state_epoch=2, start_offset=0)
    await persister.write(K, st(state_epoch=2, start=7), writer_epoch=1)
    before = await persister.read_one(K)
    with pytest.raises(FencedStateEpochError) as exc:
        await persister.write(K, st(state_epoch=1, start=50), writer_epoch=1)
    assert exc.value.error_code == ErrorCode.fenced_state_epoch == 124
    assert await persister.read_one(K) == before
    # initialize with a lower state epoch is fenced too; same epoch is an idempotent no-op
    with pytest.raises(FencedStateEpochError):
        await persister.initialize(K, state_epoch=1)
    assert await persister.initialize(K, state_epoch=2) == before
    # a higher state epoch resets (admin alter offsets) and fences the old writers
    reset = await persister.initialize(K, state_epoch=3, start_offset=40)
    assert (reset.start_offset, reset.state_batches, reset.leader_epoch) == (40, (), -1)
    with pytest.raises(FencedStateEpochError):
        await persister.write(K, st(state_epoch=2, start=60), writer_epoch=1)


async def test_owner_epoch_fencing_seed_004(persister):
    """Accept when assignment epoch <= writer epoch <= current epoch."""
    await persister.initialize(K, state_epoch=1, start_offset=0)
    await persister.read_one(K, leader_epoch=5)  # owner A takes over at 5
    await persister.advance_epoch([K], 6)  # A's epoch is bumped, still the owner
    await persister.write(K, st(start=1), writer_epoch=5)  # A's in-flight write at 5: accepted
    await persister.write(K, st(start=2), writer_epoch=6)
    with pytest.raises(FencedLeaderEpochError):
        await persister.write(K, st(start=3), writer_epoch=7)  # from the future: not a known epoch
    await persister.read_one(K, leader_epoch=8)  # owner B takes over at 8
    before = await persister.read_one(K)
    for zombie_epoch in (5, 6, 7):
        with pytest.raises(FencedLeaderEpochError) as exc:
            await persister.write(K, st(start=99), writer_epoch=zombie_epoch)
        assert exc.value.error_code == ErrorCode.fenced_leader_epoch
    assert await persister.read_one(K) == before
    assert persister.stored(K).assignment_epoch == 8
    # a reader with a lower epoch than the current owner's is fenced too
    res = await persister.read([K], leader_epoch=7)
    assert isinstance(res[K], FencedLeaderEpochError)
    await persister.write(K, st(start=4), writer_epoch=8)
    assert (await persister.read_one(K)).start_offset == 4


async def test_first_write_claims_unowned_state(persister):
    await persister.initialize(K, 1, 0)
    await persister.write(K, st(start=5), writer_epoch=3)
    assert persister.stored(K).assignment_epoch == 3
    with pytest.raises(FencedLeaderEpochError):
        await persister.write(K, st(start=6), writer_epoch=2)


async def test_write_validates_and_trims_batches(persister):
    await persister.initialize(K, 1, 0)
    with pytest.raises(InvalidStateError):
        await persister.write(K, st(start=0, batches=[(5, 9, DeliveryState.ARCHIVED, 1),
                                                      (8, 12, DeliveryState.ARCHIVED, 1)]), 0)
    with pytest.raises(InvalidStateError):
        await persister.write(K, st(start=0, batches=[(5, 9, DeliveryState.ACQUIRED, 1)]), 0)
    await persister.write(K, st(start=10, batches=[(0, 4, DeliveryState.ACKNOWLEDGED, 1),
                                                   (8, 12, DeliveryState.ARCHIVED, 5)]), 0)
    got = await persister.read_one(K)
    assert got.state_batches == (StateBatch(10, 12, DeliveryState.ARCHIVED, 5),)
    # start offset -1 in a write means "not being written": the stored SPSO stays
    await persister.write(K, st(start=-1, batches=[(11, 11, DeliveryState.ACKNOWLEDGED, 1)]), 0)
    assert (await persister.read_one(K)).start_offset == 10


async def test_read_summary_gives_spso_and_lag_inputs(persister):
    await persister.initialize(K, 4, 0)
    await persister.write(K, st(state_epoch=4, start=100, batches=[
        (100, 109, DeliveryState.ACKNOWLEDGED, 1), (110, 111, DeliveryState.AVAILABLE, 2),
        (120, 124, DeliveryState.ARCHIVED, 5)]), 0)
    summary = (await persister.read_summary([K]))[K]
    assert (summary.state_epoch, summary.start_offset) == (4, 100)
    assert summary.completed_count == 15 and summary.redelivering_count == 2
    assert summary.lag(high_watermark=130) == 130 - 100 - 15
    other = SharePartitionKey("g1", TID, 9)
    assert isinstance((await persister.read_summary([other]))[other], UnknownSharePartitionError)


async def test_batch_forms_give_per_key_outcomes(persister):
    keys = [SharePartitionKey("g2", TID, p) for p in range(50)]
    res = await persister.initialize_many(InitializeItem(k, 1, 0) for k in keys)
    assert res == dict.fromkeys(keys)
    writes = [WriteItem(k, st(start=k.partition), 0) for k in keys]
    writes.append(WriteItem(SharePartitionKey("nope", TID, 0), st(), 0))
    writes.append(WriteItem(keys[0], st(state_epoch=0), 0))  # stale state epoch -> fenced
    res = await persister.write_many(writes)
    assert isinstance(res[SharePartitionKey("nope", TID, 0)], UnknownSharePartitionError)
    assert isinstance(res[keys[0]], FencedStateEpochError)
    assert all(res[k] is None for k in keys[1:])
    states = await persister.read(keys)
    assert [states[k].start_offset for k in keys[1:]] == list(range(1, 50))
    assert persister.keys("g2") == keys
    assert await persister.delete(keys[:10]) == dict.fromkeys(keys[:10])
    assert await persister.delete(keys[:10]) == dict.fromkeys(keys[:10])  # idempotent
    assert persister.keys("g2") == keys[10:]


async def test_writes_are_coalesced_across_share_partitions():
    p = MemoryPersister(partitions=2, linger_ms=5)
    await p.start()
    keys = [SharePartitionKey("g", TID, i) for i in range(200)]
    await p.initialize_many(InitializeItem(k, 1, 0) for k in keys)
    commits_before = p.commits
    await asyncio.gather(*(p.write(k, st(start=i), 0) for i, k in enumerate(keys)))
    assert p.commits - commits_before <= 2  # one commit per state partition, not 200
    await p.close()


async def test_restart_recovers_identical_state_and_groups_and_topic_ids():
    log = MemoryLog(partitions=4)
    a = MemoryPersister(log=log)
    await a.start()
    keys = [SharePartitionKey(f"g{i % 3}", TID, i) for i in range(30)]
    await a.initialize_many(InitializeItem(k, 2, 0) for k in keys)
    await a.write_many(WriteItem(k, st(state_epoch=2, start=k.partition,
                                       batches=[(k.partition + 1, k.partition + 3, DeliveryState.ARCHIVED, 2)]), 1)
                       for k in keys)
    group = GroupRecord("g0", group_epoch=7, initialized={TID: (0, 3)},
                        configs={"share.auto.offset.reset": "earliest"})
    await a.put_group(group)
    tid = await a.topic_id("orders")
    assert await a.topic_id("orders") == tid
    await a.delete(keys[:2])
    before = await a.read(keys)
    await a.close()

    b = MemoryPersister(log=log)
    await b.start()
    after = await b.read(keys)
    for k in keys[2:]:
        assert after[k] == before[k]
        assert b.stored(k).assignment_epoch == 1
    assert all(isinstance(after[k], UnknownSharePartitionError) for k in keys[:2])
    assert b.get_group("g0") == group
    assert b.topic_ids() == {"orders": tid}
    assert b.recovery_stats.share_partitions == 28 and b.recovery_stats.skipped_count == 0
    await b.close()


async def test_compaction_keeps_one_record_per_key_and_same_state():
    log = MemoryLog(partitions=2)
    a = MemoryPersister(log=log)
    await a.start()
    keys = [SharePartitionKey("g", TID, i) for i in range(20)]
    await a.initialize_many(InitializeItem(k, 1, 0) for k in keys)
    for round_ in range(10):
        await a.write_many(WriteItem(k, st(start=round_), 0) for k in keys)
    before = await a.read(keys)
    await a.close()
    assert len(log) >= 220
    log.compact()
    assert len(log) == 20 + 2 + 2  # one snapshot per key + one owner and one layout record per state partition
    b = MemoryPersister(log=log)
    await b.start()
    assert await b.read(keys) == before
    await b.close()


async def test_garbage_records_are_skipped_counted_and_logged(caplog):
    log = MemoryLog(partitions=1)
    a = MemoryPersister(log=log)
    await a.start()
    await a.initialize(K, 1, 5)
    await a.close()
    log.produce_raw(0, b"\x00garbage", b"\xff\xfe")
    log.produce_raw(0, b'["p","g1"]', b"{}")  # wrong key shape
    log.produce_raw(0, b'["x","what"]', b'{"v":1}')  # unknown kind
    log.produce_raw(0, b'["p","g1","%s",1]' % TID.encode(), b'{"v":99,"se":1}')  # unknown version
    log.produce_raw(0, b'["p","g1","%s",2]' % TID.encode(), b'{"v":1,"se":"x"}')  # bad field
    log.produce_raw(0, None, b"{}")  # no key
    b = MemoryPersister(log=log)
    with caplog.at_level("WARNING", logger="kshare_sidecar.persist"):
        await b.start()
    assert b.recovery_stats.skipped_count == 6
    # offset 0: a's owner record, 1: its layout record, 2: the snapshot
    assert [off for _, off, _ in b.recovery_stats.skipped] == [3, 4, 5, 6, 7, 8]
    assert "unknown value version 99" in b.recovery_stats.skipped[3][2]
    assert "offset 6" in caplog.text
    assert (await b.read_one(K)).start_offset == 5
    await b.close()


async def test_new_writer_fences_old_one_and_nothing_is_silently_lost():
    log = MemoryLog(partitions=1)
    a = MemoryPersister(log=log)
    await a.start()
    await a.initialize(K, 1, 0)
    b = MemoryPersister(log=log)
    await b.start()  # takes over the partition
    with pytest.raises(WriterFencedError) as exc:
        await a.write(K, st(start=50), 0)
    assert exc.value.error_code == ErrorCode.not_coordinator
    assert 0 in a.fenced_partitions
    assert (await a.read_one(K)).start_offset == 0  # the failed write was not applied
    with pytest.raises(WriterFencedError):  # and it stays fenced
        await a.write(K, st(start=51), 0)
    await b.write(K, st(start=60), 0)
    c = MemoryPersister(log=log)
    await c.start()
    assert (await c.read_one(K)).start_offset == 60
    for p in (a, b, c):
        await p.close()


async def test_groups_and_topic_ids(persister):
    await persister.put_group(GroupRecord("ga", group_epoch=1))
    await persister.put_group(GroupRecord("ga", group_epoch=2, initialized={TID: (0,)}))
    await persister.initialize(SharePartitionKey("ga", TID, 0), 1)
    assert persister.get_group("ga").group_epoch == 2
    assert set(persister.list_groups()) == {"ga"}
    await persister.delete_group("ga")
    assert persister.get_group("ga") is None and persister.keys("ga") == []
    assert await persister.topic_id("t1", create=False) is None
    minted = await persister.topic_id("t1")
    assert len(minted) == 36
    await persister.set_topic_id("t2", TID)
    assert persister.topic_ids() == {"t1": minted, "t2": TID}
    assert persister.topic_names()[TID] == "t2"
    await persister.delete_topic_id("t1")
    assert persister.topic_ids() == {"t2": TID}


async def test_concurrent_topic_id_minting_agrees(persister):
    ids = await asyncio.gather(*(persister.topic_id("same") for _ in range(20)))
    assert len(set(ids)) == 1


async def test_owner_rule_ignores_a_superseded_coordinators_group_and_member_records():
    """Without backend fencing (replay rule "owner", state.write.mode=idempotent) a group's and its
    members' records written by a superseded owner after its successor's owner record are ignored
    by every replay, like share-partition records, and the new owner writes its own view over them
    (a tombstone where it has none), so compaction cannot keep the zombie's."""
    from kshare_sidecar.persist import codec
    from kshare_sidecar.persist.records import GroupRecord, MemberRecord

    log = MemoryLog(1)
    old = MemoryPersister(log=log)
    old.store.replay_rule = "owner"
    await old.start()  # owner epoch 0
    await old.put_group(GroupRecord("g", group_epoch=2), members={"m": MemberRecord("g", "m", member_epoch=2)})
    assert old.get_member("g", "m").owner_epoch == 0
    new = MemoryPersister(log=log)
    new.store.replay_rule = "owner"
    await new.start()  # owner epoch 1: its owner record follows the old owner's records
    await new.close()
    # the old owner, superseded, still writes (no backend fencing in this mode): a join and a bump
    zombie = [codec.encode(codec.KIND_GROUP, "g", GroupRecord("g", group_epoch=3, owner_epoch=0)),
              codec.encode(codec.KIND_MEMBER, ("g", "m"), MemberRecord("g", "m", member_epoch=3, owner_epoch=0)),
              codec.encode(codec.KIND_MEMBER, ("g", "z"), MemberRecord("g", "z", member_epoch=3, owner_epoch=0))]
    for key, value in zombie:
        log.produce_raw(0, key, value)
    fresh = MemoryPersister(log=log)
    fresh.store.replay_rule = "owner"
    await fresh.start()
    assert fresh.get_group("g").group_epoch == 2
    assert fresh.get_member("g", "m").member_epoch == 2 and fresh.get_member("g", "z") is None
    assert fresh.recovery_stats.stale_ignored == 3
    await fresh.close()
    log.compact()  # the zombie's records are superseded by the rewrites, whatever compaction keeps
    after = MemoryPersister(log=log)
    await after.start()
    assert (after.get_group("g").group_epoch, after.get_member("g", "m").member_epoch) == (2, 2)
    assert after.get_member("g", "z") is None
    await after.close()
    await old.close()


async def test_start_up_reads_on_from_its_replay_instead_of_replaying_twice():
    """Replay rule "owner": after its owner records, start-up reads on from where its replay ended
    (not everything again), and adopts what landed in between exactly as a full replay would."""
    from kshare_sidecar.persist import codec
    from kshare_sidecar.persist.model import PartitionState
    from kshare_sidecar.persist.records import StoredPartition

    log = MemoryLog(2)
    first = MemoryPersister(log=log)
    await first.start()
    keys = [SharePartitionKey("g", "t", p) for p in range(50)]
    for k in keys:
        await first.initialize(k, 0, 7)
    await first.close()
    before = len(log)
    late = SharePartitionKey("g", "t", 99)
    p = MemoryPersister(log=log)
    p.store.replay_rule = "owner"
    take = p.ownership.take_ownership

    async def landing_before_our_owner_records():
        # a write of the previous owner (no backend fencing in this mode) lands after our replay
        log.produce_raw(1, *codec.encode(codec.KIND_PARTITION, late,
                                         StoredPartition(PartitionState(0, 0, 11), 0)))
        await take()
    p.ownership.take_ownership = landing_before_our_owner_records  # type: ignore[method-assign]
    await p.start()
    assert p.recovery_stats.records == before + 1 + 2, "each record once, plus our two owner records"
    assert p.stored(late) is not None and p.stored(late).state.start_offset == 11
    full = MemoryPersister(log=log)
    full.store.replay_rule = "owner"
    await full.recover()
    assert {k: v for k, v in full.view.entities.items()} == {k: v for k, v in p.view.entities.items()}
    await p.close()
