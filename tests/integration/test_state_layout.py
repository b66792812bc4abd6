"""Moving an older build's state-topic layout home (persist/layout.py) on Kafka 3.9.

A single sidecar of an older build placed share-partitions by the whole key (pinned here with
``placement="key"``). The move is SIGKILLed (a real process that kills itself after its n-th move commit) in each
of its phases — among the copies, among the tombstones, among the layout records — and after every
kill the state topic itself still holds every share-partition's state; then two cluster members
start on it together and serve every state from its topic-partition home.

Run: python -m pytest tests/integration/test_state_layout.py -m kafka -s
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from kshare_sidecar.persist import (
    DeliveryState,
    GroupRecord,
    InitializeItem,
    PartitionState,
    SharePartitionKey,
    StateBatch,
    WriteItem,
)
from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_LAYOUT, KIND_PARTITION
from kshare_sidecar.persist.layout import plan_moves
from kshare_sidecar.persist.layout import share_partition_home, state_partition_for
from kshare_sidecar.persist.replay import replay_sink
from kshare_sidecar.persist.records import RecoveryStats
from kshare_sidecar.persist.topic import TopicPersister, TopicSettings
from tests.support import read_state_topic

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PARTS = 8
TIDS = ["5f0c7f5e-3a43-4a83-9a55-6a2b9bd0f0c1", "0b7ad3b2-2d3b-4f5c-9a3c-1f1e2d3c4b5a"]

MOVER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from kshare_sidecar.persist.layout import Layout
    from kshare_sidecar.persist.topic import TopicPersister, TopicSettings

    # The fault: this process SIGKILLs itself right after the n-th commit of its move is
    # acknowledged, so a kill lands between the copies, tombstones and layout records.
    kill_after, commits = int(sys.argv[3]), 0
    commit_chunk = Layout.commit_chunk

    async def commit_then_maybe_die(self, p, records):
        global commits
        await commit_chunk(self, p, records)
        commits += 1
        if commits >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    Layout.commit_chunk = commit_then_maybe_die

    async def main(bootstrap, topic):
        p = TopicPersister(TopicSettings(bootstrap, topic=topic, partitions=%d, replication_factor=1))
        try:
            await p.start()
        finally:
            await p.close()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
""" % PARTS)


def state_of(i: int) -> PartitionState:
    """Distinct per share-partition: an SPSO, acknowledged records, released ones with delivery counts."""
    base = 100 * i
    return PartitionState(state_epoch=1, leader_epoch=0, start_offset=base, state_batches=(
        StateBatch(base, base + 2, DeliveryState.ACKNOWLEDGED, 1),
        StateBatch(base + 3, base + 3, DeliveryState.AVAILABLE, 1 + i % 4),
        StateBatch(base + 5, base + 6, DeliveryState.ARCHIVED, 5)))


def same(a: PartitionState, b: PartitionState) -> bool:
    return (a.state_epoch, a.start_offset, a.state_batches) == (b.state_epoch, b.start_offset, b.state_batches)


async def write_old_layout(bootstrap: str, topic: str) -> dict[SharePartitionKey, PartitionState]:
    keys = [SharePartitionKey(g, t, p) for g in ("orders", "billing", "audit") for t in TIDS for p in range(6)]
    old = TopicPersister(TopicSettings(bootstrap, topic=topic, partitions=PARTS, replication_factor=1, placement="key"))
    await old.start()
    try:
        await old.initialize_many(InitializeItem(k, 1, 0) for k in keys)
        epoch = old.owner_epoch
        assert epoch is not None
        await old.read(keys, leader_epoch=epoch)
        failed = await old.write_many(WriteItem(k, state_of(i), epoch) for i, k in enumerate(keys))
        assert not any(failed.values()), failed
        await old.put_group(GroupRecord("orders", 4, {TIDS[0]: tuple(range(6))}, {"share.record.lock.duration.ms": "20000"}))
    finally:
        await old.close()
    misplaced = [k for k in keys if state_partition_for(KIND_PARTITION, k, PARTS, "key")
                 != share_partition_home(k.topic_id, k.partition, PARTS)]
    assert len(misplaced) > len(keys) // 2, "the two layouts should disagree for most keys"
    return {k: state_of(i) for i, k in enumerate(keys)}


async def read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, bytes | None]]:
    return await read_state_topic(bootstrap, topic, PARTS)


def naive_view(records) -> dict[SharePartitionKey, tuple[int, PartitionState]]:
    """From the raw topic, without the persister: per partition the newest record of each key; a key's
    state is its live record at home if there is one, else its live record elsewhere."""
    newest: dict[tuple[int, SharePartitionKey], bytes | None] = {}
    for p, _offset, key, value in records:
        kind, ident = codec.decode_key(key)
        if kind == KIND_PARTITION:
            newest[(p, ident)] = value
    view: dict[SharePartitionKey, tuple[int, PartitionState]] = {}
    for (p, ident), value in newest.items():
        if value is None:
            continue
        if p == share_partition_home(ident.topic_id, ident.partition, PARTS) or ident not in view:
            view[ident] = (p, codec.decode_partition(value).state)
    return view


def phase_counts(records) -> tuple[int, int, int]:
    """(share-partition records at home, share-partition tombstones, layout records)."""
    home = tombstones = layouts = 0
    for p, _o, key, value in records:
        kind, ident = codec.decode_key(key)
        if kind == KIND_LAYOUT:
            layouts += 1
        elif kind == KIND_PARTITION:
            if value is None:
                tombstones += 1
            elif p == share_partition_home(ident.topic_id, ident.partition, PARTS):
                home += 1
    return home, tombstones, layouts


def plan_of(records):
    entities: dict = {}
    stats = RecoveryStats()
    sink = replay_sink(entities, stats, {}, "owner", "topic-partition", PARTS)
    for p, offset, key, value in records:
        sink(p, offset, key, value)
    return plan_moves(entities, stats.misplaced, PARTS, lambda _p: 0)


def run_mover(bootstrap: str, topic: str, kill_after: int) -> int:
    proc = subprocess.run([sys.executable, "-c", MOVER, bootstrap, topic, str(kill_after)], capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != -9:
        print(proc.stderr[-3000:])
    return proc.returncode


def test_a_move_sigkilled_in_each_phase_loses_nothing_and_a_cluster_then_serves_every_state(kafka_39):
    bootstrap, topic = kafka_39.bootstrap, f"__kshare_state_layout_{uuid.uuid4().hex[:8]}"
    before = asyncio.run(write_old_layout(bootstrap, topic))
    records = asyncio.run(read_topic(bootstrap, topic))
    at_home_before = phase_counts(records)[0]

    # 1: killed after its first copy landed (the others may be in flight): no original is gone yet
    plan = plan_of(records)
    assert run_mover(bootstrap, topic, 1) == -9
    records = asyncio.run(read_topic(bootstrap, topic))
    home, tombstones, layouts = phase_counts(records)
    assert home > at_home_before and tombstones == 0 and layouts == 0, (home, tombstones, layouts)
    view = naive_view(records)
    assert set(view) == set(before) and all(same(before[k], s) for k, (_p, s) in view.items())

    # 2: the next mover copies what is left, and is killed after its first tombstone
    plan = plan_of(records)
    assert run_mover(bootstrap, topic, len(plan.copies) + 1) == -9
    records = asyncio.run(read_topic(bootstrap, topic))
    home, tombstones, layouts = phase_counts(records)
    assert home >= len(before) and tombstones > 0 and layouts == 0, (home, tombstones, layouts)
    view = naive_view(records)
    assert set(view) == set(before) and all(same(before[k], s) for k, (_p, s) in view.items())
    assert all(p == share_partition_home(k.topic_id, k.partition, PARTS) for k, (p, _s) in view.items())

    # 3: killed after its first layout record (every original is tombstoned by then)
    plan = plan_of(records)
    assert len(plan.copies) == 0
    assert run_mover(bootstrap, topic, len(plan.drops) + 1) == -9
    records = asyncio.run(read_topic(bootstrap, topic))
    assert phase_counts(records)[2] >= 1
    assert plan_of(records).dropped == 0
    view = naive_view(records)
    assert set(view) == set(before) and all(same(before[k], s) for k, (_p, s) in view.items())

    # two cluster members start together on it, take every state partition over between them
    async def cluster() -> None:
        members = [TopicPersister(TopicSettings(bootstrap, topic=topic, partitions=PARTS, replication_factor=1))
                   for _ in range(2)]
        for m in members:
            m.enable_cluster()
        await asyncio.gather(*(m.start() for m in members))
        try:
            assert all(m.layout_known for m in members)
            await asyncio.gather(*(members[p % 2].acquire(p) for p in range(PARTS)))
            for k, state in before.items():
                got = await members[share_partition_home(k.topic_id, k.partition, PARTS) % 2].read_one(k)
                assert same(state, got), k
            group = members[state_partition_for("g", "orders", PARTS) % 2].get_group("orders")
            assert group == GroupRecord("orders", 4, {TIDS[0]: tuple(range(6))},
                                        {"share.record.lock.duration.ms": "20000"})
        finally:
            await asyncio.gather(*(m.close() for m in members))
    asyncio.run(cluster())
    records = asyncio.run(read_topic(bootstrap, topic))
    layouts_at = {p for p, _o, key, value in records if codec.decode_key(key)[0] == KIND_LAYOUT and value}
    assert layouts_at == set(range(PARTS))


def test_cluster_members_on_an_older_layout_move_it_once_between_them(kafka_39):
    """Three members start at once on a topic in the older layout: one moves it (the others wait or
    find it moved), all of them then serve it."""
    bootstrap, topic = kafka_39.bootstrap, f"__kshare_state_layout_{uuid.uuid4().hex[:8]}"
    before = asyncio.run(write_old_layout(bootstrap, topic))

    async def cluster() -> None:
        members = [TopicPersister(TopicSettings(bootstrap, topic=topic, partitions=PARTS, replication_factor=1))
                   for _ in range(3)]
        for m in members:
            m.enable_cluster()
        await asyncio.gather(*(m.start() for m in members))
        try:
            await asyncio.gather(*(members[p % 3].acquire(p) for p in range(PARTS)))
            for k, state in before.items():
                got = await members[share_partition_home(k.topic_id, k.partition, PARTS) % 3].read_one(k)
                assert same(state, got), k
        finally:
            await asyncio.gather(*(m.close() for m in members))
    asyncio.run(cluster())
    records = asyncio.run(read_topic(bootstrap, topic))
    assert plan_of(records).dropped == 0
    view = naive_view(records)
    assert set(view) == set(before) and all(same(before[k], s) for k, (_p, s) in view.items())


def test_kshare_state_migrate_reports_then_moves(kafka_39):
    bootstrap, topic = kafka_39.bootstrap, f"__kshare_state_layout_{uuid.uuid4().hex[:8]}"
    before = asyncio.run(write_old_layout(bootstrap, topic))
    misplaced = plan_of(asyncio.run(read_topic(bootstrap, topic))).dropped

    def kshare(*args: str, state_topic: str = topic) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "state", "migrate", "-b", bootstrap,
                               "--state-topic", state_topic, *args], capture_output=True, text=True, timeout=120)

    dry = kshare()
    assert dry.returncode == 1, dry.stderr
    assert f"({PARTS} partitions): {misplaced} share-partition records are in the single-sidecar layout" in dry.stdout
    assert plan_of(asyncio.run(read_topic(bootstrap, topic))).dropped == misplaced  # a dry run writes nothing
    done = kshare("--execute", "--json")
    assert done.returncode == 0, done.stderr
    assert '"moved": %d' % misplaced in done.stdout and '"executed": true' in done.stdout
    again = kshare()
    assert again.returncode == 0 and "nothing to move" in again.stdout, again.stdout + again.stderr
    records = asyncio.run(read_topic(bootstrap, topic))
    view = naive_view(records)
    assert set(view) == set(before) and all(same(before[k], s) for k, (_p, s) in view.items())
    assert all(p == share_partition_home(k.topic_id, k.partition, PARTS) for k, (p, _s) in view.items())
    missing = kshare(state_topic=f"{topic}-missing")
    assert missing.returncode == 1 and "does not exist" in missing.stderr, missing.stderr
