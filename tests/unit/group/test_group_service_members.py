"""GroupService keeps a share group's members in the state topic (group/persisted.py) as Kafka's
coordinator keeps them in __consumer_offsets: written when they change (a join, a new target, a
member reaching it, a leave, an expiry), never per heartbeat; restored on restart with their ids
and epochs; tombstoned when they go; and a superseded coordinator's member write is refused like
any other state write. Memory persisters on one MemoryLog (the compacted topic's stand-in)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.assignors.simple import SimpleAssignor
from kshare_sidecar.group.assign import assign_with
from kshare_sidecar.group.coordinator import ShareGroupCoordinator
from kshare_sidecar.persist import codec
from kshare_sidecar.persist.memory import MemoryLog, MemoryPersister
from kshare_sidecar.persist.ownership import group_home
from kshare_sidecar.group.service import GroupService
from kshare_sidecar.share.cache import SharePartitionCache
from tests.unit.wire.stack import TOPICS, MemoryBackend

ORDERS = TOPICS[0]  # 3 partitions


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def service(persister, clock) -> GroupService:
    coordinator = ShareGroupCoordinator(assign=assign_with(SimpleAssignor()), clock=clock, session_timeout_ms=45_000)
    partitions = SharePartitionCache(persister=persister, backend=MemoryBackend(), clock=clock,
                                       group_config=lambda g: None)
    return GroupService(coordinator=coordinator, partitions=partitions, backend=MemoryBackend(), persister=persister)


async def hb(groups, member, epoch, topics=None):
    return await groups.heartbeat(group_id="g", member_id=member, member_epoch=epoch, rack_id=None,
                                  subscribed_topic_names=topics, client_id="c", client_host="h")


def member_records(log: MemoryLog) -> list[tuple[str, int | None]]:
    """(member id, member epoch or None for a tombstone) of every member record in the log, in order."""
    out = []
    for records in log.partitions:
        for key, value in records:
            kind, ident, entity = codec.decode(key, value)
            if kind == codec.KIND_MEMBER:
                out.append((ident[1], None if entity is None else entity.member_epoch))
    return out


@pytest.fixture
async def log():
    return MemoryLog(4)


async def test_members_are_written_when_they_change_and_survive_a_restart(log):
    clock = Clock()
    persister = MemoryPersister(log=log)
    await persister.start()
    groups = service(persister, clock)
    a = await hb(groups, "a", 0, ["orders"])
    a = await hb(groups, "a", a.member_epoch)  # assigned, one epoch on
    assert a.assignment == {ORDERS.topic_id: frozenset({0, 1, 2})}
    written = len(log)
    for _ in range(20):  # a member at its target heartbeats: nothing is written
        assert (await hb(groups, "a", a.member_epoch)).member_epoch == a.member_epoch
    assert len(log) == written
    b = await hb(groups, "b", 0, ["orders"])  # a join: new group epoch and target for both
    a = await hb(groups, "a", a.member_epoch)
    b = await hb(groups, "b", b.member_epoch)
    record = persister.get_member("g", "a")
    assert (record.member_epoch, record.subscribed) == (a.member_epoch, ("orders",))
    held = groups.coordinator.groups["g"].members["b"].assignment
    assert persister.get_member("g", "b").assignment == {str(t): tuple(sorted(ps)) for t, ps in held.items()}
    await persister.close()

    # a restart: the members are back with their epochs, and go on without rejoining
    persister = MemoryPersister(log=log)
    await persister.start()
    clock.now += 1000
    again = service(persister, clock)
    assert again.restore() == 1
    assert set(again.coordinator.groups["g"].members) == {"a", "b"}
    a2 = await hb(again, "a", a.member_epoch)
    assert (a2.error, a2.member_epoch) == (ErrorCode.none, a.member_epoch)
    assert a2.assignment == groups.coordinator.groups["g"].members["a"].assignment  # resent once

    # a leave and an expiry: tombstones, and the group record's new epoch
    assert (await hb(again, "b", -1)).member_epoch == -1
    assert persister.get_member("g", "b") is None and member_records(log)[-1] == ("b", None)
    clock.now += 45_001
    assert await again.expire_members() == [("g", "a")]
    assert persister.get_member("g", "a") is None and member_records(log)[-1] == ("a", None)
    assert persister.get_group("g").group_epoch == again.coordinator.groups["g"].group_epoch
    log.compact()
    assert member_records(log) == []  # compaction keeps no member of the empty group
    await persister.close()


async def test_delete_group_tombstones_its_member_records(log):
    persister = MemoryPersister(log=log)
    await persister.start()
    groups = service(persister, Clock())
    await hb(groups, "a", 0, ["orders"])
    await hb(groups, "a", -1)
    # a member record left behind (its tombstone failed in some earlier life) goes with the group
    await persister.put_group(persister.get_group("g"), members={"ghost": persister.list_members().get(
        "g", {}).get("a") or _ghost()})
    assert persister.list_members("g")["g"].keys() == {"ghost"}
    assert await groups.delete_group("g") == ErrorCode.none
    assert persister.list_members("g") == {} and persister.get_group("g") is None
    await persister.close()


def _ghost():
    from kshare_sidecar.persist.records import MemberRecord
    return MemberRecord("g", "ghost", subscribed=("orders",), member_epoch=3, previous_epoch=2)


async def test_a_superseded_coordinators_member_write_is_refused(log):
    """A and B in a cluster: B takes the group's state partition over while A still believes it
    coordinates (paused, or not told yet). A's member write fails at the log (its writer is
    fenced, as the backend fences a transactional id's older producer epoch) and is answered as a
    retriable error; B's replay and the log hold only what was committed before B took over."""
    clock = Clock()
    a_p, b_p = MemoryPersister(log=log), MemoryPersister(log=log)
    for p in (a_p, b_p):
        p.enable_cluster()
        await p.start()
    home = group_home("g", 4)
    await a_p.acquire(home)
    a = service(a_p, clock)
    j = await hb(a, "m", 0, ["orders"])
    b = service(b_p, clock)
    await b_p.acquire(home)  # no release by A: a kill -9 or a pause; B restores the group
    assert set(b.coordinator.groups["g"].members) == {"m"}
    before = member_records(log)
    zombie = await hb(a, "m2", 0, ["orders"])  # a join at A changes members and the group epoch
    assert zombie.error == ErrorCode.coordinator_not_available
    assert member_records(log) == before  # m2's join was never durable
    assert {m for m, epoch in member_records(log) if epoch is not None} == {"m"}  # what any replay restores
    again = await hb(b, "m", j.member_epoch)
    assert (again.error, again.member_epoch) == (ErrorCode.none, j.member_epoch + 1)
    for p in (a_p, b_p):
        await p.close()
