"""A planned takeover waits for whoever holds the state partition *now* (cluster/membership.py
``_holder``, cluster/state_tail.py ``wait_released``), not for the holder the group's map claimed.

Seen in the nemesis: the map claimed node 2 at owner epoch 1, but node 2 had since taken the
partition back at epoch 3 and served it; the new owner logged "handed over by node 2 (owner epoch
1) after 0.00 s" and fenced it with no handover mark (the in-flight delivery counts unwritten), and
node 2 took it back again 0.36 s later. Likewise a wait for epoch 13 ended at once on a record of
epoch 14 written by the same, still serving, holder."""

from __future__ import annotations

import asyncio

from kshare_sidecar.backend.clients import BackendClients
from kshare_sidecar.cluster.assign import ClusterMap
from kshare_sidecar.cluster.state_tail import GroupConfigTail
from kshare_sidecar.persist import codec

from tests.unit.cluster.test_cluster_lease import HOME, PARTS, pair  # noqa: F401 - the fixture

NODE2 = {"PLAINTEXT": ("127.0.0.1", 9002)}


def _tail() -> GroupConfigTail:
    return GroupConfigTail(clients=BackendClients("x:1"), topic="s", partitions=PARTS)


def _owner(tail: GroupConfigTail, epoch: int, node: int, released: bool = False) -> None:
    tail._read(HOME, codec.owner_key(HOME), codec.encode_owner(epoch, node, released=released))


async def test_the_holder_is_the_newer_of_the_claim_and_the_owner_record(pair):  # noqa: F811
    a, _b, _log, _clock = pair
    m = a.membership
    m.tail = _tail()
    a.view.update(ClusterMap(2, {1: a.view.endpoints, 2: NODE2}, {HOME: 1}, {HOME: (2, 1)}))
    assert m._holder(HOME) == (2, 1)  # nothing read yet: the claim
    _owner(m.tail, 3, 2)  # node 2 took it back since, at epoch 3, and holds it
    assert m._holder(HOME) == (2, 3)
    _owner(m.tail, 3, 2, released=True)
    assert m._holder(HOME) is None
    _owner(m.tail, 0, 2)  # an older record than the claim says nothing new
    assert m._holder(HOME) == (2, 1)


async def test_a_newer_record_of_a_holder_that_still_holds_does_not_end_the_wait():
    tail, members = _tail(), {2, 3}
    _owner(tail, 14, 2)  # waiting for epoch 13; node 2 wrote 14 and serves on
    waiter = asyncio.create_task(tail.wait_released(HOME, 13, 5, holds=lambda n: n in members))
    await asyncio.sleep(0.02)
    assert not waiter.done()
    _owner(tail, 15, 3)  # taken by another member meanwhile: wait for that one
    await asyncio.sleep(0.02)
    assert not waiter.done()
    _owner(tail, 15, 3, released=True)
    assert await asyncio.wait_for(waiter, 1) is True
    _owner(tail, 16, 7)  # a later owner that is no member (crashed, expelled) holds nothing
    assert await tail.wait_released(HOME, 15, 0.01, holds=lambda n: n in members) is True
    _owner(tail, 17, 2)
    assert await tail.wait_released(HOME, 15, 0.01, holds=lambda n: n in members) is False


async def test_a_takeover_waits_for_the_current_holders_mark(pair):  # noqa: F811
    a, _b, _log, clock = pair
    m = a.membership
    m.renewed(clock.now)
    m.tail = _tail()
    a.view.update(ClusterMap(2, {1: a.view.endpoints, 2: NODE2}, {HOME: 1}, {HOME: (2, 1)}))
    m.target, m._confirmed = {HOME}, True
    _owner(m.tail, 3, 2)  # the claim is stale: node 2 holds it at epoch 3
    takeover = asyncio.create_task(m._take_over(HOME))
    await asyncio.sleep(0.05)
    assert not takeover.done() and not a.persister.owns(HOME)
    _owner(m.tail, 3, 2, released=True)
    await asyncio.wait_for(takeover, 2)
    assert a.persister.owns(HOME)
