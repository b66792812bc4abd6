"""Group configs changed while a share group consumes, side by side: native Kafka 4.4 and kshare over
Kafka 3.9. Kafka 4.4's SharePartition reads each group config on every use (ShareGroupConfigProvider
over GroupConfigManager, which the broker updates from its metadata log at the change), so a change
reaches the share-partitions already loaded and the members already in the group; kshare's loaded
share-partitions take a change at once too (SharePartitionCache.reconfigure_group).

Each scenario runs the same steps on both targets at the same time (kshare's asyncio ShareConsumer,
one partition, explicit acknowledgement) and compares what the consumers saw.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Producer

from kshare_sidecar.client import AcknowledgeType, ShareConsumer
from kshare_sidecar.testing.kafka import KafkaBroker
from tests.e2e.conftest import LOCK_MS, Target
from tests.support import create_topic, produce, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300), pytest.mark.optin("parity-debts")]


@pytest.fixture(scope="module")
def native44():
    """Kafka 4.4 with the short intervals of the e2e sidecar (conftest.native_kafka's settings)."""
    with KafkaBroker("4.4", heap="768m", extra_config={
            "group.share.record.lock.duration.ms": str(LOCK_MS), "group.share.min.record.lock.duration.ms": "1000",
            "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000"}) as b:
        yield b


@pytest.fixture(scope="module")
def targets(native44, sidecar) -> list[Target]:
    return [Target("kshare", sidecar.bootstrap, sidecar.backend),
            Target("native", native44.bootstrap, native44.bootstrap)]


def _setup(target: Target, records: int = 0, **configs: str) -> tuple[str, str]:
    topic, group = unique("live"), unique("live-g")
    create_topic(target.backend, topic, 1)
    set_group_config(target.bootstrap, group, {"share.auto.offset.reset": "earliest", **configs})
    if records:
        produce(target.backend, topic, records)
    return topic, group


def _consumer(target: Target, group: str, topic: str, **kw) -> ShareConsumer:
    return ShareConsumer(topic, bootstrap_servers=target.bootstrap, group_id=group,
                         acknowledgement_mode="explicit", client_id="kshare-live-configs", **kw)


async def _take(c: ShareConsumer, want: int, timeout: float = 20.0) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for recs in (await c.getmany(timeout_ms=300)).values():
            got += recs
    return got


async def _both(targets: list[Target], scenario) -> dict[str, object]:
    results = await asyncio.gather(*(scenario(t) for t in targets))
    return {t.name: r for t, r in zip(targets, results, strict=True)}


def _small_batches(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records in log batches of 10 (the cap is checked per batch: one that crosses it is
    acquired whole, on both)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, b"c%d" % i)
        if i % 10 == 9:
            producer.flush(30)
    assert producer.flush(30) == 0


def _transactions(bootstrap: str, topic: str, tag: str) -> tuple[set[bytes], set[bytes]]:
    """commit, abort, commit: five records each."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx"), "linger.ms": 0})
    producer.init_transactions(30)
    committed, aborted = set(), set()
    for n, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        values = {f"{tag}{n}-{i}".encode() for i in range(5)}
        for v in sorted(values):
            producer.produce(topic, v)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
            committed |= values
        else:
            producer.abort_transaction(30)
            aborted |= values
    return committed, aborted


async def _drain(c: ShareConsumer, seen: set[bytes], want: set[bytes], timeout: float = 30.0) -> None:
    """Consume (accepting) until ``want`` is seen, then 2 s more for anything unexpected."""
    deadline, quiet_until = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        for recs in (await c.getmany(timeout_ms=300)).values():
            for r in recs:
                seen.add(r.value)
                c.acknowledge(r)
        await c.commit()
        if want <= seen:
            quiet_until = quiet_until or time.monotonic() + 2.0
            if time.monotonic() > quiet_until:
                return


async def test_isolation_level_change_reaches_a_running_consumer(targets):
    """read_committed → read_uncommitted while the consumer runs: the aborted transactions produced
    after the change are delivered (native does; kshare kept hiding them)."""

    async def scenario(target: Target) -> dict[str, object]:
        topic, group = _setup(target, **{"share.isolation.level": "read_committed"})
        async with _consumer(target, group, topic) as c:
            await _take(c, 1, timeout=3)  # joined, share-partition loaded (the topic is empty)
            seen: set[bytes] = set()
            committed, aborted = await asyncio.to_thread(_transactions, target.backend, topic, "a")
            await _drain(c, seen, committed)
            before = (seen == committed, len(seen & aborted))
            await asyncio.to_thread(set_group_config, target.bootstrap, group,
                                    {"share.isolation.level": "read_uncommitted"})
            await asyncio.sleep(1.0)  # the broker applies the group config from its metadata log
            seen2: set[bytes] = set()
            committed2, aborted2 = await asyncio.to_thread(_transactions, target.backend, topic, "b")
            await _drain(c, seen2, committed2 | aborted2)
            return {"before: committed only": before, "after: committed": seen2 >= committed2,
                    "after: aborted delivered": len(seen2 & aborted2)}

    results = await _both(targets, scenario)
    print(f"\n{results}")
    assert results["kshare"] == results["native"] == {
        "before: committed only": (True, 0), "after: committed": True, "after: aborted delivered": 5}, results


def test_isolation_level_change_reaches_a_running_librdkafka_consumer(targets):
    """The same change under confluent-kafka's ShareConsumer, polling all along in its own thread."""
    import threading

    from confluent_kafka import ShareConsumer as LibrdkafkaShareConsumer

    def scenario(target: Target, out: dict) -> None:
        topic, group = _setup(target, **{"share.isolation.level": "read_committed"})
        seen: set[bytes] = set()
        stop = threading.Event()

        def poll() -> None:
            consumer = LibrdkafkaShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group})
            consumer.subscribe([topic])
            try:
                while not stop.is_set():
                    for msg in consumer.poll(0.5):
                        if not msg.error():
                            seen.add(msg.value())
            finally:
                consumer.close()

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            time.sleep(3)  # joined and fetching
            committed, aborted = _transactions(target.backend, topic, "a")
            deadline = time.monotonic() + 30
            while not committed <= seen and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(2)
            before = (committed <= seen, len(seen & aborted))
            set_group_config(target.bootstrap, group, {"share.isolation.level": "read_uncommitted"})
            time.sleep(1)
            committed2, aborted2 = _transactions(target.backend, topic, "b")
            deadline = time.monotonic() + 30
            while not (committed2 | aborted2) <= seen and time.monotonic() < deadline:
                time.sleep(0.2)
            out[target.name] = {"before: committed, aborted seen": before,
                                "after: committed": committed2 <= seen, "after: aborted seen": len(seen & aborted2)}
        finally:
            stop.set()
            poller.join()

    results: dict[str, dict] = {}
    threads = [threading.Thread(target=scenario, args=(t, results)) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(f"\n{results}")
    assert results["kshare"] == results["native"] == {
        "before: committed, aborted seen": (True, 0), "after: committed": True, "after: aborted seen": 5}, results


async def test_delivery_count_limit_lowered_for_a_loaded_share_partition(targets):
    async def scenario(target: Target) -> list[int]:
        topic, group = _setup(target, records=1)
        counts: list[int] = []
        async with _consumer(target, group, topic) as c:
            first = await _take(c, 1)
            counts += [r.delivery_count for r in first]
            await asyncio.to_thread(set_group_config, target.bootstrap, group, {"share.delivery.count.limit": "2"})
            await asyncio.sleep(1.0)
            got = first
            while got:
                for r in got:
                    c.acknowledge(r, AcknowledgeType.RELEASE)
                await c.commit()
                got = await _take(c, 1, timeout=3)
                counts += [r.delivery_count for r in got]
                assert len(counts) <= 6, "never archived"
        return counts

    results = await _both(targets, scenario)
    print(f"\n{results}")
    assert results["kshare"] == results["native"] == [1, 2], results  # was 5 deliveries at the default


async def test_lock_duration_change_applies_to_the_next_acquisition(targets):
    async def scenario(target: Target) -> dict[str, object]:
        topic, group = _setup(target, records=2)
        async with _consumer(target, group, topic) as holder, _consumer(target, group, topic) as other:
            first = await _take(holder, 1, timeout=20)
            holder.acknowledge(first[0])
            await holder.commit()
            await asyncio.to_thread(set_group_config, target.bootstrap, group,
                                    {"share.record.lock.duration.ms": "1500"})
            await asyncio.sleep(1.0)
            held = await _take(holder, 1, timeout=20)  # acquired after the change: a 1.5 s lock
            reported = holder.acquisition_lock_timeout_ms
            t0 = time.monotonic()
            again = await _take(other, 1, timeout=LOCK_MS / 1000 + 5)
            waited = time.monotonic() - t0
            return {"lock reported": reported, "redelivered": [(r.offset, r.delivery_count) for r in again],
                    "before the old lock's end": waited < LOCK_MS / 1000 - 1, "held": len(held)}

    results = await _both(targets, scenario)
    print(f"\n{results}")
    assert results["kshare"] == results["native"], results
    assert results["kshare"]["lock reported"] == 1500 and results["kshare"]["before the old lock's end"], results
    assert [offset for offset, _ in results["kshare"]["redelivered"]] == [1], results


async def test_record_lock_cap_lowered_for_a_loaded_share_partition(targets):
    async def scenario(target: Target) -> int:
        topic, group = _setup(target, records=10)
        async with _consumer(target, group, topic, max_poll_records=10) as c:
            first = await _take(c, 10)
            for r in first:
                c.acknowledge(r)
            await c.commit()
            await asyncio.to_thread(set_group_config, target.bootstrap, group,
                                    {"share.partition.max.record.locks": "100"})
            await asyncio.sleep(1.0)
            await asyncio.to_thread(_small_batches, target.backend, topic, 400)
            held = await _take(c, 400, timeout=8)  # never acknowledged: the cap stops acquisition
        return len(held)

    results = await _both(targets, scenario)
    print(f"\n{results}")
    assert results["kshare"] == results["native"], results
    assert 100 <= results["kshare"] < 400, results


async def test_renew_disabled_while_a_record_is_held(targets):
    async def scenario(target: Target) -> dict[str, str]:
        topic, group = _setup(target, records=1)
        out = {}
        async with _consumer(target, group, topic) as c:
            rec = (await _take(c, 1))[0]
            await c.renew(rec)
            out["renew while enabled"] = "ok"
            await asyncio.to_thread(set_group_config, target.bootstrap, group,
                                    {"share.renew.acknowledge.enable": "false"})
            await asyncio.sleep(1.0)
            try:
                await c.renew(rec)
                out["renew after disabling"] = "ok"
            except Exception as exc:  # noqa: BLE001 - the outcome is compared
                out["renew after disabling"] = getattr(getattr(exc, "code", None), "name", type(exc).__name__)
        return out

    results = await _both(targets, scenario)
    print(f"\n{results}")
    assert results["kshare"] == results["native"], results
    assert results["kshare"]["renew after disabling"] != "ok", results


async def test_heartbeat_interval_change_reaches_the_members(targets):
    async def scenario(target: Target) -> int:
        topic, group = _setup(target, records=1)
        async with _consumer(target, group, topic) as c:
            await _take(c, 1)
            await asyncio.to_thread(set_group_config, target.bootstrap, group, {"share.heartbeat.interval.ms": "6000"})
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and c._membership.interval_ms != 6000:
                await asyncio.sleep(0.2)
            return c._membership.interval_ms

    results = await _both(targets, scenario)
    assert results["kshare"] == results["native"] == 6000, results
