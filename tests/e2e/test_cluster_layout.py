"""Growing from one sidecar to a cluster on the same state topic (docs/persistence.md,
"Layout"), with real processes and confluent-kafka share consumers on Kafka 3.9.

A single sidecar of an older build (its layout pinned with tests/e2e/faulty_sidecar.py's ``--state-placement key``:
share-partitions placed by the whole key) serves two share groups, which accept, release and reject
records (``kshare consume``). It stops; three sidecars of one ``cluster.name`` start together on the
same state topic. From the state topic: every share-partition's SPSO, ranges and delivery counts are
at its topic-partition home, the originals tombstoned, layout records on every partition. From the
clients: each group then receives exactly the records its state left to deliver — none it had
acknowledged or archived — each with its persisted delivery count + 1.

Opt-in with the other cluster scenarios (``make test-sidecar-cluster``): ~1–2 minutes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections import defaultdict

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_LAYOUT, KIND_PARTITION
from kshare_sidecar.persist.model import DeliveryState
from kshare_sidecar.persist.ownership import share_partition_home
from tests.e2e.conftest import SidecarProcess, wait_until
from tests.e2e.test_sidecar_cluster import (
    LONG,
    STATE_PARTITIONS,
    SidecarCluster,
    _state_records,
    agreed,
)
from tests.support import create_topic, produce, unique

pytestmark = pytest.mark.kafka

PARTITIONS, RECORDS = 6, 600
LOCK_MS = 30000  # no lock expires while a consumer holds records: delivery counts are exact


def kshare_consume(bootstrap: str, group: str, topic: str, *args: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "consume", "-b", bootstrap, "--group", group,
                          "--topic", topic, "--json", "--timeout", "15", *args], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def newest_snapshots(records, group: str) -> dict[int, tuple[int, object]]:
    """User partition -> (state partition, newest state) of ``group``'s live records (one topic),
    preferring the record at its topic-partition home (a naive reader of the raw topic)."""
    newest: dict = {}
    for p, _offset, key, value in records:
        kind, ident = codec.decode_key(key)
        if kind == KIND_PARTITION and ident.group_id == group:
            newest[(p, ident)] = value
    out: dict[int, tuple[int, object]] = {}
    for (p, ident), value in newest.items():
        if value is None:
            continue
        home = share_partition_home(ident.topic_id, ident.partition, STATE_PARTITIONS)
        if p == home or ident.partition not in out:
            out[ident.partition] = (p, codec.decode_partition(value).state)
    return out


def still_to_deliver(state, end: int) -> dict[int, int]:
    """Offset -> the delivery count its next delivery must carry, from a share-partition's state."""
    start = max(state.start_offset, 0)
    out = {o: 1 for o in range(start, end)}
    for b in state.state_batches:
        for o in range(max(b.first_offset, start), b.last_offset + 1):
            if b.delivery_state in (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED):
                out.pop(o, None)
            elif o in out:
                out[o] = b.delivery_count + 1
    return out


@LONG
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_single_sidecars_state_topic_serves_a_cluster_of_three(kafka_39, tmp_path):
    backend = kafka_39.bootstrap
    topic, groups = unique("grow"), {"accepting": unique("grow-a"), "rejecting": unique("grow-r")}
    create_topic(backend, topic, PARTITIONS)
    produce(backend, topic, RECORDS, partitions=PARTITIONS)
    cluster = SidecarCluster(backend, tmp_path)
    common = {"KSHARE_STATE_TOPIC": cluster.state_topic, "KSHARE_STATE_TOPIC_PARTITIONS": str(STATE_PARTITIONS),
              "KSHARE_GROUP_SHARE_RECORD_LOCK_DURATION_MS": str(LOCK_MS)}

    # one sidecar of an older build: key-placed state, groups accepting, releasing, rejecting
    old = SidecarProcess(backend, tmp_path / "old.log", env=common, faults=["--state-placement", "key"])
    old.start(timeout_s=120)
    try:
        g = groups["accepting"]
        first = kshare_consume(old.bootstrap, g, topic, "-n", "250")
        kshare_consume(old.bootstrap, g, topic, "-n", "80", "--release")
        g = groups["rejecting"]
        kshare_consume(old.bootstrap, g, topic, "-n", "120", "--reject")
        kshare_consume(old.bootstrap, g, topic, "-n", "60", "--release")
    finally:
        old.stop()
    before_records = asyncio.run(_state_records(backend, cluster.state_topic))
    before = {name: newest_snapshots(before_records, g) for name, g in groups.items()}
    assert all(len(v) == PARTITIONS for v in before.values()), before
    keys = [(p, codec.decode_key(k)[1]) for p, _o, k, v in before_records
            if v is not None and codec.decode_key(k)[0] == KIND_PARTITION]
    topic_id = keys[0][1].topic_id
    misplaced = {ident for p, ident in keys
                 if p != share_partition_home(ident.topic_id, ident.partition, STATE_PARTITIONS)}
    assert misplaced, "the older layout should have put some share-partitions off their topic-partition home"
    c = Consumer({"bootstrap.servers": backend, "group.id": unique("probe")})
    try:
        ends = {p: c.get_watermark_offsets(CTP(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        c.close()
    expected = {name: {(p, o): dc for p, (_sp, state) in snaps.items() for o, dc in still_to_deliver(state, ends[p]).items()}
                for name, snaps in before.items()}
    assert len(expected["accepting"]) < RECORDS and any(dc > 1 for dc in expected["accepting"].values())
    assert not set(expected["accepting"]) & {(r["partition"], r["offset"]) for r in first}

    # three sidecars of a cluster start together on the same state topic
    starters = []
    try:
        for n in (1, 2, 3):
            def start(n=n) -> None:
                cluster.start(n)
            t = threading.Thread(target=start)
            t.start()
            starters.append(t)
        for t in starters:
            t.join(240)
        assert wait_until(lambda: agreed(cluster, topic, {1, 2, 3}), 90), cluster.logs()

        after_records = asyncio.run(_state_records(backend, cluster.state_topic))
        for name, g in groups.items():
            now = newest_snapshots(after_records, g)
            for p, (sp, state) in now.items():
                assert sp == share_partition_home(topic_id, p, STATE_PARTITIONS), f"{name} partition {p} not at home"
                old_state = before[name][p][1]
                assert (state.state_epoch, state.start_offset, state.state_batches) == \
                    (old_state.state_epoch, old_state.start_offset, old_state.state_batches), (name, p)
        layouts = {p for p, _o, k, v in after_records if v is not None and codec.decode_key(k)[0] == KIND_LAYOUT}
        assert layouts == set(range(STATE_PARTITIONS))
        live_elsewhere = defaultdict(int)
        newest: dict = {}
        for p, _o, k, v in after_records:
            kind, ident = codec.decode_key(k)
            if kind == KIND_PARTITION:
                newest[(p, ident)] = v
        for (p, ident), v in newest.items():
            if v is not None and p != share_partition_home(ident.topic_id, ident.partition, STATE_PARTITIONS):
                live_elsewhere[p] += 1
        assert not live_elsewhere, f"records left off their home: {dict(live_elsewhere)}"
        moved = sum("moving them to their topic-partition home" in (tmp_path / f"sidecar{n}.log").read_text()
                    for n in (1, 2, 3))
        assert moved >= 1, cluster.logs()

        # the clients, through the cluster: exactly what the state left, with the persisted counts + 1
        bootstrap = ",".join(sc.bootstrap for sc in cluster.nodes.values())
        for name, g in groups.items():
            got = kshare_consume(bootstrap, g, topic)
            seen: dict[tuple[int, int], int] = {}
            for r in got:
                seen.setdefault((r["partition"], r["offset"]), r["delivery_count"])
            assert set(seen) == set(expected[name]), (name, sorted(set(seen) ^ set(expected[name]))[:10])
            wrong = {k: (seen[k], dc) for k, dc in expected[name].items() if seen[k] != dc}
            assert not wrong, f"{name}: delivery counts (seen, expected) differ: {list(wrong.items())[:10]}"
        print(f"\n[cluster layout] {len(misplaced)} share-partitions off their topic-partition home moved by the "
              f"cluster's first start ({moved} sidecar(s) logged a move); groups then received "
              f"{len(expected['accepting'])} and {len(expected['rejecting'])} records with their persisted counts + 1")
    finally:
        cluster.stop()
