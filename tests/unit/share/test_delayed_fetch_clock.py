"""DelayedShareFetch's MaxWaitMs runs out on the clock it is handed (the sidecar's one
timeutil.Clock), not on the process's: a fake clock decides when a parked fetch is over."""

from __future__ import annotations

import asyncio
import time

import pytest

from kshare_sidecar.backend.types import FetchResult
from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.share.cache import SharePartitionCache
from kshare_sidecar.share.delayed_fetch import DelayedShareFetch, FetchParams
from kshare_sidecar.share.engine.sessions import ShareSessionCache
from kshare_sidecar.share.log_reader import ShareLogReader

from tests.unit.share.test_idle_eviction import Clock
from tests.unit.share.test_share_service import CONFIG, TOPIC, TP


class EmptyLog:
    """A partition with no records; a long-poll waits until it is cancelled (no new data ever)."""

    def __init__(self) -> None:
        self.polls = 0

    async def resolve_topic_id(self, topic_id):
        return TOPIC if topic_id == TOPIC.topic_id else None

    async def list_offsets(self, topic, partition, spec):
        return 0

    async def fetch(self, topic, partition, offset, *, max_bytes, max_wait_ms=0, isolation_level=0):
        if max_wait_ms:
            self.polls += 1
            await asyncio.Event().wait()
        return FetchResult(b"", (), 0, 0, 0)


@pytest.fixture
async def parts():
    persister = MemoryPersister()
    await persister.start()
    backend = EmptyLog()
    clock = Clock()
    cache = SharePartitionCache(persister=persister, backend=backend, clock=clock, group_config=lambda g: CONFIG,
                                epoch=5)
    cache.start()
    yield cache, backend, clock
    await cache.close()
    await persister.close()


def delayed(cache, backend, clock, max_wait_ms: int) -> DelayedShareFetch:
    sessions = ShareSessionCache(10)
    session, _ = sessions.open(("g", "m1"), 1)
    session.partitions.add(TP)
    return DelayedShareFetch(session, "g", "m1", FetchParams(max_wait_ms=max_wait_ms), sessions=sessions,
                             partitions=cache, reader=ShareLogReader(backend), read_committed=False, clock=clock)


async def test_parked_fetch_ends_when_the_clock_passes_max_wait(parts):
    cache, backend, clock = parts
    fetch = delayed(cache, backend, clock, max_wait_ms=60_000)  # a minute of the process's time would hang
    parked = asyncio.Event()
    started = time.monotonic()
    task = asyncio.create_task(fetch.run(on_park=parked.set))
    await asyncio.wait_for(parked.wait(), 5)
    slot = await cache.slot_for("g", *TP)
    assert backend.polls == 1  # parked on a long-poll and the share-partition's waiters

    clock.now += 59_999  # not yet: woken, it finds nothing and parks again
    slot.wake()
    while backend.polls < 2:
        await asyncio.sleep(0.001)
    assert not task.done()

    clock.now += 1  # MaxWaitMs is up on the clock: the next look answers, empty
    slot.wake()
    assert await asyncio.wait_for(task, 5) == {}
    assert time.monotonic() - started < 5


async def test_no_park_when_the_clock_is_past_the_deadline_at_the_first_look(parts):
    cache, backend, clock = parts
    fetch = delayed(cache, backend, clock, max_wait_ms=500)
    clock.now += 500
    parked: list[bool] = []
    assert await asyncio.wait_for(fetch.run(on_park=lambda: parked.append(True)), 5) == {}
    assert parked == [] and backend.polls == 0
