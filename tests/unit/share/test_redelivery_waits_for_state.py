"""Records a lock expiry made available go out again only once that expiry is durable: otherwise
a redelivery counts them up in memory alone, and a leader that took over without the write would
read them as never delivered and count them down (the nemesis saw it with a backend broker
isolated)."""

from __future__ import annotations

import asyncio

from kshare_sidecar.persist.errors import NotReadyError

from tests.unit.share.test_idle_eviction import KEY, acquired, env, fetch  # noqa: F401 - env is a fixture


async def settle(parts) -> None:
    """Let the queued state writes (lock expiry) run."""
    for _ in range(5):
        if parts._background:
            await asyncio.gather(*parts._background, return_exceptions=True)
        await asyncio.sleep(0)


async def test_records_whose_expiry_was_not_written_are_not_handed_out_until_it_is(env):
    svc, parts, clock, _backend, _config, persister = env
    assert acquired(await fetch(svc, "m1", 0, max_records=10)) == [(0, 9, 1)]
    write, failing = persister.write, [True]

    async def flaky(key, state, epoch):
        if failing[0]:
            raise NotReadyError("the state partition's leader is cut off")
        return await write(key, state, epoch)

    persister.write = flaky
    clock.now += 30_001  # the lock runs out; its write fails
    parts._expire_due()
    await settle(parts)
    slot = parts.slots[KEY]
    assert slot.dirty

    assert acquired(await fetch(svc, "m2", 0, max_records=10)) == []  # not while the expiry is memory's alone
    assert acquired(await fetch(svc, "m2", 1, max_records=10)) == []  # nor at the next try, still failing

    failing[0] = False  # the backend answers again: the fetch writes the expiry, then hands the records out
    assert acquired(await fetch(svc, "m2", 2, max_records=10)) == [(0, 9, 2)]
    assert not slot.dirty
    durable = (await persister.read([KEY]))[KEY]
    assert [(b.first_offset, b.last_offset, b.delivery_count) for b in durable.state_batches] == [(0, 9, 1)]


async def test_a_queued_expiry_write_is_awaited_not_repeated(env):
    svc, parts, clock, _backend, _config, persister = env
    assert acquired(await fetch(svc, "m1", 0, max_records=10)) == [(0, 9, 1)]
    writes, write = [], persister.write

    async def counted(key, state, epoch):
        writes.append(state)
        return await write(key, state, epoch)

    persister.write = counted
    clock.now += 30_001
    parts._expire_due()  # the expiry's write is queued, not yet run
    assert parts.slots[KEY].unsaved == 1
    assert acquired(await fetch(svc, "m2", 0, max_records=10)) == [(0, 9, 2)]
    assert len(writes) == 1  # the fetch waited for the queued write; it did not write again
