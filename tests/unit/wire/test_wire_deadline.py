"""ReadDeadline: reads bounded by one timer per connection, re-armed when activity moved the
deadline on (wire/deadline.py)."""

from __future__ import annotations

import asyncio

import pytest

from kshare_sidecar.wire.deadline import ReadDeadline

pytestmark = pytest.mark.timeout(10)


async def _reading(deadlines, feed: bool):
    """Run reads with the given deadlines (offsets from now) in one task; return what each did."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    task: asyncio.Task | None = None
    bound = ReadDeadline(loop, lambda: task)
    outcomes: list[object] = []

    async def run() -> None:
        start = loop.time()
        for offset in deadlines:
            if feed:
                reader.feed_data(b"x")
            try:
                outcomes.append(await bound.read(reader, 10, start + offset))
            except TimeoutError:
                outcomes.append(("timeout", round(loop.time() - start, 2)))
                return

    task = asyncio.create_task(run())
    await task
    bound.cancel()
    return outcomes


async def test_many_reads_arm_one_timer(monkeypatch) -> None:
    loop = asyncio.get_running_loop()
    armed = []
    real = loop.call_at

    def counting(when, callback, *args, **kwargs):
        armed.append(when)
        return real(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    outcomes = await _reading([5 + i * 0.01 for i in range(200)], feed=True)
    assert outcomes == [b"x"] * 200
    assert len(armed) == 1  # deadlines only moved later: the first timer still bounds them all


async def test_an_earlier_deadline_rearms_the_timer() -> None:
    # a read with a later deadline, then one whose deadline is earlier (a frame started: the
    # shorter request.read.timeout.ms) and no data: it times out at its own deadline
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    task: asyncio.Task | None = None
    bound = ReadDeadline(loop, lambda: task)

    async def run():
        start = loop.time()
        reader.feed_data(b"a")
        await bound.read(reader, 10, start + 5.0)
        try:
            await bound.read(reader, 10, start + 0.1)
        except TimeoutError:
            return loop.time() - start
        return None

    task = asyncio.create_task(run())
    took = await task
    bound.cancel()
    assert took is not None and 0.09 <= took < 1.0


async def test_a_timer_that_fires_early_waits_for_the_moved_deadline() -> None:
    # the first read arms the timer at +0.1; it is answered; the second read's deadline is +0.4:
    # the timer fires at +0.1, finds the deadline moved, re-arms, and the read times out at +0.4
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    task: asyncio.Task | None = None
    bound = ReadDeadline(loop, lambda: task)

    async def run():
        start = loop.time()
        reader.feed_data(b"a")
        assert await bound.read(reader, 10, start + 0.1) == b"a"
        try:
            await bound.read(reader, 10, start + 0.4)
        except TimeoutError:
            return loop.time() - start
        return None

    task = asyncio.create_task(run())
    took = await task
    bound.cancel()
    assert took is not None and 0.38 <= took < 1.5


async def test_a_cancel_from_elsewhere_is_not_a_timeout() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    task: asyncio.Task | None = None
    bound = ReadDeadline(loop, lambda: task)
    task = asyncio.create_task(bound.read(reader, 10, loop.time() + 5))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    bound.cancel()
