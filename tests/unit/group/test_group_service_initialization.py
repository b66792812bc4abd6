"""GroupService performs the share-partition initialization the coordinator asks for:
before answering the heartbeat that subscribed to a topic, for every partition of it; the
partitions are assigned at the next heartbeat, one group epoch later (Kafka 4.3.1's epochs); a
failed initialization does not fail the heartbeat and is retried; a restart keeps what was
initialized. Memory persister and an in-memory backend (tests/unit/wire/stack.py)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.assignors.simple import SimpleAssignor
from kshare_sidecar.group.assign import assign_with
from kshare_sidecar.group.coordinator import ShareGroupCoordinator
from kshare_sidecar.persist.errors import PersistError
from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.persist.records import SharePartitionKey
from kshare_sidecar.group.service import GroupService
from kshare_sidecar.share.cache import SharePartitionCache
from tests.unit.wire.stack import TOPICS, MemoryBackend

ORDERS = TOPICS[0]  # 3 partitions


def service(persister) -> GroupService:
    coordinator = ShareGroupCoordinator(assign=assign_with(SimpleAssignor()), clock=lambda: 0)
    partitions = SharePartitionCache(persister=persister, backend=MemoryBackend(), clock=lambda: 0,
                                       group_config=lambda g: None)
    return GroupService(coordinator=coordinator, partitions=partitions, backend=MemoryBackend(), persister=persister)


async def hb(groups, epoch, topics=None, member="m"):
    return await groups.heartbeat(group_id="g", member_id=member, member_epoch=epoch, rack_id=None,
                                  subscribed_topic_names=topics, client_id="c", client_host="h")


@pytest.fixture
async def persister():
    p = MemoryPersister()
    await p.start()
    yield p
    await p.close()


async def test_a_join_initializes_every_partition_and_the_next_heartbeat_assigns_them(persister):
    groups = service(persister)
    join = await hb(groups, 0, ["orders"])
    assert (join.error, join.member_epoch, join.assignment) == (ErrorCode.none, 2, {})
    keys = [SharePartitionKey("g", str(ORDERS.topic_id), p) for p in range(3)]
    states = await persister.read(keys)
    assert all(not isinstance(v, Exception) and v.start_offset == -1 for v in states.values())  # unset
    assert persister.get_group("g").initialized == {str(ORDERS.topic_id): (0, 1, 2)}
    nxt = await hb(groups, 2)
    assert (nxt.member_epoch, nxt.assignment) == (3, {ORDERS.topic_id: frozenset({0, 1, 2})})


async def test_a_failed_initialization_answers_the_heartbeat_and_is_retried(persister, monkeypatch):
    groups = service(persister)
    real = persister.initialize_many
    failures = {"left": 1}

    async def flaky(items):
        items = list(items)
        out = await real([it for it in items if it.key.partition != 1 or not failures["left"]])
        for it in items:
            if it.key.partition == 1 and failures["left"]:
                failures["left"] -= 1
                out[it.key] = PersistError("state topic unavailable")
        return out

    monkeypatch.setattr(persister, "initialize_many", flaky)
    join = await hb(groups, 0, ["orders"])
    assert join.error == ErrorCode.none
    assert groups.coordinator.initialized_partitions("g") == {ORDERS.topic_id: frozenset({0, 2})}
    second = await hb(groups, 2)  # assigns what is initialized, asks again for partition 1
    assert second.assignment == {ORDERS.topic_id: frozenset({0, 2})}
    assert groups.coordinator.initialized_partitions("g") == {ORDERS.topic_id: frozenset({0, 1, 2})}
    third = await hb(groups, second.member_epoch)
    assert third.assignment == {ORDERS.topic_id: frozenset({0, 1, 2})}


async def test_a_restarted_sidecar_assigns_what_was_initialized_at_the_rejoin(persister):
    await hb(service(persister), 0, ["orders"])
    again = service(persister)
    assert again.restore() == 1
    # the member is restored (group/persisted.py): its next heartbeat is assigned what was
    # initialized before the restart, one epoch on, exactly as without the restart
    nxt = await hb(again, 2)
    assert (nxt.error, nxt.member_epoch, nxt.assignment) == (ErrorCode.none, 3, {ORDERS.topic_id: frozenset({0, 1, 2})})
    # a member that joins afterwards shares them, without a new initialization
    join = await hb(again, 0, ["orders"], member="m2")
    assert join.error == ErrorCode.none and not join.initialize
