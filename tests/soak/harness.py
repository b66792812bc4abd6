"""The soak (``make soak``): steady share-consume load through sidecars over Kafka 3.9 for an hour,
with periodic faults, and a report per interval.

Processes, all real and on loopback: one Kafka 3.9 broker (the harness's), ``sidecars`` sidecars
of one cluster (``kshare sidecar run``; node 1 is never restarted — it is the one whose memory and
file descriptors are judged, while partitions move to and from the others at every fault), a
producer at a steady rate (confluent-kafka, to the backend), and share consumers in their own
processes: confluent-kafka ``ShareConsumer``s (tests/e2e/share_worker.py) and kshare's asyncio
consumer (tests/e2e/asyncio_worker.py), all acknowledging explicitly.

Faults, one every ``fault_every_s`` in a fixed cycle: the backend broker killed (-9) and started
again, a sidecar other than node 1 killed -9 and started again, a consumer killed -9 and a new one
started, a sidecar stopped with SIGTERM and started again, the backend stopped with SIGTERM and
started again, a consumer closed cleanly and a new one started. With one sidecar the sidecar
faults restart it (its memory is then judged only over its last life).

Sampled every ``sample_s``: RSS and open file descriptors of each sidecar (/proc), the state
topic's size on disk (its log directories on the broker). At each interval's end: the sidecars'
``/metrics`` (ShareFetch / ShareAcknowledge total-time histograms), the state topic's records
(read whole), what the clients saw (tests/soak/ledger.py). The verdicts are tests/soak/rules.py's
and the ledger's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer

from kshare_sidecar.testing.kafka import KafkaBroker, free_port
from tests.e2e.conftest import SidecarProcess
from tests.soak.ledger import EventTail, Ledger
from tests.support import create_topic, read_state_topic

E2E = Path(__file__).resolve().parents[1] / "e2e"
WORKERS = {"confluent": str(E2E / "share_worker.py"), "asyncio": str(E2E / "asyncio_worker.py")}
FAULTS = ("backend-kill", "sidecar-kill", "consumer-kill", "sidecar-term", "backend-term", "consumer-term")
STATE_PARTITIONS = 8
TOPIC_PARTITIONS = 6


@dataclass
class Options:
    minutes: float = 60.0
    interval_s: float = 600.0
    sidecars: int = 2
    rate: int = 150  # records per second
    consumers: tuple[str, ...] = ("confluent", "confluent", "asyncio")
    fault_every_s: float = 240.0
    sample_s: float = 10.0
    drain_s: float = 300.0
    lock_ms: int = 30000


@dataclass
class WorkerProc:
    kind: str
    out: Path
    proc: subprocess.Popen
    tail: EventTail = field(init=False)

    def __post_init__(self) -> None:
        self.tail = EventTail(self.out)


class Soak:
    def __init__(self, opts: Options, tmp: Path) -> None:
        self.opts, self.tmp = opts, tmp
        self.topic, self.group = f"soak-{uuid.uuid4().hex[:6]}", f"soak-g-{uuid.uuid4().hex[:6]}"
        self.cluster_name, self.state_topic = f"soak-{uuid.uuid4().hex[:6]}", f"__kshare_state_soak{uuid.uuid4().hex[:6]}"
        self.broker = KafkaBroker("3.9", heap="768m")
        self.sidecars: dict[int, SidecarProcess] = {}
        self.metrics_ports: dict[int, int] = {}
        self.births: dict[int, float] = {}  # node -> when its current process started (s since start)
        self.workers: list[WorkerProc] = []
        self.retired: list[WorkerProc] = []
        self.ledger = Ledger()
        self.samples: dict[str, list[tuple[float, float]]] = {}
        self.intervals: list[dict] = []
        self.faults: list[tuple[float, str, str]] = []  # (at s, kind, detail)
        self.failures: list[str] = []
        self._producing = threading.Event()
        self._produce_errors = 0
        self._seq = 0
        self._t0 = 0.0
        self._worker_n = 0
        self._consumer_faults = 0

    # -- set-up ------------------------------------------------------------------------------
    def start(self) -> None:
        self.broker.start()
        create_topic(self.broker.bootstrap, self.topic, TOPIC_PARTITIONS)
        for node in range(1, self.opts.sidecars + 1):
            self._start_sidecar(node)
        self._t0 = time.monotonic()
        for node in self.sidecars:
            self.births[node] = 0.0
        self._producing.set()
        self._producer = threading.Thread(target=self._produce, name="soak-producer", daemon=True)
        self._producer.start()
        for kind in self.opts.consumers:
            self._start_worker(kind)

    def _start_sidecar(self, node: int) -> None:
        sc = self.sidecars.get(node)
        if sc is None:
            self.metrics_ports[node] = free_port()
            sc = SidecarProcess(self.broker.bootstrap, self.tmp / f"sidecar{node}.log", env={
                "KSHARE_CLUSTER_NAME": self.cluster_name, "KSHARE_NODE_ID": str(node),
                "KSHARE_STATE_TOPIC": self.state_topic, "KSHARE_STATE_TOPIC_PARTITIONS": str(STATE_PARTITIONS),
                "KSHARE_CLUSTER_SESSION_TIMEOUT_MS": "6000", "KSHARE_METRICS_PORT": str(self.metrics_ports[node]),
                "KSHARE_GROUP_SHARE_RECORD_LOCK_DURATION_MS": str(self.opts.lock_ms)})
            self.sidecars[node] = sc
        sc.start(timeout_s=180)

    @property
    def bootstrap(self) -> str:
        return ",".join(sc.bootstrap for sc in self.sidecars.values())

    def _start_worker(self, kind: str) -> None:
        self._worker_n += 1
        out = self.tmp / f"w{self._worker_n}-{kind}.jsonl"
        budget = self.opts.minutes * 60 + self.opts.drain_s + 600
        args = [sys.executable, WORKERS[kind], "--bootstrap", self.bootstrap, "--group", self.group,
                "--topic", self.topic, "--out", str(out), "--mode", "explicit", "--idle-s", str(budget),
                "--grace-s", str(budget), "--max-s", str(budget), "--max-poll-records", "200"]
        err = open(out.with_suffix(".stderr"), "ab")
        with err:
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, cwd=str(E2E.parents[1]))
        self.workers.append(WorkerProc(kind, out, proc))

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 20,
                             "enable.idempotence": True, "log_level": 2})

        def delivered(err, msg) -> None:
            if err is None:
                self.ledger.produced[(msg.partition(), msg.offset())] = int(msg.value().decode().rsplit(":", 1)[1])
            else:
                self._produce_errors += 1

        period = 1.0 / self.opts.rate
        next_at = time.monotonic()
        while self._producing.is_set():
            self._seq += 1
            producer.produce(self.topic, f"{self._seq}:{int(time.time() * 1000)}".encode(), on_delivery=delivered)
            producer.poll(0)
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -5:  # the broker was down: do not burst to catch up
                next_at = time.monotonic()
        producer.flush(120)

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> None:
        end = self._t0 + self.opts.minutes * 60
        next_sample = next_fault = time.monotonic()
        next_fault += self.opts.fault_every_s
        next_interval = self._t0 + self.opts.interval_s
        fault_n = 0
        before = self._scrape_all()
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                self._sample()
                next_sample += self.opts.sample_s
            if now >= next_fault and end - now > 60:  # no fault in the last minute: it would spill over
                self._fault(FAULTS[fault_n % len(FAULTS)])
                fault_n += 1
                next_fault = time.monotonic() + self.opts.fault_every_s
            if now >= next_interval:
                before = self._close_interval(before)
                next_interval += self.opts.interval_s
            self._check_processes()
            time.sleep(0.5)
        if not self.intervals or self.intervals[-1]["end_s"] < self._elapsed() - self.opts.sample_s:
            before = self._close_interval(before)
        self._drain()

    def _elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _sample(self) -> None:
        t = self._elapsed()
        for node, sc in self.sidecars.items():
            if sc.proc is not None and sc.proc.poll() is None:
                rss, fds = _rss_bytes(sc.proc.pid), _fd_count(sc.proc.pid)
                if rss is not None:
                    self.samples.setdefault(f"rss{node}", []).append((t, rss))
                    self.samples.setdefault(f"fds{node}", []).append((t, fds))
        self.samples.setdefault("state_disk", []).append((t, self._state_disk_bytes()))
        for w in self.workers:
            self.ledger.add(w.tail.new_events())

    def _state_disk_bytes(self) -> int:
        """The state topic's log segments on disk (Kafka's Log Size metric: ``.log`` files only; its
        index files are preallocated sparse files of 10 MiB each)."""
        data = self.broker.workdir / "data" if self.broker.workdir else None
        if data is None or not data.exists():
            return 0
        total = 0
        for d in data.glob(f"{self.state_topic}-*"):
            for f in d.glob("*.log"):
                try:
                    total += f.stat().st_size
                except FileNotFoundError:  # the cleaner swapped a segment meanwhile
                    pass
        return total

    def _check_processes(self) -> None:
        for node, sc in self.sidecars.items():
            if sc.proc is not None and sc.proc.poll() is not None:
                self.failures.append(f"sidecar {node} died (exit {sc.proc.returncode}) outside a fault:\n"
                                     f"{sc.log_tail(20)}")
                self.faults.append((self._elapsed(), "unplanned", f"sidecar {node} died; restarted"))
                sc.proc = None
                self._start_sidecar(node)
                self.births[node] = self._elapsed()
        for w in list(self.workers):
            if w.proc.poll() is not None:  # a client crash is the client's: noted, replaced
                self.faults.append((self._elapsed(), "unplanned", f"{w.kind} consumer exited {w.proc.returncode}"))
                self.workers.remove(w)
                self.retired.append(w)
                self._start_worker(w.kind)

    # -- faults ------------------------------------------------------------------------------
    def _fault(self, kind: str) -> None:
        at = self._elapsed()
        detail = ""
        if kind.startswith("backend"):
            self.broker.restart(down_s=5, sig=signal.SIGKILL if kind == "backend-kill" else signal.SIGTERM)
            detail = "broker back after 5 s down"
        elif kind.startswith("sidecar"):
            node = max(self.sidecars)  # node 1 stays up when there are others
            sc = self.sidecars[node]
            sc.stop(signal.SIGKILL if kind == "sidecar-kill" else signal.SIGTERM)
            time.sleep(3)
            self._start_sidecar(node)
            self.births[node] = self._elapsed()
            detail = f"sidecar {node}"
        else:
            # the kinds in turn (confluent-kafka, asyncio, ...): each client kind is killed and replaced
            kind_wanted = self.opts.consumers[self._consumer_faults % len(self.opts.consumers)]
            self._consumer_faults += 1
            victim = next((w for w in self.workers if w.kind == kind_wanted), self.workers[0])
            victim.proc.send_signal(signal.SIGKILL if kind == "consumer-kill" else signal.SIGTERM)
            try:
                victim.proc.wait(60)
            except subprocess.TimeoutExpired:
                victim.proc.kill()
                victim.proc.wait(10)
            self.ledger.add(victim.tail.new_events())
            self.workers.remove(victim)
            self.retired.append(victim)
            self._start_worker(victim.kind)
            detail = f"{victim.kind} consumer"
        self.faults.append((at, kind, f"{detail} ({self._elapsed() - at:.0f} s)"))
        print(f"[soak {at / 60:5.1f} min] fault {kind}: {detail}", flush=True)

    # -- intervals ---------------------------------------------------------------------------
    def _scrape_all(self) -> dict[int, dict[str, list[tuple[float, float]]]]:
        return {node: _scrape(port) for node, port in self.metrics_ports.items()}

    def _close_interval(self, before: dict) -> dict:
        from tests.soak.rules import MIB, bucket_delta, histogram_quantile, percentile

        self._sample()
        now = self._scrape_all()
        start = self.intervals[-1]["end_s"] if self.intervals else 0.0
        end = self._elapsed()
        deliveries, acks, latencies = self.ledger.take_interval()
        row: dict = {"start_s": round(start), "end_s": round(end), "produced": len(self.ledger.produced),
                     "delivered": deliveries, "acked": acks,
                     "e2e_p50_ms": _r(percentile(latencies, 0.5)), "e2e_p99_ms": _r(percentile(latencies, 0.99)),
                     "faults": [k for t, k, _ in self.faults if start <= t < end]}
        for node in self.sidecars:
            window = [(t, v) for t, v in self.samples.get(f"rss{node}", []) if start <= t <= end]
            fds = [v for t, v in self.samples.get(f"fds{node}", []) if start <= t <= end]
            row[f"rss{node}_mib"] = round(window[-1][1] / MIB, 1) if window else None
            row[f"rss{node}_max_mib"] = round(max(v for _, v in window) / MIB, 1) if window else None
            row[f"fds{node}"] = fds[-1] if fds else None
            row[f"fds{node}_max"] = max(fds) if fds else None
        for request in ("ShareFetch", "ShareAcknowledge"):
            merged: dict[float, float] = {}
            for node, hist in now.items():
                for bound, count in bucket_delta(hist.get(request, []), before.get(node, {}).get(request)):
                    merged[bound] = merged.get(bound, 0.0) + count
            buckets = sorted(merged.items())
            row[f"{request}_count"] = int(buckets[-1][1]) if buckets else 0
            for q in (0.5, 0.99):
                value = histogram_quantile(q, buckets)
                row[f"{request}_p{int(q * 100)}_ms"] = _r(value * 1000 if value is not None else None)
        disk = [v for t, v in self.samples.get("state_disk", []) if start <= t <= end]
        row["state_disk_max_mib"] = round(max(disk) / MIB, 2) if disk else None
        row["state_disk_end_mib"] = round(disk[-1] / MIB, 2) if disk else None
        try:
            records = asyncio.run(read_state_topic(self.broker.bootstrap, self.state_topic, STATE_PARTITIONS, 60))
            row["state_records"] = len(records)
            row["state_keys"] = len({(p, k) for p, _, k, _ in records})
        except Exception as exc:  # the broker may be restarting: the next interval reads it
            row["state_records"] = f"unread ({type(exc).__name__})"
        row["load"] = os.getloadavg()[0]
        self.intervals.append(row)
        print(f"[soak {end / 60:5.1f} min] interval: {json.dumps(row)}", flush=True)
        return now

    # -- the end -----------------------------------------------------------------------------
    def _drain(self) -> None:
        self._producing.clear()
        self._producer.join(180)
        deadline = time.monotonic() + self.opts.drain_s
        while time.monotonic() < deadline:
            for w in self.workers:
                self.ledger.add(w.tail.new_events())
            if self.ledger.produced and not self.ledger.never_delivered():
                lag = self._lag()
                if isinstance(lag, dict) and lag and all(v[1] == 0 for v in lag.values()):
                    break
            self._check_processes()
            time.sleep(3)
        self.drained_after_s = round(self.opts.drain_s - (deadline - time.monotonic()))
        self.spso_lag = self._lag()

    def _lag(self) -> dict[int, tuple[int, int]] | str:
        """Per partition (start offset, lag) from DescribeShareGroupOffsets at the group's coordinator."""
        from kio.schema.describe_share_group_offsets.v1.request import (
            DescribeShareGroupOffsetsRequest,
            DescribeShareGroupOffsetsRequestGroup,
            DescribeShareGroupOffsetsRequestTopic,
        )

        from kshare_sidecar.protocol.blocking import BlockingConnection

        request = DescribeShareGroupOffsetsRequest(groups=(DescribeShareGroupOffsetsRequestGroup(
            group_id=self.group, topics=(DescribeShareGroupOffsetsRequestTopic(
                topic_name=self.topic, partitions=tuple(range(TOPIC_PARTITIONS))),)),))
        problems = []
        for node, sc in self.sidecars.items():  # the group's coordinator answers; the others say NOT_COORDINATOR
            try:
                with BlockingConnection("127.0.0.1", sc.port, timeout=30, client_id="soak") as conn:
                    (group,) = conn.call(request).groups
            except Exception as exc:
                problems.append(f"sidecar {node}: {exc}")
                continue
            if int(group.error_code) == 0 and group.topics:
                return {p.partition_index: (p.start_offset, p.lag) for t in group.topics for p in t.partitions}
            problems.append(f"sidecar {node}: {group.error_code.name}")
        return f"unread: {'; '.join(problems)}"

    def stop(self) -> None:
        self._producing.clear()
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.proc.wait(60)
            except subprocess.TimeoutExpired:
                w.proc.kill()
            self.ledger.add(w.tail.new_events())
        for sc in self.sidecars.values():
            sc.stop()
        self.broker.stop()


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _scrape(port: int) -> dict[str, list[tuple[float, float]]]:
    """The total-time histogram's cumulative buckets by request, from one sidecar's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except OSError:
        return {}
    out: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "kshare_request_total_time_seconds":
            continue
        for s in family.samples:
            if s.name.endswith("_bucket"):
                out.setdefault(s.labels["request"], []).append((float(s.labels["le"]), s.value))
    return {k: sorted(v) for k, v in out.items()}
