"""`kshare demo`: share groups on a cluster that has none, shown live.

The demo starts Apache Kafka 3.9 (no KIP-932 support) from the test harness, runs a kshare
sidecar in this process in front of it, and lets several confluent-kafka ``ShareConsumer``\\ s
split one topic's records through the sidecar while a producer keeps writing to the broker.
A live table shows what each consumer got; the summary line says whether every record arrived.

Exit codes: 0 every produced record was consumed, 1 some were not (or a part failed), 2 the
demo could not start (missing client library, harness failure), 130 interrupted.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .testing import HarnessError, KafkaBroker

TOPIC = "demo-queue"
GROUP = "demo-workers"
KAFKA_LINE = "3.9"  # a backend without share groups: the point of kshare
JOIN_WAIT_S = 15.0  # the producer starts once every consumer joined, or after this long
MAX_RESTARTS = 3  # a consumer that dies of a fatal error is replaced at most this often


@dataclass
class _Stats:
    """What the producer and consumers have done so far; guarded by ``lock``."""

    records: int
    names: list[str]
    lock: threading.Lock = field(default_factory=threading.Lock)
    produced: int = 0
    producer_started: bool = False
    producer_done: bool = False
    producer_error: str | None = None
    per_consumer: Counter = field(default_factory=Counter)
    redelivered: Counter = field(default_factory=Counter)  # deliveries with delivery_count > 1
    seen: set = field(default_factory=set)
    deliveries: int = 0
    errors: list[str] = field(default_factory=list)
    restarts: Counter = field(default_factory=Counter)  # consumers replaced after a fatal error

    @property
    def complete(self) -> bool:
        with self.lock:
            return self.producer_done and len(self.seen) >= self.records


class _SidecarThread:
    """A kshare sidecar on its own asyncio loop in a daemon thread; start/stop from any thread."""

    def __init__(self, bootstrap: str) -> None:
        from .config import load_config
        from .service.runner import Sidecar

        self.sidecar = Sidecar(load_config(env={}, overrides={
            "bootstrap.servers": bootstrap,
            "listen": "127.0.0.1:0",
            "share.auto.offset.reset": "earliest",
            "state.topic.replication.factor": 1,
            # quick membership changes so the consumers visibly join and split the queue
            "group.share.heartbeat.interval.ms": 1000,
        }))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name="kshare-sidecar", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self, timeout: float = 60) -> int:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.sidecar.start(), self.loop).result(timeout)
        return self.sidecar.port

    def members(self, group: str) -> int:
        """How many members the sidecar's coordinator holds for ``group`` (0 when unknown)."""

        async def count() -> int:
            coordinator = getattr(self.sidecar, "coordinator", None)
            found = getattr(coordinator, "groups", {}).get(group) if coordinator is not None else None
            return len(getattr(found, "members", ()) or ())

        try:
            return asyncio.run_coroutine_threadsafe(count(), self.loop).result(5)
        except Exception:  # noqa: BLE001 - only used to pace the demo
            return 0

    def stop(self, timeout: float = 30) -> None:
        if not self.thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.sidecar.stop(), self.loop).result(timeout)
        finally:
            try:  # what asyncio.run does on exit: no task may outlive its loop
                asyncio.run_coroutine_threadsafe(_cancel_leftovers(), self.loop).result(timeout)
            except Exception as exc:  # noqa: BLE001 - stopping goes on; say why it was not clean
                print(f"kshare demo: cancelling leftover sidecar tasks failed: {exc!r}", file=sys.stderr)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
            if not self.thread.is_alive():
                self.loop.close()


async def _cancel_leftovers() -> None:
    """Cancel and await every other task on this loop (connections, timers), like ``asyncio.run``."""
    me = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for task in left:
        task.cancel()
    if left:
        await asyncio.wait(left, timeout=10)


def run(records: int = 20_000, consumers: int = 4, partitions: int = 3, timeout_s: float | None = None) -> int:
    console = Console(stderr=True)
    if records < 1 or consumers < 1:
        console.print("kshare demo: --records and --consumers must be at least 1")
        return 2
    try:
        from confluent_kafka import Producer, ShareConsumer  # noqa: F401  (checked here, used below)
        from confluent_kafka.admin import AdminClient, NewTopic  # noqa: F401
    except ImportError:
        console.print("kshare demo: confluent-kafka is missing: pip install 'kshare-sidecar[test]'")
        return 2
    if timeout_s is None:
        timeout_s = 90 + records / 500  # generous: a slow CI box still finishes 20k records
    console.print(f"[bold]kshare demo[/]: starting Apache Kafka {KAFKA_LINE} (no share groups of its own) ...")
    try:
        broker = KafkaBroker(KAFKA_LINE).start()
    except HarnessError as exc:
        console.print(f"kshare demo: {exc}", markup=False, highlight=False)
        return 2
    sidecar: _SidecarThread | None = None
    logs = _LogCapture().__enter__()
    try:
        console.print(f"broker {broker.version} at {broker.bootstrap}, ready in {broker.startup_seconds:.1f} s")
        sidecar = _SidecarThread(broker.bootstrap)
        try:
            port = sidecar.start()
        except Exception as exc:  # noqa: BLE001 - one line, then clean up
            console.print(f"kshare demo: the sidecar failed to start: {exc or type(exc).__name__}", markup=False,
                          highlight=False)
            return 1
        front = f"127.0.0.1:{port}"
        console.print(f"kshare sidecar at {front}, serving share groups for that broker")
        return _play(console, broker.bootstrap, sidecar, front, records, consumers, partitions, timeout_s)
    except KeyboardInterrupt:
        console.print("kshare demo: interrupted")
        return 130
    finally:
        if sidecar is not None:
            try:
                sidecar.stop()
            except Exception as exc:  # noqa: BLE001
                console.print(f"kshare demo: stopping the sidecar failed: {exc}", markup=False)
        broker.stop()
        logs.__exit__(None, None, None)
        if logs.lines:
            console.print(f"the sidecar logged {len(logs.lines)} warnings/errors; the first ones:")
            for line in logs.lines[:5]:
                console.print(f"  {line}", markup=False, highlight=False)


def _play(console: Console, backend: str, sidecar: _SidecarThread, front: str, records: int, consumers: int,
          partitions: int, timeout_s: float) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": backend})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    deadline = time.monotonic() + 30  # every partition has a leader before consumers ask for offsets
    while time.monotonic() < deadline:
        topic = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions \
                and all(p.leader >= 0 for p in topic.partitions.values()):
            break
        time.sleep(0.2)
    del admin

    names = [f"consumer-{i + 1}" for i in range(consumers)]
    stats = _Stats(records=records, names=names)
    stop, go = threading.Event(), threading.Event()
    threads = [threading.Thread(target=_produce, args=(backend, records, partitions, stats, stop, go),
                                name="demo-producer", daemon=True)]
    threads += [threading.Thread(target=_consume, args=(front, name, stats, stop), name=f"demo-{name}",
                                 daemon=True) for name in names]
    started = time.monotonic()
    for t in threads:
        t.start()
    try:
        with Live(_view(stats, started, partitions), console=console, refresh_per_second=4,
                  transient=False) as live:
            while not stats.complete and time.monotonic() - started < timeout_s:
                if not go.is_set() and (sidecar.members(GROUP) >= consumers
                                        or time.monotonic() - started > JOIN_WAIT_S):
                    go.set()  # everyone has joined (or we waited long enough): start writing
                with stats.lock:
                    if stats.producer_error is not None:
                        break
                time.sleep(0.25)
                live.update(_view(stats, started, partitions))
            live.update(_view(stats, started, partitions))
    finally:
        if not console.is_terminal:
            console.line()  # the last frame ends without a newline when stderr is not a terminal
        elapsed = time.monotonic() - started
        stop.set()
        for t in threads:
            t.join(30)
    with stats.lock:
        consumed = len(stats.seen)
        redelivered = sum(stats.redelivered.values())
        produced = stats.produced
        problems = list(stats.errors) + ([stats.producer_error] if stats.producer_error else [])
        restarts = dict(stats.restarts)
    for problem in problems[:5]:
        console.print(f"error: {problem}", markup=False, highlight=False)
    for name, count in sorted(restarts.items()):
        console.print(f"{name} was replaced {count}x after a fatal error")
    ok = produced == records and consumed == produced
    if ok:
        verdict = "every record consumed"
    elif produced < records:
        verdict = f"only {produced} of {records} records were produced"
    else:
        verdict = f"{produced - consumed} records NOT consumed"
    if elapsed >= timeout_s and not ok:
        verdict += f" (gave up after {timeout_s:.0f} s)"
    # The summary goes to stdout as one plain line so scripts and tests can read it.
    Console(highlight=False, soft_wrap=True).print(
        f"summary: {consumed}/{produced} records consumed by {consumers} share consumers through kshare "
        f"on Kafka 3.9 in {elapsed:.1f} s ({consumed / max(elapsed, 1e-9):,.0f} records/s), "
        f"{redelivered} redelivered: {verdict}", markup=False)
    return 0 if ok else 1


def _produce(bootstrap: str, records: int, partitions: int, stats: _Stats, stop: threading.Event,
             go: threading.Event) -> None:
    """Write ``records`` records straight to the broker at a steady pace, so the queue fills over time."""
    from confluent_kafka import Producer

    acked = 0

    def delivered(err, _msg) -> None:
        nonlocal acked
        if err is not None:
            with stats.lock:
                stats.producer_error = f"produce failed: {err}"
            return
        acked += 1
        with stats.lock:
            stats.produced = acked

    try:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
        seconds = min(max(records / 2000, 5.0), 20.0)  # 5..20 s of continuous writing
        chunk = max(1, int(records / (seconds * 10)))  # one chunk every 0.1 s
        while not go.wait(0.1):
            if stop.is_set():
                return
        with stats.lock:
            stats.producer_started = True
        for i in range(records):
            if stop.is_set():
                return
            producer.produce(TOPIC, f"job-{i}".encode(), key=str(i).encode(), partition=i % partitions,
                             on_delivery=delivered)
            if (i + 1) % chunk == 0:
                producer.poll(0)
                time.sleep(0.1)
        remaining = producer.flush(30)
        producer.poll(0)
        with stats.lock:
            if remaining:
                stats.producer_error = f"{remaining} records were not delivered to the broker"
            stats.producer_done = True
    except Exception as exc:  # noqa: BLE001 - reported in the summary
        with stats.lock:
            stats.producer_error = f"producer: {exc}"


def _consume(front: str, name: str, stats: _Stats, stop: threading.Event) -> None:
    """One share consumer, connected to the sidecar only; implicit acknowledgement on the next poll.

    A consumer that hits a fatal error is closed and replaced (at most ``MAX_RESTARTS`` times), as
    a supervised worker would be; the error is reported in the summary.
    """
    restarts = 0
    while not stop.is_set():
        fatal = _consume_once(front, name, stats, stop)
        if not fatal:
            return
        restarts += 1
        with stats.lock:
            stats.restarts[name] += 1
        if restarts > MAX_RESTARTS or stop.wait(1.0):
            return


def _consume_once(front: str, name: str, stats: _Stats, stop: threading.Event) -> bool:
    """Consume until ``stop``; True when the consumer died of a fatal error and should be replaced."""
    from confluent_kafka import KafkaException, ShareConsumer

    def report(text: str) -> None:
        with stats.lock:
            if len(stats.errors) < 50:
                stats.errors.append(f"{name}: {text}")

    try:
        consumer = ShareConsumer({"bootstrap.servers": front, "group.id": GROUP, "client.id": name,
                                  "log_level": 3})
    except Exception as exc:  # noqa: BLE001
        report(str(exc))
        return False
    fatal = False
    try:
        consumer.subscribe([TOPIC])
        while not stop.is_set() and not fatal:
            batch = consumer.poll(0.5)
            with stats.lock:
                for msg in batch:
                    error = msg.error()
                    if error is not None:
                        fatal = fatal or error.fatal()
                        if len(stats.errors) < 50:
                            stats.errors.append(f"{name}: {error}")
                        continue
                    stats.per_consumer[name] += 1
                    stats.deliveries += 1
                    if (msg.delivery_count() or 1) > 1:
                        stats.redelivered[name] += 1
                    stats.seen.add(msg.value())
    except KafkaException as exc:
        fatal = exc.args[0].fatal() if exc.args else True
        report(str(exc))
    except Exception as exc:  # noqa: BLE001
        report(str(exc))
    finally:
        try:
            consumer.close()  # commits the last poll's acknowledgements and leaves the group
        except Exception as exc:  # noqa: BLE001
            if not fatal:
                report(f"close: {exc}")
    return fatal


def _view(stats: _Stats, started: float, partitions: int) -> Group:
    elapsed = max(time.monotonic() - started, 1e-9)
    table = Table(title=f"share group '{GROUP}' on topic '{TOPIC}' ({partitions} partitions), "
                        f"Kafka {KAFKA_LINE} + kshare")
    table.add_column("consumer")
    table.add_column("records", justify="right")
    table.add_column("share", justify="right")
    table.add_column("records/s", justify="right")
    table.add_column("redelivered", justify="right")
    with stats.lock:
        total = max(stats.deliveries, 1)
        for name in stats.names:
            n = stats.per_consumer[name]
            table.add_row(name, f"{n:,}", f"{100 * n / total:.0f}%", f"{n / elapsed:,.0f}",
                          f"{stats.redelivered[name]:,}")
        consumed, produced = len(stats.seen), stats.produced
        redelivered = sum(stats.redelivered.values())
        producing = ("done" if stats.producer_done else "writing" if stats.producer_started
                     else f"waiting for {len(stats.names)} consumers to join")
    table.add_section()
    table.add_row("[bold]total distinct[/]", f"[bold]{consumed:,}[/]", "", f"{consumed / elapsed:,.0f}",
                  f"{redelivered:,}")
    status = Text(f"produced {produced:,}/{stats.records:,} ({producing}) · consumed {consumed:,} · "
                  f"{consumed / elapsed:,.0f} records/s · {elapsed:.1f} s")
    return Group(table, status)


class _LogCapture(logging.Handler):
    """Keeps the in-process sidecar's warnings and errors off the live display; shown after it."""

    NAMES = ("kshare", "kshare_sidecar", "aiokafka")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self._saved: dict[str, tuple[int, bool]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < 1000:
            self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")

    def __enter__(self) -> _LogCapture:
        for name in self.NAMES:
            logger = logging.getLogger(name)
            self._saved[name] = (logger.level, logger.propagate)
            logger.setLevel(logging.WARNING)
            logger.propagate = False
            logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, (level, propagate) in self._saved.items():
            logger = logging.getLogger(name)
            logger.removeHandler(self)
            logger.setLevel(level)
            logger.propagate = propagate
