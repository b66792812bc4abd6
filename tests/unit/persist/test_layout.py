"""The state topic's layout (persist/layout.py): a single sidecar of an older build placed
share-partitions by the whole key; every sidecar now places them by topic-partition and moves an
older layout's records home — a single sidecar at start-up, a cluster member before it joins —
crash-safe at every commit. Memory persister on a MemoryLog (the topic persister shares the engine).
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from kshare_sidecar.persist import (
    GroupRecord,
    InitializeItem,
    MemoryLog,
    MemoryPersister,
    PartitionState,
    SharePartitionKey,
    StateBatch,
    WriteItem,
    WriterFencedError,
)
from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_LAYOUT, KIND_PARTITION
from kshare_sidecar.persist.errors import CommitOutcomeUnknownError
from kshare_sidecar.persist.layout import LayoutError, plan_moves, with_epoch
from kshare_sidecar.persist.model import DeliveryState
from kshare_sidecar.persist.layout import share_partition_home, state_partition_for
from kshare_sidecar.persist.replay import replay_sink
from kshare_sidecar.persist.records import RecoveryStats, StoredPartition

TID = "0b7ad3b2-2d3b-4f5c-9a3c-1f1e2d3c4b5a"
PARTS = 4


def snapshot(start: int, acked: int = 0, count: int = 1) -> PartitionState:
    """SPSO ``start``, then ``acked`` acknowledged records and one released with ``count`` deliveries."""
    batches = []
    if acked:
        batches.append(StateBatch(start, start + acked - 1, DeliveryState.ACKNOWLEDGED, 1))
    batches.append(StateBatch(start + acked, start + acked, DeliveryState.AVAILABLE, count))
    return PartitionState(state_epoch=1, leader_epoch=0, start_offset=start, state_batches=tuple(batches))


def misplaced_keys(n: int, groups: str = "abcdefgh") -> list[SharePartitionKey]:
    """Keys whose home under the two layouts differ (the ones a move has to move)."""
    out = []
    for g in groups:
        for partition in range(64):
            k = SharePartitionKey(g, TID, partition)
            if state_partition_for(KIND_PARTITION, k, PARTS, "key") != share_partition_home(TID, partition, PARTS):
                out.append(k)
            if len(out) == n:
                return out
    raise AssertionError("not enough keys")


async def legacy_state(log: MemoryLog, keys: list[SharePartitionKey]) -> dict[SharePartitionKey, PartitionState]:
    """What a single sidecar of an older build leaves: records placed by key, a group record."""
    old = MemoryPersister(log=log, placement="key")
    await old.start()
    await old.initialize_many(InitializeItem(k, 1, 0) for k in keys)
    epoch = old.owner_epoch
    assert epoch is not None
    await old.read(keys, leader_epoch=epoch)
    await old.write_many(WriteItem(k, snapshot(10 + i, acked=i % 3, count=1 + i % 4), epoch) for i, k in enumerate(keys))
    await old.put_group(GroupRecord("a", 3, {TID: tuple(range(8))}, {"share.record.lock.duration.ms": "15000"}))
    states = {k: s for k, s in (await old.read(keys)).items() if isinstance(s, PartitionState)}
    await old.close()
    return states


def records_at_home(log: MemoryLog) -> dict[SharePartitionKey, int]:
    """Share-partition key -> the one partition where its newest record is live, from the log itself
    (a key live on two partitions fails)."""
    live: dict[SharePartitionKey, set[int]] = {}
    for p, recs in enumerate(log.partitions):
        newest: dict = {}
        for key, value in recs:
            kind, ident = codec.decode_key(key)
            if kind == KIND_PARTITION:
                newest[ident] = value
        for ident, value in newest.items():
            if value is not None:
                live.setdefault(ident, set()).add(p)
    assert all(len(ps) == 1 for ps in live.values()), {k: ps for k, ps in live.items() if len(ps) > 1}
    return {k: min(ps) for k, ps in live.items()}


def layouts(log: MemoryLog) -> dict[int, str]:
    out = {}
    for p, recs in enumerate(log.partitions):
        for key, value in recs:
            if codec.decode_key(key)[0] == KIND_LAYOUT and value is not None:
                out[p] = codec.decode_layout(value)
    return out


def same_state(a: PartitionState, b: PartitionState) -> bool:
    """Equal but for the owner epoch (a moved record carries its mover's)."""
    return (a.state_epoch, a.start_offset, a.state_batches) == (b.state_epoch, b.start_offset, b.state_batches)


# ------------------------------------------------------------------------------------ pure parts
def test_plan_moves_copies_home_and_drops_every_original():
    keys = misplaced_keys(3)
    stored = {k: StoredPartition(snapshot(5), assignment_epoch=2) for k in keys}
    misplaced = {k: (state_partition_for(KIND_PARTITION, k, PARTS, "key"), stored[k]) for k in keys}
    at_home = {(KIND_PARTITION, keys[0]): StoredPartition(snapshot(9))}  # a move cut short after its copy
    plan = plan_moves(at_home, misplaced, PARTS, lambda p: 7)
    assert plan.dropped == 3 and plan.moved == 2
    assert {k for keys_ in plan.drops.values() for k in keys_} == set(keys)
    for p, keys_ in plan.drops.items():
        assert all(misplaced[k][0] == p for k in keys_)
    copied = {k: (p, s) for p, items in plan.copies.items() for k, s in items}
    assert set(copied) == set(keys[1:])
    for k, (p, s) in copied.items():
        assert p == share_partition_home(TID, k.partition, PARTS)
        assert s.state.leader_epoch == 7 and s.assignment_epoch == 2  # the mover's epoch; the claim stays


def test_with_epoch_never_lowers_an_epoch():
    s = StoredPartition(PartitionState(1, 9, 0), 9)
    assert with_epoch(s, 5) is s
    assert with_epoch(s, 12).state.leader_epoch == 12


def test_replay_keeps_another_layouts_records_apart_and_their_tombstones_delete_nothing_at_home():
    k = misplaced_keys(1)[0]
    old, home = state_partition_for(KIND_PARTITION, k, PARTS, "key"), share_partition_home(TID, k.partition, PARTS)
    entities: dict = {}
    stats = RecoveryStats()
    sink = replay_sink(entities, stats, {}, "owner", "topic-partition", PARTS)
    v_old = codec.encode(KIND_PARTITION, k, StoredPartition(snapshot(3)))
    v_home = codec.encode(KIND_PARTITION, k, StoredPartition(snapshot(8)))
    sink(home, 0, *v_home)
    sink(old, 0, *v_old)
    assert entities[(KIND_PARTITION, k)].state.start_offset == 8
    assert stats.misplaced[k][0] == old and stats.misplaced[k][1].state.start_offset == 3
    sink(old, 1, codec.partition_key(k), None)  # the original's tombstone, once moved
    assert k not in stats.misplaced and entities[(KIND_PARTITION, k)].state.start_offset == 8
    sink(old, 2, *codec.encode(KIND_LAYOUT, old, "topic-partition"))
    assert stats.layouts == {old: "topic-partition"}


# ------------------------------------------------------------------------------ a single sidecar
async def test_a_single_sidecar_moves_an_older_layout_home_and_records_it():
    log = MemoryLog(PARTS)
    keys = misplaced_keys(12)
    before = await legacy_state(log, keys)
    assert all(p != share_partition_home(TID, k.partition, PARTS) for k, p in records_at_home(log).items())
    new = MemoryPersister(log=log)
    await new.start()
    assert new.recovery_stats.misplaced == {}
    after = await new.read(keys)
    assert all(same_state(before[k], after[k]) for k in keys)  # type: ignore[arg-type]
    assert new.get_group("a") == GroupRecord("a", 3, {TID: tuple(range(8))}, {"share.record.lock.duration.ms": "15000"})
    # its own writes go on (the moved records carry its owner epoch)
    epoch = new.owner_epoch
    assert epoch is not None
    await new.read(keys, leader_epoch=epoch)
    await new.write(keys[0], snapshot(50), epoch)
    await new.close()
    where = records_at_home(log)
    assert all(where[k] == share_partition_home(TID, k.partition, PARTS) for k in keys)
    assert layouts(log) == {p: "topic-partition" for p in range(PARTS)}
    log.compact()  # tombstones gone: still everything at home
    again = MemoryPersister(log=log)
    await again.start()
    assert (await again.read_one(keys[0])).start_offset == 50
    later = await again.read(keys[1:])
    assert all(same_state(before[k], later[k]) for k in keys[1:])  # type: ignore[arg-type]
    assert again.recovery_stats.misplaced == {}
    await again.close()


async def test_a_fresh_topic_records_its_layout_at_once():
    log = MemoryLog(PARTS)
    p = MemoryPersister(log=log)
    await p.start()
    await p.close()
    assert layouts(log) == {p: "topic-partition" for p in range(PARTS)}
    n = len(log)
    p = MemoryPersister(log=log)
    await p.start()
    await p.close()
    assert len(log) == n + PARTS  # only the owner records: the layout is written once


async def test_a_layout_this_build_does_not_know_is_refused():
    log = MemoryLog(PARTS)
    log.produce_raw(2, *codec.encode(KIND_LAYOUT, 2, "by-the-moon"))
    with pytest.raises(LayoutError, match="'by-the-moon'.*partition 2.*newer kshare"):
        await MemoryPersister(log=log).start()
    member = MemoryPersister(log=log)
    member.enable_cluster()
    with pytest.raises(LayoutError, match="by-the-moon"):
        await member.start()


class KilledAfter(MemoryPersister):
    """Stops (as a SIGKILL would: nothing more is written) after ``n`` commits of its move."""

    def __init__(self, *, n: int, landed: bool, **kw):
        super().__init__(**kw)
        self.n, self.landed, self.commits_seen = n, landed, 0
        self.commit_to_log = self.memory.commit
        self.memory.commit = self._commit  # type: ignore[method-assign]  # every part commits through it

    async def _commit(self, partition, records):
        if self.ready or not any(codec.decode_key(k)[0] in (KIND_PARTITION, KIND_LAYOUT) for k, _ in records):
            return await self.commit_to_log(partition, records)
        self.commits_seen += 1
        if self.commits_seen == self.n:
            if self.landed:  # the batch landed, the process died before it learned so
                await self.commit_to_log(partition, records)
            raise CommitOutcomeUnknownError("killed")
        if self.commits_seen > self.n:
            raise CommitOutcomeUnknownError("dead")
        return await self.commit_to_log(partition, records)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n_keys=hs.integers(1, 14), kill_at=hs.integers(1, 12), landed=hs.booleans(), kills=hs.integers(1, 3))
def test_a_move_killed_at_any_commit_loses_nothing_and_the_next_start_finishes_it(n_keys, kill_at, landed, kills):
    async def run() -> None:
        log = MemoryLog(PARTS)
        keys = misplaced_keys(n_keys)
        before = await legacy_state(log, keys)
        for i in range(kills):  # killed again during the next attempt, possibly
            dying = KilledAfter(log=log, n=max(1, kill_at - i * 3), landed=landed)
            try:
                await dying.start()
            except CommitOutcomeUnknownError:
                pass
            else:  # finished before the kill point
                await dying.close()
            # nothing lost at any point: a naive reader that prefers a record at its home finds every key
            state: dict = {}
            for p, recs in enumerate(log.partitions):
                for key, value in recs:
                    kind, ident = codec.decode_key(key)
                    if kind != KIND_PARTITION:
                        continue
                    home = share_partition_home(TID, ident.partition, PARTS)
                    if value is None:
                        if state.get(ident, (None,))[0] == p:
                            del state[ident]
                    elif p == home or state.get(ident, (None,))[0] != home:
                        state[ident] = (p, codec.decode_partition(value).state)
            assert set(state) == set(keys)
            assert all(same_state(before[k], state[k][1]) for k in keys)
        final = MemoryPersister(log=log)
        await final.start()
        done = await final.read(keys)
        assert all(same_state(before[k], done[k]) for k in keys)  # type: ignore[arg-type]
        await final.close()
        assert all(p == share_partition_home(TID, k.partition, PARTS) for k, p in records_at_home(log).items())
        assert set(records_at_home(log)) == set(keys)
        assert layouts(log) == {p: "topic-partition" for p in range(PARTS)}
    asyncio.run(run())


async def test_without_backend_fencing_a_newer_owner_stops_the_move_before_the_originals_go():
    log = MemoryLog(PARTS)
    keys = misplaced_keys(6)
    before = await legacy_state(log, keys)

    class Superseded(MemoryPersister):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.memory.fences_writers = False  # as in state.write.mode=idempotent
            self.replay.read_owner = self._read_owner  # type: ignore[method-assign]

        async def _read_owner(self, p):
            return (self.owner_epoch or 0) + 1  # someone took over meanwhile

    with pytest.raises(WriterFencedError, match="took over while the records were moved"):
        await Superseded(log=log).start()
    assert not any(v is None for recs in log.partitions for _, v in recs)  # no original tombstoned
    final = MemoryPersister(log=log)
    await final.start()
    done = await final.read(keys)
    assert all(same_state(before[k], done[k]) for k in keys)  # type: ignore[arg-type]
    await final.close()


# ------------------------------------------------------------------------------------ a cluster
async def test_a_cluster_member_moves_the_records_before_it_joins_then_serves_them():
    log = MemoryLog(PARTS)
    keys = misplaced_keys(10)
    before = await legacy_state(log, keys)
    members = []
    for _ in range(2):
        m = MemoryPersister(log=log)
        m.enable_cluster()
        await m.start()
        assert m.layout_known
        members.append(m)
    for p in range(PARTS):
        await members[p % 2].acquire(p)
    for k in keys:
        owner = members[share_partition_home(TID, k.partition, PARTS) % 2]
        state = await owner.read_one(k)
        assert same_state(before[k], state)
    for m in members:
        await m.close()
    assert set(records_at_home(log)) == set(keys)
    assert layouts(log) == {p: "topic-partition" for p in range(PARTS)}


async def test_cluster_members_on_a_fresh_topic_record_the_layout_as_they_take_partitions_over():
    log = MemoryLog(PARTS)
    m = MemoryPersister(log=log)
    m.enable_cluster()
    await m.start()
    assert m.layout_known and layouts(log) == {}
    await m.acquire(1)
    assert layouts(log) == {1: "topic-partition"}
    await m.close()


async def test_a_member_refuses_a_partition_with_records_of_the_older_layout_written_after_the_move():
    log = MemoryLog(PARTS)
    m = MemoryPersister(log=log)
    m.enable_cluster()
    await m.start()
    await m.acquire(0)
    await m.release(0)
    # an older build's single sidecar wrote after the move (a downgrade)
    k = next(k for k in misplaced_keys(40) if state_partition_for(KIND_PARTITION, k, PARTS, "key") == 1)
    log.produce_raw(1, *codec.encode(KIND_PARTITION, k, StoredPartition(snapshot(4))))
    with pytest.raises(LayoutError, match="state partition 1 .* 1 share-partition records .*kshare state migrate"):
        await m.acquire(1)
    assert 1 not in m.owned
    await m.close()
