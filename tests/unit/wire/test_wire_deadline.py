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


async def _second_read_times_out(first: float, second: float) -> float | None:
    """A read answered (deadline ``first`` from now), then one with no data (deadline ``second``):
    when the second raised TimeoutError, in seconds from the start."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    task: asyncio.Task | None = None
    bound = ReadDeadline(loop, lambda: task)

    async def run() -> float | None:
        start = loop.time()
        reader.feed_data(b"a")
        assert await bound.read(reader, 10, start + first) == b"a"
        try:
            await bound.read(reader, 10, start + second)
        except TimeoutError:
            return loop.time() - start
        return None

    task = asyncio.create_task(run())
    try:
        return await task
    finally:
        bound.cancel()


async def test_an_earlier_deadline_rearms_the_timer() -> None:
    # the second read's deadline is earlier (a frame started: the shorter request.read.timeout.ms)
    took = await _second_read_times_out(5.0, 0.1)
    assert took is not None and 0.09 <= took < 1.0


async def test_a_timer_that_fires_early_waits_for_the_moved_deadline() -> None:
    # armed at +0.1 by the first read; the second read's deadline is +0.4: the timer fires at
    # +0.1, finds the deadline moved, re-arms, and the read times out at +0.4
    took = await _second_read_times_out(0.1, 0.4)
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
