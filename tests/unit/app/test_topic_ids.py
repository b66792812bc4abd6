"""Topic IDs minted for backends without them (Redpanda) are kept with the share state."""

from __future__ import annotations

import uuid

from kshare_sidecar.persist.memory import MemoryLog, MemoryPersister
from kshare_sidecar.backend.topic_ids import PersisterTopicIds


async def test_minted_ids_are_stable_across_calls_and_restarts():
    log = MemoryLog(1)
    first = MemoryPersister(log=log)
    await first.start()
    ids = PersisterTopicIds(first)
    a = await ids.get_or_create("orders")
    assert isinstance(a, uuid.UUID) and await ids.get_or_create("orders") == a
    assert await ids.get_or_create("payments") != a
    await first.close()
    restarted = MemoryPersister(log=log)  # a new sidecar process reading the same state
    await restarted.start()
    assert await PersisterTopicIds(restarted).get_or_create("orders") == a
    await restarted.close()


async def test_forget_is_compare_and_delete():
    persister = MemoryPersister()
    await persister.start()
    ids = PersisterTopicIds(persister)
    old = await ids.get_or_create("orders")
    await ids.forget("orders", uuid.UUID(int=1))  # not the current id: nothing happens
    assert await ids.get_or_create("orders") == old
    await ids.forget("orders", old)  # the topic was deleted: a recreated one gets a new id
    assert await ids.get_or_create("orders") != old
    await persister.close()
