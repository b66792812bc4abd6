"""Helpers of the console suite (`make test-console`): load from real clients (confluent-kafka
producer and ShareConsumer threads), the console's JSON over HTTP, reading a topic back."""

from __future__ import annotations

import base64
import http.cookiejar
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer

TYPES = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE, "reject": AcknowledgeType.REJECT}


def decide(value: bytes, delivery_count: int) -> str:
    """rej-/evil-/bin- values are rejected, rel- released every time, relonce- on the first delivery."""
    if value.startswith((b"rej-", b"evil-", b"\x00bin-")):
        return "reject"
    if value.startswith(b"rel-"):
        return "release"
    if value.startswith(b"relonce-") and delivery_count == 1:
        return "release"
    return "accept"


@dataclass
class ShareWorker:
    """A confluent-kafka ShareConsumer in a thread, explicit acks by :func:`decide` (or holding
    what it gets, unacknowledged, with ``hold``); every delivery recorded."""

    bootstrap: str
    group: str
    topic: str
    hold: bool = False
    fixed: bool = False  # the bug is fixed: accept everything
    max_poll_records: int = 50
    extra: dict = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"share-worker-{self.group}")

    def start(self) -> ShareWorker:
        self._thread.start()
        return self

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def deliveries(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def _run(self) -> None:
        consumer = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "log_level": 3,
                                  "share.acknowledgement.mode": "explicit",
                                  "max.poll.records": self.max_poll_records, **self.extra})
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                msgs = [m for m in consumer.poll(0.5) if m.error() is None]
                for m in msgs:
                    value = m.value() or b""
                    kind = "hold" if self.hold else "accept" if self.fixed else decide(value, m.delivery_count())
                    headers = dict(m.headers() or [])
                    with self._lock:
                        self.events.append({"p": m.partition(), "o": m.offset(), "dc": m.delivery_count(),
                                            "v": value, "ack": kind, "t": time.time(),
                                            "redriven": headers.get("kshare.redrive.source")})
                    if not self.hold:
                        consumer.acknowledge(m, TYPES[kind])
                if msgs and not self.hold:
                    consumer.commit_sync()
                if self.hold and msgs:
                    self._stop.wait()  # keep the acquisition: records stay in flight
        finally:
            consumer.close()


class Producing:
    """Produce ``prefix-i`` values at ``rate`` records/s until stopped (load beside a redrive)."""

    def __init__(self, bootstrap: str, topic: str, rate: float, prefix: str = "load",
                 value_of=None) -> None:
        self.bootstrap, self.topic, self.rate, self.prefix = bootstrap, topic, rate, prefix
        self.value_of = value_of or (lambda i: f"{prefix}-{i}".encode())
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="producing")

    def start(self) -> Producing:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self.sent

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                producer.produce(self.topic, key=str(self.sent).encode(), value=self.value_of(self.sent))
                self.sent += 1
            producer.poll(0)
            time.sleep(0.02)
        producer.flush(30)


def produce_values(bootstrap: str, topic: str, values: list[bytes], *, partitions: int = 1,
                   one_per_batch: bool = False) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=i % partitions,
                         headers=[("trace", f"t{i}".encode())])
        if one_per_batch:  # acquisitions take whole batches: small ones let several consumers share
            producer.flush(30)
    assert producer.flush(30) == 0


def read_topic(bootstrap: str, topic: str, *, idle_s: float = 5.0, timeout_s: float = 60.0) -> list:
    """Every record of ``topic`` (read_committed), until nothing new came for ``idle_s``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    out, last, started = [], time.monotonic(), time.monotonic()
    try:
        while time.monotonic() - last < idle_s and time.monotonic() - started < timeout_s:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m)
                last = time.monotonic()
    finally:
        consumer.close()
    return out


class ConsoleClient:
    """The console's JSON API as a script would use it (cookies kept; Basic credentials optional)."""

    def __init__(self, url: str, user: str | None = None, password: str | None = None) -> None:
        self.url = url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.auth = {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()} \
            if user else {}
        self.token = ""

    def get(self, path: str) -> tuple[int, dict]:
        return self._call(urllib.request.Request(self.url + path, headers=self.auth))

    def post(self, path: str, data: dict) -> tuple[int, dict]:
        if not self.token:
            self.token = self.get("/api/session")[1]["csrf"]
        req = urllib.request.Request(self.url + path, data=json.dumps(data).encode(), method="POST", headers={
            **self.auth, "Content-Type": "application/json", "Origin": self.url, "X-Kshare-Csrf": self.token})
        return self._call(req)

    def _call(self, req: urllib.request.Request) -> tuple[int, dict]:
        try:
            with self.opener.open(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = e.read()
            try:
                return e.code, json.loads(body)
            except ValueError:
                return e.code, {"error": body.decode(errors="replace")}

    def wait_redrive(self, group: str, timeout_s: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _, view = self.get("/api/redrives")
            mine = [s for s in view.get("redrives", []) if s["request"]["group"] == group]
            if mine and mine[0]["state"] not in ("starting", "running"):
                return mine[0]
            time.sleep(0.5)
        raise AssertionError(f"the redrive of {group} did not end in {timeout_s} s")


def wait_for(predicate, timeout: float, step: float = 0.3, what: str = "condition", detail=None):
    """The predicate's first truthy value; on timeout, an AssertionError with ``detail()`` if given."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what} not reached in {timeout} s" + (f"\n{detail()}" if detail else ""))
