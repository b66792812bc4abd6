"""kshare's asyncio ShareConsumer (kshare_sidecar.client) against native Kafka 4.3 and kshare
on Kafka 3.9, side by side, with the same assertions on both targets."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from aiokafka.structs import TopicPartition

from kshare_sidecar.client import (
    AcknowledgementError,
    AcknowledgeType,
    AckStateError,
    ShareConsumer,
    ShareConsumerError,
    UnsupportedVersionError,
)
from tests.e2e.conftest import LOCK_MS, Worker, wait_until
from tests.support import create_topic, produce, set_group_config, unique

pytestmark = pytest.mark.kafka


def _setup(target, partitions=1, records=10, group_configs=None):
    topic, group = unique("aio"), unique("g")
    create_topic(target.backend, topic, partitions)
    set_group_config(target.bootstrap, group, {"share.auto.offset.reset": "earliest", **(group_configs or {})})
    values = produce(target.backend, topic, records, partitions=partitions) if records else []
    return topic, group, values


def _consumer(target, group, topic, mode="explicit", **kw):
    return ShareConsumer(topic, bootstrap_servers=target.bootstrap, group_id=group, acknowledgement_mode=mode,
                         client_id="kshare-e2e", **kw)


async def _take(c, want: int, timeout: float = 20.0) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for recs in (await c.getmany(timeout_ms=500)).values():
            got += recs
    return got


async def test_two_consumers_accept_every_record_exactly_once(target):
    total = 3000
    topic, group, values = _setup(target, partitions=3, records=total)
    seen: list[tuple[int, int, int, bytes]] = []
    done = asyncio.Event()

    async def run(name: str):
        async with _consumer(target, group, topic, mode="implicit", max_poll_records=200) as c:
            idle_since = None
            while True:
                batch = await c.getmany(timeout_ms=500)
                for recs in batch.values():
                    seen.extend((r.partition, r.offset, r.delivery_count, r.value) for r in recs)
                if len({(p, o) for p, o, _, _ in seen}) >= total:
                    done.set()
                if done.is_set():
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 1.0:
                        return await c.commit()

    results = await asyncio.wait_for(asyncio.gather(run("a"), run("b")), 90)
    assert all(exc is None for r in results for exc in r.values()), results
    assert len(seen) == total, f"{len(seen) - total} redeliveries"
    assert Counter((p, o) for p, o, _, _ in seen).most_common(1)[0][1] == 1
    assert {dc for _, _, dc, _ in seen} == {1}
    assert sorted(v for *_, v in seen) == sorted(values)
    # nothing left for a newcomer: every record was accepted
    async with _consumer(target, group, topic) as late:
        assert await _take(late, 1, timeout=3) == []


async def test_release_redelivers_with_count_2_and_reject_is_final(target):
    topic, group, _ = _setup(target, records=3)
    async with _consumer(target, group, topic) as c:
        first = await _take(c, 3)
        assert [(r.offset, r.delivery_count) for r in first] == [(0, 1), (1, 1), (2, 1)]
        assert [r.key for r in first] == [b"0", b"1", b"2"] and first[0].timestamp > 0
        c.acknowledge(first[0], AcknowledgeType.RELEASE)
        c.acknowledge(first[1], AcknowledgeType.REJECT)
        c.acknowledge(first[2], AcknowledgeType.ACCEPT)
        assert all(exc is None for exc in (await c.commit()).values())
        again = await _take(c, 1)
        assert [(r.offset, r.delivery_count) for r in again] == [(0, 2)]
        c.acknowledge(again[0])
        assert all(exc is None for exc in (await c.commit()).values())
        assert await _take(c, 1, timeout=3) == [], "a rejected or accepted record came back"


async def test_lock_expiry_redelivers_to_another_member(target):
    topic, group, _ = _setup(target, records=5, group_configs={"share.record.lock.duration.ms": "2000"})
    async with _consumer(target, group, topic) as slow, _consumer(target, group, topic) as fast:
        held = await _take(slow, 5)
        assert len(held) == 5 and {r.delivery_count for r in held} == {1}
        await asyncio.sleep(3.0)  # past the 2 s lock
        taken = await _take(fast, 5, timeout=20)
        assert sorted(r.offset for r in taken) == [0, 1, 2, 3, 4]
        assert {r.delivery_count for r in taken} == {2}
        for r in held:
            slow.acknowledge(r)
        late = await slow.commit()
        assert late and all(isinstance(e, AcknowledgementError) for e in late.values()), late
        for r in taken:
            fast.acknowledge(r)
        assert all(exc is None for exc in (await fast.commit()).values())


async def test_renew_keeps_a_record_past_its_lock(target):
    topic, group, _ = _setup(target, records=1, group_configs={"share.record.lock.duration.ms": "2000"})
    async with _consumer(target, group, topic) as holder, _consumer(target, group, topic) as other:
        rec = (await _take(holder, 1))[0]
        deadline = time.monotonic() + 5.0  # 2.5 lock durations
        stolen = []
        while time.monotonic() < deadline:
            await holder.renew(rec)
            for recs in (await other.getmany(timeout_ms=700)).values():
                stolen += recs
        assert stolen == [], "the renewed record went to another member"
        holder.acknowledge(rec)
        assert all(exc is None for exc in (await holder.commit()).values())
        assert await _take(other, 1, timeout=3) == []


def _describe(target, group) -> list:
    from kshare_sidecar.cli.kclient import AdminClient, ClientError

    try:
        with AdminClient(target.bootstrap) as admin:
            return list(admin.describe_group(group).members)
    except ClientError:  # coordinator not available yet
        return []


def _members(target, group) -> int:
    return len(_describe(target, group))


def _members_with_partitions(target, group) -> int:
    return sum(1 for m in _describe(target, group) if any(tp.partitions for tp in m.assignment.topic_partitions))


async def test_asyncio_and_librdkafka_consumers_share_one_group(target):
    from confluent_kafka import ShareConsumer as RdShareConsumer

    total = 2000
    topic, group, _ = _setup(target, partitions=2, records=0)
    rd_seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def librdkafka():
        c = RdShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group, "log_level": 3,
                             "share.acknowledgement.mode": "implicit", "max.poll.records": 50})
        try:
            c.subscribe([topic])
            while not stop.is_set():
                for m in c.poll(0.3):
                    if m.error() is None:
                        rd_seen.append((m.partition(), m.offset()))
                        time.sleep(0.001)  # a little work per record, so both share the load
        finally:
            c.close()

    thread = threading.Thread(target=librdkafka, daemon=True)
    thread.start()
    aio_seen: list[tuple[int, int]] = []
    try:
        async with _consumer(target, group, topic, mode="implicit", max_poll_records=50) as c:
            deadline = time.monotonic() + 30
            while await asyncio.to_thread(_members_with_partitions, target, group) < 2:  # both assigned before records exist
                assert time.monotonic() < deadline, "the two consumers never both joined"
                await c.getmany(timeout_ms=300)
            producing = asyncio.create_task(asyncio.to_thread(produce, target.backend, topic, total, partitions=2))
            deadline = time.monotonic() + 60
            while len(set(aio_seen) | set(rd_seen)) < total and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=300)).values():
                    aio_seen += [(r.partition, r.offset) for r in recs]
                    await asyncio.sleep(0.001 * len(recs))
            await producing
            await c.commit()
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 30)
    assert len(set(aio_seen) | set(rd_seen)) == total
    assert aio_seen and rd_seen, (len(aio_seen), len(rd_seen))
    assert not set(aio_seen) & set(rd_seen), "a record went to both consumers"


async def test_close_releases_acquired_records_and_leaves(target):
    topic, group, _ = _setup(target, records=5)
    first = _consumer(target, group, topic)
    await first.start()
    held = await _take(first, 5)
    assert len(held) == 5
    first.acknowledge(held[0])  # sent with the final epoch -1
    await first.close()
    assert await asyncio.to_thread(_members, target, group) == 0, "the member did not leave"
    async with _consumer(target, group, topic) as second:
        # released at close, well before the 6 s lock would have expired
        taken = await _take(second, 4, timeout=4)
        assert [(r.offset, r.delivery_count) for r in taken] == [(1, 2), (2, 2), (3, 2), (4, 2)]


async def test_v1_only_path_and_renew_refused(target):
    """ShareFetch/ShareAcknowledge v1 (what a 4.1 broker offers): everything but RENEW works."""
    topic, group, _ = _setup(target, records=2)
    async with _consumer(target, group, topic, max_share_version=1) as c:
        got = await _take(c, 2)
        with pytest.raises(UnsupportedVersionError, match="v2"):
            await c.renew(got[0])
        c.acknowledge(got[0], AcknowledgeType.RELEASE)
        c.acknowledge(got[1])
        again = await _take(c, 1)  # the RELEASE went piggybacked on this ShareFetch v1
        assert [(r.offset, r.delivery_count) for r in again] == [(0, 2)]
        c.acknowledge(again[0])
        assert all(exc is None for exc in (await c.commit()).values())


async def test_dropped_connection_reopens_the_session(target):
    """A TCP drop closes the broker's share session and releases its records; the consumer opens
    a new session with epoch 0 and gets them again (delivery count 2)."""
    topic, group, _ = _setup(target, records=3)
    async with _consumer(target, group, topic) as c:
        got = await _take(c, 3)
        for conn in c._cluster._conns.values():
            conn._conn.drop("test: connection dropped")
        assert len(got) == 3
        again = await _take(c, 3, timeout=15)
        assert sorted((r.offset, r.delivery_count) for r in again) == [(0, 2), (1, 2), (2, 2)]
        for r in again:
            c.acknowledge(r)
        assert all(exc is None for exc in (await c.commit()).values())


async def test_record_released_every_time_is_archived_at_the_delivery_limit(target):
    topic, group, _ = _setup(target, records=1)
    counts = []
    async with _consumer(target, group, topic) as c:
        while True:
            got = await _take(c, 1, timeout=3 if counts else 20)
            if not got:
                break
            counts += [r.delivery_count for r in got]
            for r in got:
                c.acknowledge(r, AcknowledgeType.RELEASE)
            assert len(counts) <= 10, "never archived"
    assert counts == [1, 2, 3, 4, 5]  # group.share.delivery.count.limit = 5


class AioWorker(Worker):
    """tests/e2e/asyncio_worker.py (this client in its own process, share_worker.py's arguments)."""

    def __init__(self, target, group: str, topic: str, out: Path, **opts) -> None:
        self.out = out
        args = [sys.executable, str(Path(__file__).with_name("asyncio_worker.py")), "--bootstrap", target.bootstrap,
                "--group", group, "--topic", topic, "--out", str(out)]
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def test_sigkilled_consumer_process_records_go_to_another_member(target, tmp_path):
    """Crash: a consumer process holding 20 records (explicit mode, never acknowledging) is
    SIGKILLed; the broker releases them as its connection drops (not when the 6 s lock runs
    out) and another member gets each of them with delivery count 2."""
    topic, group, _ = _setup(target, records=20)
    holder = AioWorker(target, group, topic, tmp_path / "holder.jsonl", mode="explicit", ack="none", max_s=120)
    try:
        assert await asyncio.to_thread(wait_until, lambda: len(holder.records()) >= 20, 40), holder.events()
    finally:
        holder.proc.send_signal(signal.SIGKILL)
        holder.wait(10)
    killed_at = time.monotonic()
    assert {r["dc"] for r in holder.records()} == {1}
    async with _consumer(target, group, topic) as taker:
        taken = await _take(taker, 20, timeout=LOCK_MS / 1000 + 10)
        recovered_in = time.monotonic() - killed_at
        assert sorted((r.offset, r.delivery_count) for r in taken) == [(o, 2) for o in range(20)]
        for r in taken:
            taker.acknowledge(r)
        assert all(exc is None for exc in (await taker.commit()).values())
    print(f"\n[{target.name}] records of a SIGKILLed asyncio consumer redelivered {recovered_in:.1f} s after the kill")
    assert recovered_in < LOCK_MS / 1000, "released by the lock timeout, not by the dropped connection"


async def test_slow_consumers_on_one_partition_all_get_work(target):
    """Slow: four consumers on ONE partition, 5 records per poll, 20 ms of work per record. Each
    gets a share of the work (share groups' point), every record is accepted exactly once and
    nothing is redelivered (no lock runs out)."""
    from confluent_kafka import Producer

    topic, group, _ = _setup(target, records=0)
    producer = Producer({"bootstrap.servers": target.backend, "linger.ms": 0, "batch.num.messages": 5})
    for i in range(400):
        producer.produce(topic, f"job-{i}".encode())
        producer.poll(0)
    assert producer.flush(30) == 0
    per_consumer: list[list[tuple[int, int]]] = [[] for _ in range(4)]

    async def run(i: int) -> None:
        async with _consumer(target, group, topic, mode="implicit", max_poll_records=5) as c:
            idle_since = time.monotonic()
            while time.monotonic() - idle_since < 4:
                for recs in (await c.getmany(timeout_ms=300)).values():
                    idle_since = time.monotonic()
                    for r in recs:
                        per_consumer[i].append((r.offset, r.delivery_count))
                        await asyncio.sleep(0.02)  # the slow part

    await asyncio.wait_for(asyncio.gather(*(run(i) for i in range(4))), 120)
    every = [o for recs in per_consumer for o, _ in recs]
    assert sorted(every) == list(range(400)), f"{len(every)} deliveries, {len(set(every))} distinct"
    assert {dc for recs in per_consumer for _, dc in recs} == {1}
    assert all(recs for recs in per_consumer), [len(recs) for recs in per_consumer]
    print(f"\n[{target.name}] records per slow consumer: {[len(recs) for recs in per_consumer]}")


async def test_sidecar_restart_mid_run_reconnects_and_finishes(kafka_39, tmp_path):
    """kshare only (native Kafka has no sidecar to restart): the connection drops, heartbeats
    and fetches fail, the consumer reconnects, reopens its share session and finishes; every
    record ends up accepted."""
    from tests.e2e.conftest import SidecarProcess, Target

    total = 2000
    sc = await asyncio.to_thread(SidecarProcess(kafka_39.bootstrap, tmp_path / "sidecar.log").start)
    try:
        target = Target("kshare", sc.bootstrap, kafka_39.bootstrap)
        topic, group, _ = _setup(target, partitions=2, records=total)
        seen: set[tuple[int, int]] = set()
        restarted = False
        async with _consumer(target, group, topic, max_poll_records=100, request_timeout_ms=5000) as c:
            deadline = time.monotonic() + 60
            while len(seen) < total and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=300)).values():
                    for r in recs:
                        seen.add((r.partition, r.offset))
                        c.acknowledge(r)
                await c.commit()
                if not restarted and len(seen) > total // 4:
                    restarted = True
                    assert await asyncio.to_thread(sc.stop) == 0
                    await asyncio.sleep(1)
                    await asyncio.to_thread(sc.start)
            assert restarted and len(seen) == total, (len(seen), sc.log_tail())
        async with _consumer(target, group, topic) as late:
            assert await _take(late, 1, timeout=3) == [], "a record was left unaccepted"
    finally:
        await asyncio.to_thread(sc.stop)


async def test_a_one_byte_fetch_max_bytes_takes_one_batch_per_share_fetch(target):
    """MaxBytes is soft only for the first batch of a response (librdkafka's 0171 and 0180 tests):
    ten one-record batches come one per ShareFetch. The sidecar used to acquire everything its
    (at least 64 KiB) backend read held, all ten at once."""
    from confluent_kafka import Producer

    topic, group, _ = _setup(target, records=0)
    producer = Producer({"bootstrap.servers": target.backend, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, b"v%d" % i)
        assert producer.flush(30) == 0  # one batch per record
    sizes: list[int] = []
    async with _consumer(target, group, topic, mode="implicit", fetch_max_bytes=1) as c:
        deadline = time.monotonic() + 30
        while sum(sizes) < 10 and time.monotonic() < deadline:
            n = sum(len(recs) for recs in (await c.getmany(timeout_ms=500)).values())
            if n:
                sizes.append(n)
    assert sizes == [1] * 10, sizes


async def test_acknowledging_right_after_delete_topics_gets_unknown_topic_id(target):
    """librdkafka's 0176 ``commit_sync_after_topic_deletion`` and 0181's after-delete cases:
    records of 3 partitions acquired, the topic deleted through the bootstrap, then acknowledged
    with no fetch in between. Kafka 4.3 answers UNKNOWN_TOPIC_ID for each partition; the sidecar
    answered NO_ERROR (its topic cache learnt of the deletion only from a later backend read or
    its age) until a forwarded DeleteTopics made it forget the topics at once. Kafka 4.4 on a busy
    machine sometimes answers UNKNOWN_TOPIC_OR_PARTITION instead (its share-partitions of the topic
    are gone while its metadata still knows the topic id): either fails every acknowledgement."""
    from confluent_kafka.admin import AdminClient

    topic, group, _ = _setup(target, partitions=3, records=30)
    async with _consumer(target, group, topic) as c:
        got = await _take(c, 30)
        assert len(got) == 30
        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        await asyncio.to_thread(lambda: admin.delete_topics([topic])[topic].result(30))
        for record in got:
            c.acknowledge(record, AcknowledgeType.ACCEPT)
        results = await c.commit()
    codes = {tp.partition: getattr(err, "code", None) for tp, err in results.items()}
    assert set(codes) == {0, 1, 2}, f"{target.name}: {results}"
    assert set(codes.values()) <= {ErrorCode.unknown_topic_id, ErrorCode.unknown_topic_or_partition}, \
        f"{target.name}: {results}"


def test_acknowledging_records_of_a_deleted_topic_fails(target):
    """librdkafka's 0176/0181: records acquired, the topic deleted, then acknowledged. Kafka answers
    UNKNOWN_TOPIC_ID for them; the sidecar used to accept them (its topic cache lags behind; a
    backend read that finds the topic gone now re-reads it at once)."""
    from confluent_kafka import AcknowledgeType as CkAck
    from confluent_kafka import ShareConsumer as CkShareConsumer
    from confluent_kafka.admin import AdminClient

    topic, group, _ = _setup(target, records=10)
    consumer = CkShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group,
                                "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        got = [m for m in consumer.poll(1.0) if m.error() is None]
    assert got
    admin = AdminClient({"bootstrap.servers": target.bootstrap})  # kept alive until the result
    admin.delete_topics([topic])[topic].result(30)
    time.sleep(5)  # the consumer keeps fetching in the background meanwhile
    for m in got:
        consumer.acknowledge(m, CkAck.ACCEPT)
    results = consumer.commit_sync(30.0) or {}
    consumer.close()
    errors = [err for err in results.values() if err is not None]
    assert errors, f"{target.name}: acknowledgements of a deleted topic's records were accepted: {results}"


def _transactional_produce(bootstrap: str, topic: str, sizes: list[int]) -> None:
    """One transaction per size (each ends with a control record, an offset without data)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    p.init_transactions(30)
    n = 0
    for size in sizes:
        p.begin_transaction()
        for _ in range(size):
            p.produce(topic, key=str(n).encode(), value=b"v", partition=0)
            n += 1
        p.commit_transaction(30)


async def test_offsets_only_consumer_acquires_and_acknowledges_ranges(target):
    """The Spark driver's client (offsets_only): ranges, never records — the transactions'
    control-record offsets included — acknowledged by range, a RELEASE redelivered with count 2."""
    topic, group, _ = _setup(target, records=0)
    _transactional_produce(target.backend, topic, [5, 3])  # data 0-4, marker 5, data 6-8, marker 9
    tp = TopicPartition(topic, 0)
    async with _consumer(target, group, topic, offsets_only=True, max_poll_records=100) as c:
        with pytest.raises(ShareConsumerError, match="getranges"):
            await c.getmany()
        got: list = []
        data = {0, 1, 2, 3, 4, 6, 7, 8}
        deadline = time.monotonic() + 20
        while not data <= {o for a, b, _ in got for o in range(a, b + 1)} and time.monotonic() < deadline:
            got += (await c.getranges(timeout_ms=500)).get(tp, [])
        offsets = {o for a, b, _ in got for o in range(a, b + 1)}
        # natively the control records' offsets are acquired too ([0, 9]); the sidecar archives them itself
        assert data <= offsets <= set(range(10)) and {n for *_, n in got} == {1}
        with pytest.raises(AckStateError):
            c.acknowledge_offsets(tp, 8, 12)  # beyond what was acquired
        c.acknowledge_offsets(tp, 0, 1, AcknowledgeType.RELEASE)
        for a, b, _ in got:
            if max(a, 2) <= b:
                c.acknowledge_offsets(tp, max(a, 2), b, AcknowledgeType.ACCEPT)
        assert all(exc is None for exc in (await c.commit()).values())
        again: list = []
        deadline = time.monotonic() + 20
        while not again and time.monotonic() < deadline:
            again = (await c.getranges(timeout_ms=500)).get(tp, [])
        assert again == [(0, 1, 2)]
        c.acknowledge_offsets(tp, 0, 1)
        assert all(exc is None for exc in (await c.commit()).values())
        assert await c.getranges(timeout_ms=1500) == {}, "an accepted offset came back"
