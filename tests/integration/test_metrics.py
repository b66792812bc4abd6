"""Prometheus metrics: scrape /metrics around an end-to-end share-group run."""

from __future__ import annotations

import asyncio
import re
import socket
import time
import urllib.request

from kshare_sidecar.config import load_config
from kshare_sidecar.app import Sidecar
from confluent_kafka import KafkaException, ShareConsumer

from tests.support import create_topic, produce, unique

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def _consume_and_ack(bootstrap: str, group: str, topic: str, expected: int, timeout_s: float = 60) -> int:
    """Consume ``expected`` records, then poll once more so the implicit acks of the last
    delivery are sent (librdkafka acknowledges a delivery on the next poll)."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    got = 0
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while got < expected and time.monotonic() < deadline:
            for msg in consumer.poll(1.0):
                if msg.error():
                    raise KafkaException(msg.error())
                got += 1
        for _ in range(2):
            consumer.poll(0.5)
    finally:
        consumer.close()
    return got


def _sum(samples: dict[str, float], name: str, contains: str = "") -> float:
    return sum(v for k, v in samples.items()
               if (k == name or k.startswith(name + "{")) and contains in k)


async def test_metrics_move_with_a_share_group_run(kafka_39):
    port = _free_port()
    sidecar = Sidecar(load_config(env={}, overrides={
        "bootstrap.servers": kafka_39.bootstrap, "listen": "127.0.0.1:0", "metrics.port": port,
        "share.auto.offset.reset": "earliest", "state.topic.replication.factor": 1,
        # its own state topic: on the session's shared Kafka the default one belongs to the session
        # sidecar, which a second sidecar on it would take over (fencing it), failing later tests
        "state.topic": unique("__kshare_state_metrics")}))
    await sidecar.start()
    try:
        # a sidecar listening on loopback serves its metrics on loopback only (metrics.host unset)
        assert sidecar.metrics.host == "127.0.0.1"
        topic, group = unique("metrics"), unique("metrics-g")
        await asyncio.to_thread(create_topic, kafka_39.bootstrap, topic, 2)
        await asyncio.to_thread(produce, kafka_39.bootstrap, topic, 200, partitions=2)
        before = await asyncio.to_thread(_scrape, port)
        assert "kshare_total_share_fetch_requests_total" in before
        got = await asyncio.to_thread(_consume_and_ack, f"127.0.0.1:{sidecar.port}", group, topic, 200)
        assert got == 200
        await asyncio.sleep(0.5)  # the close (epoch -1) carries the last implicit acks
        after = await asyncio.to_thread(_scrape, port)

        def delta(name: str, contains: str = "") -> float:
            return _sum(after, name, contains) - _sum(before, name, contains)

        # At least the first fetch; the implicit acks of the last delivery ride on a later
        # ShareFetch or on the closing ShareAcknowledge.
        assert delta("kshare_total_share_fetch_requests_total") >= 1
        assert delta("kshare_total_share_fetch_requests_total") + \
            delta("kshare_total_share_acknowledgement_requests_total") >= 2
        assert delta("kshare_failed_share_fetch_requests_total") == 0
        # Implicit acknowledgement accepts every delivered record exactly once.
        assert delta("kshare_record_acknowledgement_total", 'ack_type="Accept"') == 200
        assert delta("kshare_record_acknowledgement_total", 'ack_type="Reject"') == 0
        assert delta("kshare_record_acknowledgement_total", 'ack_type="Release"') == 0
        # Two share-partitions were loaded, and each ack batch was a durable state write.
        assert delta("kshare_partition_load_time_seconds_count") == 2
        assert delta("kshare_share_coordinator_write_latency_seconds_count") >= 2
        assert after['kshare_share_partitions_loaded'] >= 2
        # The group exists; its member left, so it is Empty; joining bumped the group epoch.
        assert after['kshare_share_group_count{state="Empty"}'] >= 1
        assert after['kshare_group_count{protocol="share"}'] >= 1
        assert delta("kshare_share_group_rebalance_total") >= 1
        # Read path: 200 records delivered once, each backend byte counted.
        assert delta("kshare_share_fetch_delivered_records_total") == 200
        assert 0 < delta("kshare_share_fetch_delivered_bytes_total") <= delta("kshare_backend_fetch_bytes_total")
        assert delta("kshare_backend_fetch_requests_total") >= 1
        assert delta("kshare_read_cache_misses_total") >= 1
        assert delta("kshare_process_cpu_seconds_total") > 0
        assert after["kshare_process_max_resident_memory_bytes"] > 10 * 2**20
        # Everything delivered and acknowledged: nothing in flight, no lag — an idle share-partition
        # has no per-partition series at all (at scale they would be most of the scrape).
        for p in (0, 1):
            labels = f'{{group="{group}",partition="{p}",topic="{topic}"}}'
            assert f"kshare_share_partition_in_flight_message_count{labels}" not in after
            assert f"kshare_share_partition_lag{labels}" not in after
            assert f"kshare_share_partition_oldest_in_flight_age_seconds{labels}" not in after
    finally:
        await sidecar.stop()
