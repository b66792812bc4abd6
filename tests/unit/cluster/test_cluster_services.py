"""The service layer of a cluster of sidecars, with cluster-mode memory persisters on
one MemoryLog (two "sidecars" A and B): group coordination and share-partition leadership follow
the state partitions a sidecar owns; elsewhere NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER, group
administration is refused (config changes forwarded), and nothing phantom is created."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.config import load_config
from kshare_sidecar.group.coordinator import ShareGroupCoordinator
from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.persist import MemoryLog, MemoryPersister
from kshare_sidecar.persist.ownership import group_home, share_partition_home
from kshare_sidecar.group.admin import AdminError, AdminService
from kshare_sidecar.group.service import GroupService
from kshare_sidecar.share.cache import PartitionError, SharePartitionCache

PARTS = 4
T = TopicInfo("t", uuid.UUID(int=7), 2)


class FakeBackend:
    async def describe_topics(self, names=None, stale_ok=False):
        return {n: T for n in (names or ["t"]) if n == "t"}

    def topic_by_id(self, topic_id):
        return T if topic_id == T.topic_id else None

    async def resolve_topic_id(self, topic_id):
        return T if topic_id == T.topic_id else None

    async def high_watermark(self, topic, partition):
        return 10

    async def list_offsets(self, topic, partition, spec, isolation_level=0):
        return 0


class Sidecar:
    """The pieces of one sidecar that ownership touches."""

    def __init__(self, log: MemoryLog) -> None:
        self.cfg = load_config(env={}, overrides={"bootstrap.servers": "x:1", "persister": "memory"})
        self.persister = MemoryPersister(log=log)
        self.persister.enable_cluster()
        backend = FakeBackend()
        from kshare_sidecar.assignors.simple import SimpleAssignor
        from kshare_sidecar.group.assign import assign_with
        self.coordinator = ShareGroupCoordinator(assign=assign_with(SimpleAssignor()), clock=lambda: 0,
                                                 assignment_interval_ms=0)
        self.partitions = SharePartitionCache(
            persister=self.persister, backend=backend, clock=lambda: 0,
            group_config=lambda g: self.cfg.group_config(
                self.coordinator.groups[g].configs if g in self.coordinator.groups else None))
        self.groups = GroupService(coordinator=self.coordinator, partitions=self.partitions, backend=backend,
                                   persister=self.persister)
        self.admin = AdminService(config=self.cfg, coordinator=self.coordinator, groups=self.groups,
                                  partitions=self.partitions, persister=self.persister, backend=backend)

    async def heartbeat(self, group, member="member-1", epoch=0):
        return await self.groups.heartbeat(group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                                           subscribed_topic_names=["t"], client_id="c", client_host="h")


@pytest.fixture
async def pair():
    log = MemoryLog(PARTS)
    a, b = Sidecar(log), Sidecar(log)
    await a.persister.start()
    await b.persister.start()
    yield a, b
    await a.persister.close()
    await b.persister.close()


async def test_group_coordination_follows_the_owned_state_partition(pair):
    a, b = pair
    group = "grp"
    home = group_home(group, PARTS)
    assert (await a.heartbeat(group)).error == ErrorCode.not_coordinator
    a.persister.blocked[home] = "acquiring"
    assert (await a.heartbeat(group)).error == ErrorCode.coordinator_load_in_progress
    del a.persister.blocked[home]
    await a.persister.acquire(home)
    joined = await a.heartbeat(group)
    assert joined.error == ErrorCode.none and group in a.coordinator.groups
    epoch = a.coordinator.groups[group].group_epoch
    # handover: A gives the partition up, B takes it over and coordinates the restored group
    await a.persister.release(home)
    assert group not in a.coordinator.groups
    assert (await a.heartbeat(group, joined.member_id, joined.member_epoch)).error == ErrorCode.not_coordinator
    await b.persister.acquire(home)
    assert b.coordinator.groups[group].group_epoch == epoch
    # the new coordinator restored the member from its record (Kafka's replay): same id, same
    # epoch, and its next heartbeat goes on exactly as it would have at A
    assert set(b.coordinator.groups[group].members) == {joined.member_id}
    again = await b.heartbeat(group, joined.member_id, joined.member_epoch)
    assert (again.error, again.member_epoch) == (ErrorCode.none, joined.member_epoch + 1)
    assert again.assignment == {T.topic_id: frozenset({0, 1})}
    steady = await b.heartbeat(group, joined.member_id, again.member_epoch)
    epoch = b.coordinator.groups[group].group_epoch
    await b.persister.release(home)
    await a.persister.acquire(home)  # and back: nothing moves for a member at its target
    back = await a.heartbeat(group, joined.member_id, steady.member_epoch)
    assert (back.error, back.member_epoch) == (ErrorCode.none, steady.member_epoch)
    assert a.coordinator.groups[group].group_epoch == epoch


async def test_share_partitions_are_led_only_where_their_state_partition_is_owned(pair):
    a, b = pair
    home = share_partition_home(str(T.topic_id), 0, PARTS)
    with pytest.raises(PartitionError) as err:
        await a.partitions.get("grp", T.topic_id, 0, "t")
    assert err.value.code == ErrorCode.not_leader_or_follower
    assert not a.partitions.leads(T.topic_id, 0)
    epoch = await a.persister.acquire(home)
    slot = await a.partitions.get("grp", T.topic_id, 0, "t")
    assert slot.partition.leader_epoch == epoch and a.partitions.leads(T.topic_id, 0)
    await a.persister.release(home)
    assert a.partitions.loaded("grp", T.topic_id, 0) is None and slot.dead
    b_epoch = await b.persister.acquire(home)
    assert b_epoch > epoch
    assert (await b.partitions.get("grp", T.topic_id, 0, "t")).partition.leader_epoch == b_epoch


async def test_group_administration_happens_at_the_coordinator_and_config_changes_are_forwarded(pair):
    a, _b = pair
    group = "grp"
    assert a.admin.describe_group(group).error == ErrorCode.not_coordinator
    with pytest.raises(AdminError) as err:
        await a.admin.describe_offsets(group, None)
    assert err.value.code == ErrorCode.not_coordinator

    sent = []

    class Peer:
        async def alter(self, group_id, changes, text):
            sent.append((group_id, {k: text(v) for k, v in changes.items()}))
            return 0, None

    a.admin.peer_configs = Peer()
    await a.admin.alter_configs(group, {"share.record.lock.duration.ms": 7000})
    assert sent == [(group, {"share.record.lock.duration.ms": "7000"})]
    with pytest.raises(AdminError) as err:  # a forwarded change that lands on a non-coordinator is not sent on
        await a.admin.alter_configs(group, {"share.record.lock.duration.ms": 7000}, forwarded=True)
    assert err.value.code == ErrorCode.not_coordinator
    assert group not in a.coordinator.groups, "no phantom group at a sidecar that does not coordinate it"
    # configs of groups coordinated elsewhere (tailed from the state topic) are described everywhere
    a.admin.remote_group_configs = {group: {"share.record.lock.duration.ms": "7000"}}
    described = {c.name: c.value for c in a.admin.describe_configs(group, ["share.record.lock.duration.ms"])}
    assert described == {"share.record.lock.duration.ms": "7000"}


async def test_a_heartbeat_that_outlives_the_coordinators_state_partition_answers_not_coordinator(pair):
    """A heartbeat waits for topic metadata after it checked that this sidecar coordinates the
    group; if the group's state partition is given up meanwhile (a handover, a lapsed lease), the
    answer is NOT_COORDINATOR, which clients retry at the new coordinator — never
    GROUP_ID_NOT_FOUND, which librdkafka and kshare's client treat as fatal (the nemesis schedule
    lost two of four consumers to it)."""
    import asyncio

    a, _b = pair
    group = "grp"
    home = group_home(group, PARTS)
    await a.persister.acquire(home)
    joined = await a.heartbeat(group)
    assert joined.error == ErrorCode.none
    waiting, go = asyncio.Event(), asyncio.Event()
    plain = a.groups.backend.describe_topics

    async def slow_metadata(names=None, stale_ok=False):
        waiting.set()
        await go.wait()
        return await plain(names, stale_ok)

    a.groups.backend.describe_topics = slow_metadata
    beat = asyncio.create_task(a.heartbeat(group, joined.member_id, joined.member_epoch))
    await waiting.wait()
    await a.persister.release(home)  # the group moves away while the heartbeat waits
    go.set()
    result = await beat
    assert result.error == ErrorCode.not_coordinator, result


async def test_a_load_that_fails_because_the_lease_lapsed_answers_not_leader(pair):
    """A share-partition load whose state write or read fails because this sidecar's lease lapsed
    meanwhile is refused with NOT_LEADER_OR_FOLLOWER, as everything a lapsed sidecar no longer
    leads — not with the write's COORDINATOR_NOT_AVAILABLE, which librdkafka reports to the
    application as an unexpected fetch error (a nemesis consumer died of it)."""
    from kshare_sidecar.persist.errors import CommitOutcomeUnknownError

    a, _b = pair
    home = share_partition_home(str(T.topic_id), 0, PARTS)
    await a.persister.acquire(home)

    async def lapsing_read(key, leader_epoch=None):
        a.persister.drop_all("lease lapsed")  # what the lease's expiry does, while the read waits
        raise CommitOutcomeUnknownError(f"state partition {home}: this sidecar's lease lapsed while the write was "
                                        f"in flight; its outcome is unknown")

    a.persister.read_one = lapsing_read
    with pytest.raises(PartitionError) as err:
        await a.partitions.get("grp", T.topic_id, 0, "t")
    assert err.value.code == ErrorCode.not_leader_or_follower, err.value
