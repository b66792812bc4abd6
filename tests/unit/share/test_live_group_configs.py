"""A group config changed while share-partitions are loaded applies to them at once, as Kafka 4.4's
SharePartition reads each config on every use (ShareGroupConfigProvider): the service over the real
engine, the memory persister and the in-memory log of test_share_service."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.share.cache import SharePartitionCache
from kshare_sidecar.share.manager import SharePartitionManager
from kshare_sidecar.share.engine.extended import ExtendedSharePartition
from kshare_sidecar.share.engine.sessions import ShareSessionCache
from kshare_sidecar.share.engine.types import AckBatch
from tests.unit.share.test_share_service import CONFIG, TP, MemoryLog, clock, fetch

import pytest


@pytest.fixture
async def live():
    """A service whose group configs can be changed (``configs``), like the admin path does."""
    configs = dict(CONFIG, **{"share.renew.acknowledge.enable": True})
    persister = MemoryPersister()
    await persister.start()
    backend = MemoryLog(batches=3)
    parts = SharePartitionCache(persister=persister, backend=backend, clock=clock,
                                  group_config=lambda g: configs, epoch=5)
    parts.start()
    service = SharePartitionManager(sessions=ShareSessionCache(10), partitions=parts, backend=backend,
                           group_config=lambda g: configs)
    yield service, configs
    await parts.close()
    await persister.close()


async def release(service, epoch: int, a) -> None:
    out = await service.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=epoch,
                                          topics=[(TP[0], TP[1], [AckBatch(a.first_offset, a.last_offset, (2,))])])
    assert [p.error for p in out.partitions] == [ErrorCode.none]


def _slot(service):
    return service.partitions.loaded("g", *TP)


async def test_lock_duration_limit_and_cap_reach_a_loaded_share_partition(live):
    service, configs = live
    out = await fetch(service, "m1", 0, max_records=10)
    [a] = out.partitions[0].acquired
    slot = _slot(service)
    before = slot.partition.next_lock_deadline()
    configs.update({"share.record.lock.duration.ms": 120_000, "share.delivery.count.limit": 2,
                    "share.partition.max.record.locks": 100})
    assert service.partitions.reconfigure_group("g") == 1
    sp = slot.partition
    assert (sp.config.record_lock_duration_ms, sp.config.delivery_count_limit, sp.config.max_record_locks) == \
        (120_000, 2, 100)
    assert sp.next_lock_deadline() == before  # a lock already taken keeps its deadline
    await release(service, 1, a)
    out = await fetch(service, "m1", 2, max_records=10)
    [b] = out.partitions[0].acquired  # the released records again: delivery 2 of a limit of 2
    assert (b.first_offset, b.delivery_count) == (a.first_offset, 2)
    deadline = sp.next_lock_deadline()
    assert deadline is not None and deadline - clock() > 60_000  # the new lock duration
    await release(service, 3, b)  # released at the new limit: archived, never delivered a third time
    out = await fetch(service, "m1", 4, max_records=10)
    assert all(x.first_offset > b.last_offset for x in out.partitions[0].acquired)
    assert service.partitions.reconfigure_group("g") == 0  # nothing changed: nothing done


async def test_renew_disabled_at_the_group_fails_the_partition_acknowledgement(live):
    service, configs = live
    out = await fetch(service, "m1", 0, max_records=10)
    [a] = out.partitions[0].acquired
    configs["share.renew.acknowledge.enable"] = False
    out = await service.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=1, is_renew=True,
                                          topics=[(TP[0], TP[1], [AckBatch(a.first_offset, a.last_offset, (4,))])])
    assert [p.error for p in out.partitions] == [ErrorCode.invalid_record_state]
    configs["share.renew.acknowledge.enable"] = True
    out = await service.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=2, is_renew=True,
                                          topics=[(TP[0], TP[1], [AckBatch(a.first_offset, a.last_offset, (4,))])])
    assert [p.error for p in out.partitions] == [ErrorCode.none]


async def test_extensions_switched_on_for_a_loaded_plain_share_partition(live):
    service, configs = live
    await fetch(service, "m1", 0, max_records=10)
    slot = _slot(service)
    assert not isinstance(slot.partition, ExtendedSharePartition)
    configs.update({"share.release.backoff.ms": 500, "share.release.backoff.max.ms": 1000})
    assert service.partitions.reconfigure_group("g") == 1
    assert isinstance(slot.partition, ExtendedSharePartition) and slot.partition.ext.backoff_ms == 500
    configs["share.release.backoff.ms"] = 0
    service.partitions.reconfigure_group("g")
    assert not slot.partition.ext.enabled
