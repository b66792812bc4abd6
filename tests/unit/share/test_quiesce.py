"""A stopping sidecar answers what its parked ShareFetches acquired instead of cancelling them
(share/leadership.py ``quiesce``): a fetch cancelled with records acquired would count a delivery
no consumer saw — a poison record then reaches its delivery limit one delivery early (the
nemesis's planned-handover run saw counts 1, 3, 4, 5). And records a fetch acquired before its
share-partition's leadership moved are answered, not replaced by the error."""

from __future__ import annotations

import asyncio
import uuid

from kio.schema.errors import ErrorCode

from kshare_sidecar.share.delayed_fetch import PartitionOut, _fail
from kshare_sidecar.share.leadership import PartitionError
from kshare_sidecar.share.manager import FetchParams

from tests.unit.share.test_idle_eviction import TOPIC, acquired, env, fetch  # noqa: F401 - env is a fixture


async def test_a_parked_fetch_answers_its_records_when_the_sidecar_stops(env):
    svc, parts, *_ = env
    params = FetchParams(max_wait_ms=30_000, min_bytes=1 << 30, max_records=500, batch_size=500)
    task = asyncio.ensure_future(svc.share_fetch(conn_id=1, group_id="g", member_id="m1", epoch=0, params=params,
                                                 topics=[(TOPIC.topic_id, 0, [])], forgotten=[]))
    await asyncio.sleep(0.05)
    assert not task.done(), "parked: MinBytes not reached"
    parts.quiesce()
    out = await asyncio.wait_for(task, 2)
    assert sum(last - first + 1 for first, last, _ in acquired(out)) == 30  # the whole log, count 1
    assert {count for *_, count in acquired(out)} == {1}


async def test_a_stopping_sidecar_acquires_nothing_and_does_not_park(env):
    svc, parts, *_ = env
    parts.quiesce()
    out = await asyncio.wait_for(fetch(svc, "m1", 0, max_records=10, max_wait_ms=30_000), 2)
    assert acquired(out) == []


def test_records_acquired_before_a_move_are_answered_not_replaced_by_the_error():
    tp = (uuid.uuid4(), 0)
    out = {tp: PartitionOut(*tp, acquired=["acquired"])}  # type: ignore[list-item]
    _fail(out, tp, PartitionError(ErrorCode.not_leader_or_follower, "led by another sidecar"))
    assert out[tp].error == ErrorCode.none and out[tp].acquired == ["acquired"]
    other = (uuid.uuid4(), 1)
    _fail(out, other, PartitionError(ErrorCode.not_leader_or_follower, "led by another sidecar"))
    assert out[other].error == ErrorCode.not_leader_or_follower
