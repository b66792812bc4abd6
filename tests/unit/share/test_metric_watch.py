"""The share-partitions a /metrics scrape looks at (share/watch.py): those asked for since they
were last found idle, never one marked again after the scrape looked."""

from __future__ import annotations

import asyncio

from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.share.engine.config import ShareConfig
from kshare_sidecar.share.engine.partition import SharePartition
from kshare_sidecar.share.slot import Slot
from kshare_sidecar.share.watch import MetricWatch


class Cache(MetricWatch):
    def __init__(self) -> None:
        self.slots = {}
        self._init_watch()


def _slot(cache: Cache, p: int) -> Slot:
    key = SharePartitionKey("g", "t", p)
    slot = cache.slots[key] = Slot(key, "topic", SharePartition(ShareConfig(), lambda: 0, start_offset=0))
    return slot


async def test_a_scrape_forgets_what_it_found_idle_unless_it_was_asked_for_again() -> None:
    cache = Cache()
    a, b, c = (_slot(cache, p) for p in range(3))
    for slot in (a, b, c):
        cache.watch(slot)
    seen = cache.watched_slots()
    assert [k.partition for k, _s, _m in seen] == [0, 1, 2]
    cache.watch(b)  # asked for after the scrape looked: it may have changed since
    del cache.slots[c.key]  # dropped (idle eviction): forgotten too
    cache.forget_idle([(k, m) for k, _s, m in seen])
    await asyncio.sleep(0)  # applied on the event loop
    assert list(cache.watched) == [b.key]
    assert [(k, s) for k, s, _m in cache.watched_slots()] == [(b.key, b)]


async def test_forgetting_from_another_thread_is_applied_on_the_loop() -> None:
    cache = Cache()
    a = _slot(cache, 0)
    cache.watch(a)
    seen = [(k, m) for k, _s, m in cache.watched_slots()]
    await asyncio.to_thread(cache.forget_idle, seen)
    await asyncio.sleep(0)
    assert cache.watched == {}
