"""What the migration tests share: consumers in phases, the CLI, and the delivery ledger.

A *phase* is a stretch of consumption against one side (kshare or native Kafka). A window phase
leaves records in flight: a holder takes the first records and keeps them while a worker accepts
(and rejects every ``reject_every``-th) the next ``accept`` records, then both stop — the held
records are released, so the share-partition's start offset stays at the first of them and
everything the worker acknowledged lies above it. A drain phase accepts everything until idle.

The ledger counts, over all phases, every delivery of a record that an earlier phase had already
acknowledged (accepted or rejected): exactly what a move cannot carry, so it must equal the sum of
the moves' predictions (``redelivered`` of their dry runs).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer

WORKER = str(Path(__file__).with_name("migration_worker.py"))


def produce_small_batches(bootstrap: str, topic: str, count: int, *, partitions: int = 1, batch: int = 10) -> None:
    """``count`` records in batches of at most ``batch`` (a holder then takes one batch, not the log)."""
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": batch, "linger.ms": 2})
    for i in range(count):
        producer.produce(topic, value=f"v-{i}".encode(), partition=i % partitions)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def kshare_state(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``kshare state <args>`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "state", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def plan_of(done: subprocess.CompletedProcess[str]) -> dict:
    """The one group plan a ``--json`` run printed."""
    plans = json.loads(done.stdout)
    assert len(plans) == 1, done.stdout
    return plans[0]


def refusal_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if ": refused: " in line]


class Worker:
    def __init__(self, bootstrap: str, group: str, topic: str, out: Path, **opts: object) -> None:
        self.out = out
        args = [sys.executable, WORKER, "--bootstrap", bootstrap, "--group", group, "--topic", topic, "--out", str(out)]
        for key, value in opts.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(str(out) + ".err", "w"))

    def events(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip().endswith("}")]

    def wait_for(self, ev: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(e["ev"] == ev for e in self.events()):
            assert self.proc.poll() is None, f"worker exited: {Path(str(self.out) + '.err').read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"no {ev} from {self.out.name} in {timeout} s"
            time.sleep(0.3)

    def stop(self, timeout: float = 120) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout)


@dataclass
class Phase:
    """What one phase's consumers saw: deliveries in order, and the records acknowledged.

    A record counts as acknowledged when the last thing a consumer did with it was an
    acknowledgement. Usually that acknowledgement succeeded; one reported as failed while the
    backend was down may still have been written (the sidecar re-reads the state after an
    unconfirmed write, and such records are not delivered again) — a failure that was real brings
    the record back within the phase, as its last event, and it is not acknowledged."""

    name: str
    deliveries: list[tuple[int, int]] = field(default_factory=list)
    acked: dict[tuple[int, int], str] = field(default_factory=dict)
    held: set[tuple[int, int]] = field(default_factory=set)
    failed_acks: int = 0

    def add(self, worker: Worker, *, holder: bool = False) -> None:
        for e in worker.events():
            key = (e.get("p"), e.get("o"))
            if e["ev"] == "rec":
                self.deliveries.append(key)
                self.acked.pop(key, None)
                if holder:
                    self.held.add(key)
            elif e["ev"] == "ack":
                self.acked[key] = e["t"]
                self.failed_acks += not e["ok"]


def window_phase(name: str, bootstrap: str, group: str, topic: str, tmp: Path, *, accept: int,
                 reject_every: int = 50, on_holding=None) -> Phase:
    """Records left in flight (see the module docstring). ``on_holding()`` runs while the holder
    holds and the worker has stopped: the group still has a consumer connected."""
    holder = Worker(bootstrap, group, topic, tmp / f"{name}-hold.jsonl", mode="hold", max_poll_records=10)
    try:
        holder.wait_for("holding")
        work = Worker(bootstrap, group, topic, tmp / f"{name}-work.jsonl", mode="work", max=accept,
                      reject_every=reject_every)
        assert work.proc.wait(240) == 0
        if on_holding is not None:
            on_holding()
    finally:
        holder.stop()
    phase = Phase(name)
    phase.add(holder, holder=True)
    phase.add(work)
    return phase


def drain_phase(name: str, bootstrap: str, group: str, topic: str, tmp: Path, *, idle_s: float = 8) -> Phase:
    work = Worker(bootstrap, group, topic, tmp / f"{name}-work.jsonl", mode="work", idle_s=idle_s)
    assert work.proc.wait(600) == 0
    phase = Phase(name)
    phase.add(work)
    return phase


def delivered_again(phases: list[Phase]) -> int:
    """Deliveries of records an earlier phase had acknowledged (accepted or rejected)."""
    done: set[tuple[int, int]] = set()
    again = 0
    for phase in phases:
        again += sum(1 for d in phase.deliveries if d in done)
        done |= set(phase.acked)
    return again


def accepted_once(phases: list[Phase]) -> Counter:
    """How often each record was accepted over all phases."""
    return Counter(k for phase in phases for k, kind in phase.acked.items() if kind == "accept")


def wait_until_empty(args: list[str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Run a dry run until it is no longer refused for connected consumers (their leave is written
    a moment after they close); the last run is returned."""
    deadline = time.monotonic() + timeout
    while True:
        done = kshare_state(*args)
        if "consumer(s) connected" not in done.stderr or time.monotonic() > deadline:
            return done
        time.sleep(1)
