"""Which parked fetch an acknowledgement wakes (``Slot.wake_acquirers``): the oldest, when
anything can be acquired (a record made available again, or room for the window to grow); a
fetch that gave up (its future done) is passed over. ``Slot.wake`` still wakes every one."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kshare_sidecar.backend.types import BatchInfo
from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.share.engine.config import ShareConfig
from kshare_sidecar.share.engine.partition import SharePartition
from kshare_sidecar.share.engine.types import AckBatch
from kshare_sidecar.share.slot import Slot

RELEASE = 2  # AcknowledgeType


def batch(first: int, last: int) -> BatchInfo:
    return BatchInfo(first, last, -1, False, False, 0, 0)


def slot_with_window(window: int, acquired: int) -> Slot:
    """A share-partition whose window (cap ``window``) holds ``acquired`` records acquired by "m"."""
    sp = SharePartition(ShareConfig(max_record_locks=window), lambda: 0, start_offset=0)
    got = sp.acquire("m", [batch(0, acquired - 1)], acquired)
    assert sum(a.last_offset - a.first_offset + 1 for a in got) == acquired
    return Slot(SharePartitionKey("g", str(uuid.uuid4()), 0), "t", sp)


async def park(slot: Slot, n: int) -> list[asyncio.Future[None]]:
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(n)]
    for fut in futures:
        slot.waiters[fut] = None
    return futures


@pytest.mark.asyncio
async def test_full_window_wakes_the_oldest_fetch_once_a_record_is_available() -> None:
    s = slot_with_window(window=10, acquired=10)
    futures = await park(s, 5)
    assert s.partition.free_locks == 0
    s.wake_acquirers()  # nothing available, no room: nobody
    assert not any(f.done() for f in futures)
    assert s.partition.acknowledge("m", [AckBatch(0, 1, [RELEASE])]) == 0  # two records available again
    assert s.partition.can_acquire()
    futures[0].cancel()  # gave up meanwhile: passed over, not counted
    s.wake_acquirers()
    assert [f.done() and not f.cancelled() for f in futures] == [False, True, False, False, False]
    assert list(s.waiters) == futures[2:]


@pytest.mark.asyncio
async def test_window_with_room_wakes_one_to_read_on() -> None:
    s = slot_with_window(window=100, acquired=10)
    futures = await park(s, 3)
    s.wake_acquirers()  # no record available, but the window may grow: one fetch reads the log on
    assert [f.done() for f in futures] == [True, False, False]
    s.wake_acquirers()
    assert [f.done() for f in futures] == [True, True, False]


@pytest.mark.asyncio
async def test_wake_still_wakes_every_parked_fetch() -> None:
    s = slot_with_window(window=10, acquired=10)
    futures = await park(s, 3)
    s.wake()
    assert all(f.done() for f in futures) and not s.waiters
