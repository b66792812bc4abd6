"""A parked ShareFetch waits in the backend (a long poll) only for offsets at or past the end of
the log as the last read saw it. Below it the records are there, and what keeps a fetch from them
(keys in flight under key ordering, the window) changes only through the share-partition, which
wakes the fetch itself; a poll there came back at once with bytes already read, and with a backend
connection per long poll a key-ordered partition's parked fetches spun through the backend
(benchmarks/ordering.py, 100 keys: 224 backend Fetches per run before the connections, 407 after)."""

from __future__ import annotations

from tests.unit.share.test_delayed_fetch_clock import delayed, parts  # noqa: F401  (fixture)
from tests.unit.share.test_share_service import TP


async def test_no_long_poll_below_the_log_end_one_at_it(parts):  # noqa: F811
    cache, backend, clock = parts
    fetch = delayed(cache, backend, clock, max_wait_ms=50)
    slot = await cache.slot_for("g", *TP)
    offset = slot.partition.next_fetch_offset()
    assert offset is not None and slot.partition.can_acquire()

    slot.log_end = offset + 10  # a read saw ten records from here on: they are in the log
    await fetch._wait([slot], 20)
    assert backend.polls == 0

    slot.log_end = offset  # the fetch has reached the log end: wait there for new records
    await fetch._wait([slot], 20)
    assert backend.polls == 1
