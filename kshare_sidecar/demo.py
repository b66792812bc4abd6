"""`kshare demo`: a queue on Kafka, shown live.

Until the gateway lands this runs against a native Kafka 4.x share group (the reference
behaviour kshare reproduces on clusters without share groups): a broker from the harness,
one producer, several confluent-kafka share consumers splitting one topic's records.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from rich.console import Console
from rich.live import Live
from rich.table import Table

from .testing import HarnessError, KafkaBroker


def run(records: int = 20_000, consumers: int = 4, partitions: int = 2) -> int:
    console = Console(stderr=True)
    try:
        from confluent_kafka import Producer, ShareConsumer
        from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                           NewTopic, ResourceType)
    except ImportError:
        console.print("kshare demo: confluent-kafka is missing: pip install 'kshare-sidecar[test]'")
        return 2
    console.print("[bold]kshare demo[/]: starting Apache Kafka 4 (native share groups) ...")
    try:
        broker = KafkaBroker("4").start()
    except HarnessError as exc:
        console.print(f"kshare demo: {exc}")
        return 2
    try:
        bootstrap, topic, group = broker.bootstrap, "demo-queue", "demo-workers"
        console.print(f"broker {broker.version} at {bootstrap}, ready in {broker.startup_seconds:.1f} s")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for fut in admin.incremental_alter_configs([resource]).values():
            fut.result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(records):
            producer.produce(topic, f"job-{i}".encode(), partition=i % partitions)
            if i % 5000 == 0:
                producer.poll(0)
        producer.flush(30)
        del producer, admin  # close their connections before the broker goes away

        counts: Counter[str] = Counter()
        seen: Counter[bytes] = Counter()
        lock, stop = threading.Lock(), threading.Event()

        def work(name: str) -> None:
            consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
            consumer.subscribe([topic])
            try:
                while not stop.is_set():
                    for msg in consumer.poll(0.5):
                        if msg.error() is None:
                            with lock:
                                counts[name] += 1
                                seen[msg.value()] += 1
            finally:
                consumer.close()

        names = [f"worker-{i + 1}" for i in range(consumers)]
        threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in names]
        started = time.monotonic()
        for t in threads:
            t.start()

        def table() -> Table:
            tab = Table(title=f"share group '{group}' on topic '{topic}' ({partitions} partitions)")
            tab.add_column("consumer")
            tab.add_column("records", justify="right")
            with lock:
                for n in names:
                    tab.add_row(n, f"{counts[n]:,}")
                tab.add_row("[bold]total distinct[/]", f"[bold]{len(seen):,} / {records:,}[/]")
            return tab

        with Live(table(), console=console, refresh_per_second=4) as live:
            while len(seen) < records and time.monotonic() - started < 120:
                time.sleep(0.25)
                live.update(table())
        elapsed = time.monotonic() - started
        stop.set()
        for t in threads:
            t.join(10)
        duplicates = sum(c - 1 for c in seen.values() if c > 1)
        console.print(
            f"[bold]summary[/]: {len(seen):,}/{records:,} records consumed by {consumers} share consumers in "
            f"{elapsed:.1f} s ({len(seen) / elapsed:,.0f} records/s), {duplicates} redelivered"
        )
        return 0 if len(seen) == records else 1
    finally:
        broker.stop()
