"""A persister in a cluster of sidecars owns only what it acquires: takeover fences
the previous owner of that state partition only, replays it, takes a larger owner epoch; release
refuses further writes; the placement keeps every group of one user partition on one state
partition. Memory persister on a shared MemoryLog (writer fencing as a transactional id's)."""

from __future__ import annotations

import asyncio

import pytest

from kshare_sidecar.cluster.assign import ClusterMap
from kshare_sidecar.cluster.view import ClusterView
from kshare_sidecar.persist import MemoryLog, MemoryPersister, PartitionState, SharePartitionKey, WriterFencedError
from kshare_sidecar.persist.codec import KIND_GROUP, KIND_PARTITION
from kshare_sidecar.persist.errors import FencedLeaderEpochError, NotReadyError
from kshare_sidecar.persist.ownership import group_home, share_partition_home, state_partition_for

TID = "0b7ad3b2-2d3b-4f5c-9a3c-1f1e2d3c4b5a"
PARTS = 4


def st(start: int, epoch: int = 0) -> PartitionState:
    return PartitionState(state_epoch=0, leader_epoch=epoch, start_offset=start)


def key_on(p: int, group: str = "g") -> SharePartitionKey:
    """A share-partition key whose state partition is ``p`` (topic-partition placement)."""
    for partition in range(1000):
        if share_partition_home(TID, partition, PARTS) == p:
            return SharePartitionKey(group, TID, partition)
    raise AssertionError


async def member(log: MemoryLog) -> MemoryPersister:
    p = MemoryPersister(log=log)
    p.enable_cluster()
    await p.start()
    return p


def test_placement_keeps_every_group_of_a_user_partition_together():
    homes = {state_partition_for(KIND_PARTITION, SharePartitionKey(g, TID, 3), 16, "topic-partition")
             for g in ("a", "b", "c", "d", "e")}
    assert homes == {share_partition_home(TID, 3, 16)}
    # the older builds' single-sidecar layout (read to move it, persist/layout.py) spread them
    legacy = {state_partition_for(KIND_PARTITION, SharePartitionKey(g, TID, 3), 16, "key") for g in "abcdefgh"}
    assert len(legacy) > 1
    assert group_home("grp", 16) == state_partition_for(KIND_GROUP, "grp", 16, "topic-partition")


async def test_nothing_is_owned_until_acquired_and_writes_elsewhere_are_refused():
    a = await member(MemoryLog(PARTS))
    k = key_on(1)
    with pytest.raises(WriterFencedError):
        await a.initialize(k, 0, 5)
    epoch = await a.acquire(1)
    assert a.owns(1) and not a.owns(0) and a.epoch_of(1) == epoch and a.epoch_of(0) is None
    await a.initialize(k, 0, 5)
    assert (await a.read_one(k, leader_epoch=epoch)).start_offset == 5
    with pytest.raises(WriterFencedError):
        await a.initialize(key_on(0), 0, 5)
    await a.close()


async def test_handover_replays_the_state_and_takes_a_larger_epoch():
    log = MemoryLog(PARTS)
    a, b = await member(log), await member(log)
    k = key_on(2)
    ea = await a.acquire(2)
    await a.initialize(k, 0, 0)
    await a.read_one(k, leader_epoch=ea)
    await a.write(k, st(40, ea), ea)
    released = []
    a.released_listeners.append(lambda p, keys: released.append((p, keys)))
    await a.release(2)
    assert released and released[0][0] == 2 and (KIND_PARTITION, k) in released[0][1]
    with pytest.raises(WriterFencedError):
        await a.write(k, st(41, ea), ea)
    acquired = []
    b.acquired_listeners.append(lambda p, keys: acquired.append((p, keys)))
    eb = await b.acquire(2)
    assert eb > ea
    assert (KIND_PARTITION, k) in acquired[0][1]
    state = await b.read_one(k, leader_epoch=eb)
    assert state.start_offset == 40
    await b.write(k, st(50, eb), eb)
    await a.close()
    await b.close()


async def test_a_takeover_fences_the_old_owner_on_that_partition_only():
    """B takes partition 1 while A, not told yet, still writes there: A's write is refused, A
    drops partition 1 (newer owner record) and keeps serving partition 0."""
    log = MemoryLog(PARTS)
    a, b = await member(log), await member(log)
    a.takeover_grace_s = 0.0
    k0, k1 = key_on(0), key_on(1)
    e0, e1 = await a.acquire(0), await a.acquire(1)
    for k, e in ((k0, e0), (k1, e1)):
        await a.initialize(k, 0, 0)
        await a.read_one(k, leader_epoch=e)
    eb = await b.acquire(1)
    with pytest.raises(WriterFencedError):
        await a.write(k1, st(10, e1), e1)
    for _ in range(100):
        if not a.owns(1):
            break
        await asyncio.sleep(0.01)
    assert not a.owns(1) and a.owns(0)
    await a.write(k0, st(7, e0), e0)  # partition 0 unaffected
    with pytest.raises(FencedLeaderEpochError):  # the new owner claims before it writes (as SharePartitionCache does)
        await b.write(k1, st(9, eb), eb)
    await b.read_one(k1, leader_epoch=eb)
    await b.write(k1, st(9, eb), eb)
    state = (await b.read([k1]))[k1]
    assert state.start_offset == 9
    await a.close()
    await b.close()


async def test_acquiring_answers_load_in_progress_and_a_release_while_acquiring_wins():
    a = await member(MemoryLog(PARTS))
    a.blocked[3] = "acquiring"
    with pytest.raises(NotReadyError):
        await a.initialize(key_on(3), 0, 0)
    del a.blocked[3]
    await a.acquire(3)
    await a.release(3)
    assert not a.owns(3)
    await a.close()


def test_cluster_view_routes_by_owner():
    view = ClusterView(1, {"PLAINTEXT": ("h1", 9001)}, PARTS)
    p = share_partition_home(TID, 5, PARTS)
    assert view.leader(TID, 5) == 1  # unknown owner: this sidecar answers (and redirects later)
    view.update(ClusterMap(2, {2: {"PLAINTEXT": ("h2", 9002)}}, {p: 2, group_home("grp", PARTS): 2}))
    assert view.leader(TID, 5) == 2 and view.coordinator("grp") == 2
    assert [n.node_id for n in view.nodes("PLAINTEXT")] == [1, 2]  # itself always listed
    assert view.node(2, "OTHER").host == "h2"  # no listener of that name: its first one
    assert view.node(9, "PLAINTEXT") is None
