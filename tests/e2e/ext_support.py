"""Helpers of the extension scenarios (docs/extensions.md): ext_worker.py processes, keyed
producing with headers, reading a topic back whole."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from tests.support import unique

EXT_WORKER = str(Path(__file__).with_name("ext_worker.py"))


class ExtWorker:
    """One ext_worker.py process and its event log."""

    def __init__(self, bootstrap: str, group: str, topic: str, out: Path, **opts) -> None:
        self.out = out
        args = [sys.executable, EXT_WORKER, "--bootstrap", bootstrap, "--group", group, "--topic", topic,
                "--out", str(out)]
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def events(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip().endswith("}")]

    def wait(self, timeout: float = 240) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def stderr(self) -> str:
        return self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""


def wait_for_assigned_members(bootstrap: str, group: str, members: int, timeout: float = 60) -> None:
    """Until ``group`` has ``members`` members that each have a partition (ShareGroupDescribe through
    kshare's admin client): records produced before a slow process joined would all go elsewhere."""
    from kshare_sidecar.cli.kclient import AdminClient, ClientError

    deadline, seen = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        try:
            with AdminClient(bootstrap) as admin:
                described = admin.describe_group(group).members
            seen = sum(1 for m in described if any(tp.partitions for tp in m.assignment.topic_partitions))
        except ClientError:  # coordinator not available yet
            seen = 0
        if seen >= members:
            return
        time.sleep(0.2)
    raise AssertionError(f"only {seen} of {members} members of {group} were assigned after {timeout} s")


def produce_records(bootstrap: str, topic: str, records: list[tuple[str | None, str, list]], *,
                    partition: int = 0) -> None:
    """(key, value, headers) in order, to one partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value, headers in records:
        producer.produce(topic, key=key.encode() if key is not None else None, value=value.encode(),
                         headers=headers, partition=partition)
    assert producer.flush(30) == 0


def create_dlq_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """A dead-letter topic as Kafka 4.4 wants it: with errors.deadletterqueue.group.enable=true (through
    the sidecar, which keeps that opt-in for a backend whose topic configs cannot hold it)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={"errors.deadletterqueue.group.enable": "true"})]
                        )[topic].result(30)


def read_all(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> list:
    """Every record of ``topic`` (all partitions, from the start) once ``expected`` arrived or time is up."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                if len(got) >= expected:
                    # a little longer: duplicates would show up too
                    extra = consumer.poll(2.0)
                    if extra is None:
                        break
                    m = extra
                else:
                    continue
            if m.error() is None:
                got.append(m)
    finally:
        consumer.close()
    return got
