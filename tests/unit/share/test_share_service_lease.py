"""A single sidecar's lease (cluster/lease.py, app.py ``single_lease``, backend/backend.py's health
probe) as the share APIs answer it, without sockets: the service over the real engine, the memory
persister and an in-memory log.

Past the lease nothing is handed out or acknowledged (NOT_LEADER_OR_FOLLOWER, the answer of a
broker that no longer leads), nothing is asked of the backend (it may be what is cut off), the
records already held keep their state, and a renewal — the backend answering the probe again —
serves again with the delivery counts kept."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.app import single_lease
from kshare_sidecar.cluster.lease import Lease
from kshare_sidecar.config import load_config
from kshare_sidecar.backend.backend import Backend
from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.share.cache import PartitionError, SharePartitionCache
from kshare_sidecar.share.manager import SharePartitionManager
from kshare_sidecar.share.engine.sessions import ShareSessionCache
from kshare_sidecar.share.engine.types import AckBatch

from tests.unit.share.test_share_service import CONFIG, TOPIC, MemoryLog, clock, fetch


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


class CountingLog(MemoryLog):
    """The in-memory log counting what is asked of it (a lapsed sidecar must ask nothing)."""

    def __init__(self, batches: int) -> None:
        super().__init__(batches)
        self.lookups = 0
        self.reads = 0

    async def resolve_topic_id(self, topic_id):
        self.lookups += 1
        return await super().resolve_topic_id(topic_id)

    async def fetch(self, *args, **kwargs):
        self.reads += 1
        return await super().fetch(*args, **kwargs)


@pytest.fixture
async def leased():
    persister = MemoryPersister()
    await persister.start()
    backend = CountingLog(batches=3)
    parts = SharePartitionCache(persister=persister, backend=backend, clock=clock, group_config=lambda g: CONFIG,
                                  epoch=5)
    lease_clock = Clock()
    parts.lease = Lease(8000, lease_clock)
    parts.lease.renew(lease_clock.now)
    parts.start()
    service = SharePartitionManager(sessions=ShareSessionCache(10), partitions=parts, backend=backend,
                           group_config=lambda g: CONFIG)
    yield service, backend, lease_clock
    await parts.close()
    await persister.close()


async def test_past_the_lease_nothing_is_handed_out_acknowledged_or_asked_of_the_backend(leased):
    svc, backend, lease_clock = leased
    out = await fetch(svc, "m1", 0)
    assert [(a.first_offset, a.last_offset) for a in out.partitions[0].acquired] == [(0, 29)]

    lease_clock.now += 8.0  # the backend has not answered for the whole lease
    assert not svc.partitions.serving and not svc.partitions.leads(TOPIC.topic_id, 0)
    lookups, reads = backend.lookups, backend.reads
    out = await fetch(svc, "m2", 0, conn=2)
    [part] = out.partitions
    assert part.error == ErrorCode.not_leader_or_follower and not part.acquired and not part.records
    acked = await svc.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=1,
                                        topics=[(TOPIC.topic_id, 0, [AckBatch(0, 9, (1,))])])
    assert [p.error for p in acked.partitions] == [ErrorCode.not_leader_or_follower]
    assert (backend.lookups, backend.reads) == (lookups, reads)  # answered from memory, at once
    with pytest.raises(PartitionError) as err:
        await svc.partitions.get("g", TOPIC.topic_id, 0, TOPIC.name)
    assert err.value.code == ErrorCode.not_leader_or_follower and "lease" in str(err.value)

    slot = svc.partitions.loaded("g", TOPIC.topic_id, 0)
    assert slot is not None and slot.partition.spso == 0  # the refused acknowledgement changed nothing

    lease_clock.now += 1.0
    svc.partitions.lease.renew(lease_clock.now - 0.2)  # the probe answered again
    assert svc.partitions.serving
    acked = await svc.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=2,
                                        topics=[(TOPIC.topic_id, 0, [AckBatch(0, 9, (1,))])])
    assert acked.error == ErrorCode.none and [p.error for p in acked.partitions] == [ErrorCode.none]
    assert svc.partitions.loaded("g", TOPIC.topic_id, 0).partition.spso == 10


async def test_a_lease_that_runs_out_during_the_log_read_hands_nothing_out(leased):
    """The read is an await: the lease may run out in the middle of it. What was read then is not
    acquired (nobody could account for it), and the records stay available, their count unspent."""
    svc, backend, lease_clock = leased
    real = backend.fetch

    async def slow_read(*args, **kwargs):
        lease_clock.now += 9.0  # the backend answered this read, but only after the lease ran out
        return await real(*args, **kwargs)

    backend.fetch = slow_read
    out = await fetch(svc, "m1", 0, max_wait_ms=0)
    assert all(not p.acquired for p in out.partitions)
    backend.fetch = real
    svc.partitions.lease.renew(lease_clock.now)
    taken = await fetch(svc, "m2", 0, conn=2)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in taken.partitions[0].acquired] == [(0, 29, 1)]


def test_a_single_sidecars_lease_is_the_session_less_the_margin_and_starts_renewed():
    cfg = load_config(env={}, overrides={"bootstrap.servers": "x:1"})
    lease = single_lease(cfg)
    cl = cfg.cluster
    assert lease.valid() and not lease.lapsed
    assert lease.duration_s * 1000 == cl.session_timeout_ms - max(cl.session_timeout_ms // 5,
                                                                   2 * cl.heartbeat_interval_ms)


async def test_the_health_probe_renews_the_lease_from_its_send_time_and_only_when_answered():
    import time

    backend = Backend("x:1")
    backend.lease = Lease(8000, time.monotonic)
    answers = ["ok", "down", "ok"]
    entered: list[float] = []

    async def metadata(names):
        if not answers:
            await asyncio.Event().wait()  # the fourth probe: still waiting when the test ends
        entered.append(time.monotonic())
        answer = answers.pop(0)
        await asyncio.sleep(0.02)  # answered (or failed) a little after it was sent
        if answer == "down":
            raise OSError("connection refused")

    backend._metadata = metadata
    task = asyncio.create_task(backend._watch_health(up_every_s=0, down_every_s=0))
    try:
        await asyncio.wait_for(_until(lambda: not answers and backend.lease.renewals == 2), 5)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert backend.lease.renewals == 2  # the failed probe renewed nothing
    # the third probe's send time (read before the request), not the time its answer came
    assert entered[1] < backend.lease.renewed_at <= entered[2]


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.005)
