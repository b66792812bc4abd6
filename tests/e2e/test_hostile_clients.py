"""Hostile *authenticated* clients, on native Kafka 4.4 and on kshare over Kafka 3.9 side by side
(``make test-hostile``; docs/security.md, "Limits against hostile clients").

Each target has a SASL_PLAINTEXT listener (PLAIN users alice and mallory). Mallory is the hostile
client: authenticated, then asking for 10,000 share sessions, a billion MaxRecords, more
connections from one address than allowed, a request larger than socket.request.max.bytes,
thousands of connections at the process's open-file limit (kshare only: a sidecar's limit can be
lowered in place), a pipelined request flood (kshare only), and records acquired and never
acknowledged. Alice is a confluent-kafka ShareConsumer that must keep being served. Every refusal
is checked by the code a broker sends (or its closing the connection, where a broker sends
nothing), the same on both targets; on kshare also the sidecar's one rate-limited log line and
its RSS, which is printed at the end of the module (the worst case is the note's figure).
"""

from __future__ import annotations

import resource
import socket
import time
from collections import Counter
from dataclasses import dataclass

import pytest

from kshare_sidecar.testing.kafka import free_port
from tests.e2e.conftest import SidecarProcess
from tests.e2e.hostile_support import (
    USERS,
    AuthedConnection,
    LegitConsumer,
    SaslPlainBroker,
    acquired,
    join,
    member_id,
    rss_mib,
    share_fetch,
    topic_id,
    wait_for,
)
from tests.support import create_topic, produce, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.optin("hostile"), pytest.mark.timeout(900)]

SESSIONS = 4  # group.share.max.share.sessions (Kafka needs it >= group.share.max.size: both 4)
PER_CONNECTION = 2  # share.sessions.max.per.connection (kshare's own)
LOCK_MS = 6000
RECORD_LOCKS = 2000  # group.share.partition.max.record.locks: Kafka's default
HOSTILE_IP, IP_CAP = "127.0.0.2", 3
SHARE_SESSION_LIMIT_REACHED = 133
QUEUED_BYTES = 200 * 1024 * 1024  # queued.max.request.bytes (Kafka's default is -1, no limit)
MEMORY: dict[str, tuple[float, float]] = {}  # scenario -> (sidecar RSS before, worst during) in MiB


@dataclass
class Target:
    name: str
    port: int  # the SASL_PLAINTEXT listener
    backend: str  # where topics are made and records produced
    sidecar: SidecarProcess | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def prepare(self, group: str) -> None:
        if self.sidecar is None:  # the sidecar's test default is already earliest
            set_group_config(self.backend, group, {"share.auto.offset.reset": "earliest"})

    def rss(self) -> float:
        return rss_mib(self.sidecar.proc.pid) if self.sidecar and self.sidecar.proc else 0.0

    def log(self) -> str:
        return self.sidecar.log_path.read_text(errors="replace") if self.sidecar else ""


@pytest.fixture(scope="module")
def native44():
    broker = SaslPlainBroker("4.4", heap="512m", extra_config={
        "group.share.max.share.sessions": str(SESSIONS), "group.share.max.size": str(SESSIONS),
        "max.connections.per.ip.overrides": f"{HOSTILE_IP}:{IP_CAP}",
        "group.share.record.lock.duration.ms": str(LOCK_MS), "group.share.min.record.lock.duration.ms": "1000",
        "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000"})
    with broker:
        yield broker


@pytest.fixture(scope="module")
def hostile_sidecar(kafka_39, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    users = tmp / "users"
    users.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    port, sasl_port, metrics_port = free_port(), free_port(), free_port()
    sc = SidecarProcess(kafka_39.bootstrap, tmp / "sidecar.log", port=port, env={
        "KSHARE_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-512", "KSHARE_SASL_AUTHENTICATOR": "static",
        "KSHARE_SASL_CREDENTIALS_FILE": str(users), "KSHARE_GROUP_SHARE_MAX_SHARE_SESSIONS": str(SESSIONS),
        "KSHARE_GROUP_SHARE_MAX_SIZE": str(SESSIONS), "KSHARE_SHARE_SESSIONS_MAX_PER_CONNECTION": str(PER_CONNECTION),
        "KSHARE_MAX_CONNECTIONS_PER_IP_OVERRIDES": f"{HOSTILE_IP}:{IP_CAP}", "KSHARE_METRICS_PORT": str(metrics_port),
        "KSHARE_QUEUED_MAX_REQUEST_BYTES": str(QUEUED_BYTES)},
        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}").start()
    sc.sasl_port, sc.metrics_port = sasl_port, metrics_port
    assert wait_for(lambda: _connectable(sasl_port), 30)
    yield sc
    sc.stop()
    if MEMORY:
        print("\nkshare sidecar RSS under hostile clients (MiB, before -> worst during):")
        for scenario, (before, worst) in MEMORY.items():
            print(f"  {scenario:40s} {before:7.1f} -> {worst:7.1f}")


def _connectable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture(params=["kshare", "native"])
def target(request) -> Target:
    if request.param == "native":
        broker = request.getfixturevalue("native44")
        return Target("native", broker.sasl_port, broker.bootstrap)
    sc = request.getfixturevalue("hostile_sidecar")
    return Target("kshare", sc.sasl_port, sc.backend, sc)


class Watermark:
    """The sidecar's highest RSS while a scenario runs (sampled by the scenario's own loops)."""

    def __init__(self, target: Target, scenario: str) -> None:
        self.target, self.scenario = target, scenario
        self.before = self.worst = target.rss()

    def sample(self) -> None:
        if self.target.sidecar is not None:
            self.worst = max(self.worst, self.target.rss())
            MEMORY[self.scenario] = (self.before, self.worst)


def test_ten_thousand_share_sessions_evict_nobody_and_are_refused(target):
    """group.share.max.share.sessions full: SHARE_SESSION_LIMIT_REACHED after MaxWaitMs, nobody's
    session evicted (alice keeps consuming), all freed when mallory's connections close."""
    topic, empty, group = unique("sess"), unique("sess-empty"), unique("sess-g")
    create_topic(target.backend, topic, 1)
    create_topic(target.backend, empty, 1)
    target.prepare(group)
    produce(target.backend, topic, 20)
    alice = LegitConsumer(target.bootstrap, group, topic)
    mark = Watermark(target, "10,000 share sessions")
    try:
        assert wait_for(lambda: len(alice.offsets()) == 20, 60), f"alice got {len(alice.offsets())} of 20"
        conns = [AuthedConnection("127.0.0.1", target.port) for _ in range(2)]
        tid = topic_id(conns[0], empty)
        accepted: Counter[int] = Counter()
        codes: Counter[int] = Counter()
        for i in range(10_000):
            n = 0 if i < 100 else 1  # first on one connection, then on another
            response, _ = share_fetch(conns[n], unique("mallory-g"), member_id(), 0, tid, wait_ms=0)
            codes[int(response.error_code)] += 1
            if int(response.error_code) == 0:
                accepted[n] += 1
            if i % 1000 == 0:
                mark.sample()
        mark.sample()
        # one more, waiting: a broker holds a refused epoch-0 request for MaxWaitMs
        response, took = share_fetch(conns[0], unique("mallory-g"), member_id(), 0, tid, wait_ms=1500)
        print(f"\n[{target.name}] 10,000 session requests: accepted per connection {dict(accepted)}, "
              f"codes {dict(codes)}; a refusal with MaxWaitMs 1500 took {took:.2f} s")
        assert sum(accepted.values()) == SESSIONS - 1  # alice's consumer holds the other one
        assert codes[SHARE_SESSION_LIMIT_REACHED] == 10_000 - (SESSIONS - 1)
        assert int(response.error_code) == SHARE_SESSION_LIMIT_REACHED and took >= 1.4
        # one connection may not take more than its share on kshare (share.sessions.max.per.connection);
        # Kafka has no such limit and gives the first connection all it asks for
        assert accepted[0] == (PER_CONNECTION if target.name == "kshare" else SESSIONS - 1)
        produce(target.backend, topic, 20, prefix="after")  # alice's session was not evicted
        assert wait_for(lambda: len(alice.offsets()) == 40, 60), f"alice got {len(alice.offsets())} of 40"
        for conn in conns:
            conn.close()
        # mallory's connections closed: their sessions are gone, a new one opens
        probe = AuthedConnection("127.0.0.1", target.port, "alice")

        def opens() -> bool:
            return int(share_fetch(probe, group, member_id(), 0, tid, wait_ms=0)[0].error_code) == 0
        assert wait_for(opens, 15)
        probe.close()
    finally:
        alice.stop()
    if target.name == "kshare":
        lines = [ln for ln in target.log().splitlines() if "SHARE_SESSION_LIMIT_REACHED" in ln]
        assert 1 <= len(lines) <= 6, lines[:8]  # rate-limited: 5 a minute, then a count
        assert mark.worst - mark.before < 30, f"RSS {mark.before:.1f} -> {mark.worst:.1f} MiB"


def test_a_billion_max_records_is_clamped_and_unacknowledged_records_come_back(target):
    """MaxRecords 2^31-1 acquires at most the in-flight window (partition.max.record.locks); a client
    that then never acknowledges holds them only for the lock duration: alice gets them afterwards
    with delivery count 2, and nothing before the locks expire (the window is full)."""
    topic, group = unique("billion"), unique("billion-g")
    create_topic(target.backend, topic, 1)
    target.prepare(group)
    _produce_in_batches(target.backend, topic, 5000, 100)
    mark = Watermark(target, "MaxRecords 2^31-1, never acknowledged")
    mallory = AuthedConnection("127.0.0.1", target.port)
    tid = topic_id(mallory, topic)
    member, epoch, held = member_id(), 0, []
    join(mallory, group, member, topic)  # a member of the group, as any share consumer
    deadline = time.monotonic() + 60
    while not held and time.monotonic() < deadline:  # a new share-partition may answer empty while it initializes
        response, _ = share_fetch(mallory, group, member, epoch, tid, wait_ms=3000, max_records=2**31 - 1,
                                  max_bytes=2**31 - 1)
        assert int(response.error_code) == 0, response
        held, epoch = acquired(response), epoch + 1
    grabbed_at = time.monotonic()
    mark.sample()
    count = sum(last - first + 1 for first, last, _ in held)
    print(f"\n[{target.name}] MaxRecords 2^31-1: {count} records acquired in {len(held)} ranges")
    assert int(response.error_code) == 0 and 0 < count <= RECORD_LOCKS, held[:3]
    alice = LegitConsumer(target.bootstrap, group, topic)
    try:
        assert wait_for(lambda: len(alice.offsets()) == 5000, 120), f"alice got {len(alice.offsets())} of 5000"
        mark.sample()
    finally:
        alice.stop()
        mallory.close()  # only now: mallory kept its connection and session open throughout
    held_offsets = {o for first, last, _ in held for o in range(first, last + 1)}
    seen = [(o, dc, t) for _, o, dc, t in alice.records if o in held_offsets]
    assert seen and min(dc for _, dc, _ in seen) >= 2, "mallory's records came back with their delivery count up"
    first_back = min(t for _, _, t in seen) - grabbed_at
    print(f"[{target.name}] mallory's records reached alice {first_back:.1f} s after mallory acquired them")
    assert first_back >= LOCK_MS / 1000 * 0.8
    if target.name == "kshare":
        assert mark.worst - mark.before < 30, f"RSS {mark.before:.1f} -> {mark.worst:.1f} MiB"


def _produce_in_batches(bootstrap: str, topic: str, count: int, per_batch: int) -> None:
    """Log batches of ``per_batch`` records: a share-partition's window is acquired batch by batch."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": per_batch})
    for i in range(count):
        producer.produce(topic, f"r-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def test_connections_over_the_per_ip_override_are_closed(target):
    """max.connections.per.ip.overrides: the fourth connection from 127.0.0.2 is closed by the
    broker (no error code: Kafka closes it), others' addresses are unaffected, and a slot freed is
    usable again."""
    mine = [AuthedConnection("127.0.0.1", target.port, source=HOSTILE_IP) for _ in range(IP_CAP)]
    try:
        with pytest.raises((ConnectionError, OSError)):
            AuthedConnection("127.0.0.1", target.port, source=HOSTILE_IP, timeout=10)
        AuthedConnection("127.0.0.1", target.port, "alice").close()  # 127.0.0.1 is not limited
        mine.pop().close()

        def reconnects() -> bool:
            try:
                mine.append(AuthedConnection("127.0.0.1", target.port, source=HOSTILE_IP, timeout=5))
                return True
            except (ConnectionError, OSError):
                return False
        assert wait_for(reconnects, 15, step=0.5)
    finally:
        for conn in mine:
            conn.close()
    if target.name == "kshare":
        assert f"max.connections.per.ip.overrides={IP_CAP} reached for {HOSTILE_IP}" in target.log()


def test_a_request_over_socket_request_max_bytes_closes_the_connection(target):
    """A size prefix of 200 MiB after authentication (over socket.request.max.bytes, 100 MiB), and
    of 1 MiB before it (over sasl.server.max.receive.size, 512 KiB): the connection is closed and
    nothing is allocated for the announced size."""
    mark = Watermark(target, "200 MiB request frames")
    for _ in range(20):
        conn = AuthedConnection("127.0.0.1", target.port)
        conn.send_bytes((200 * 1024 * 1024).to_bytes(4, "big") + b"\0" * 4096)
        assert conn.closed_by_peer(10)
        conn.close()
        mark.sample()
    raw = socket.create_connection(("127.0.0.1", target.port), timeout=10)
    raw.sendall((1024 * 1024).to_bytes(4, "big") + b"\0" * 4096)
    try:
        assert raw.recv(1) == b""
    except ConnectionResetError:
        pass
    raw.close()
    if target.name == "kshare":
        assert mark.worst - mark.before < 20, f"RSS {mark.before:.1f} -> {mark.worst:.1f} MiB"


def test_large_partial_frames_on_many_connections_are_held_to_queued_max_request_bytes(hostile_sidecar):
    """kshare only: six authenticated connections each announce a 99 MiB request and send all but
    its last byte. Without a pool the sidecar would buffer ~600 MiB; with queued.max.request.bytes
    = 200 MiB it reads two of them and leaves the others unread (Kafka mutes them the same way)."""
    sc = hostile_sidecar
    target = Target("kshare", sc.sasl_port, sc.backend, sc)
    mark = Watermark(target, "6 x 99 MiB partial frames, pool 200 MiB")
    size = 99 * 1024 * 1024
    conns = [AuthedConnection("127.0.0.1", target.port) for _ in range(6)]
    left = {id(c): size - 1 for c in conns}
    chunk = b"\0" * (1024 * 1024)
    for conn in conns:
        conn.send_bytes(size.to_bytes(4, "big"))
        conn.sock.setblocking(False)
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline and any(left.values()):
        progressed = False
        for conn in conns:
            n = left[id(conn)]
            if n:
                try:
                    left[id(conn)] -= conn.sock.send(chunk[:min(n, len(chunk))])
                    progressed = True
                except BlockingIOError:
                    pass
        if not progressed:
            time.sleep(0.05)
        mark.sample()
    sent_mib = sum(size - 1 - n for n in left.values()) / 1024 / 1024
    print(f"\n[kshare] 6 partial 99 MiB frames: {sent_mib:.0f} MiB written in 25 s; sidecar RSS "
          f"{mark.before:.1f} -> {mark.worst:.1f} MiB")
    for conn in conns:
        conn.close()
    assert sc.proc.poll() is None
    assert sent_mib < 6 * 99 - 50, "every frame was read: the pool held nothing back"
    assert mark.worst - mark.before < QUEUED_BYTES / 1024 / 1024 * 1.4, f"RSS {mark.before:.1f} -> {mark.worst:.1f}"


def test_thousands_of_connections_at_the_open_file_limit(hostile_sidecar, kafka_39):
    """kshare only (a sidecar's open-file limit is lowered in place with prlimit): 1,500
    authenticated connections against a limit of 300 descriptors. The sidecar refuses those that
    would eat into the descriptors it keeps for itself, with one rate-limited line, and alice —
    connected before — keeps consuming (her records need the sidecar's backend connections)."""
    sc = hostile_sidecar
    target = Target("kshare", sc.sasl_port, sc.backend, sc)
    topic, group = unique("fds"), unique("fds-g")
    create_topic(target.backend, topic, 1)
    produce(target.backend, topic, 10)
    alice = LegitConsumer(target.bootstrap, group, topic)
    pid = sc.proc.pid
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    mark = Watermark(target, "1,500 connections, 300 fds")
    conns, refused = [], 0
    try:
        assert wait_for(lambda: len(alice.offsets()) == 10, 60)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (300, old[1]))
        for i in range(1500):
            try:
                conns.append(AuthedConnection("127.0.0.1", target.port, source="127.0.0.3", timeout=10))
            except (ConnectionError, OSError):
                refused += 1
            if i % 100 == 0:
                mark.sample()
        print(f"\n[kshare] 1,500 connections at a limit of 300 open files: {len(conns)} accepted, {refused} closed")
        assert refused > 0 and 100 < len(conns) < 300
        produce(target.backend, topic, 10, prefix="during")  # the sidecar still reads its backend
        assert wait_for(lambda: len(alice.offsets()) == 20, 60), f"alice got {len(alice.offsets())} of 20"
        mark.sample()
    finally:
        for conn in conns:
            conn.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        alice.stop()
    AuthedConnection("127.0.0.1", target.port).close()  # accepted again once they are gone
    log = target.log()
    lines = [ln for ln in log.splitlines() if "open files nearly exhausted" in ln]
    assert 1 <= len(lines) <= 6, lines[:8]
    assert "out of system resource" not in log and "Too many open files" not in log
    assert sc.proc.poll() is None
    assert mark.worst - mark.before < 60, f"RSS {mark.before:.1f} -> {mark.worst:.1f} MiB"


def test_a_pipelined_request_flood_is_held_by_backpressure(hostile_sidecar):
    """kshare only: ShareAcknowledge frames written for 20 s without reading an answer. The sidecar
    reads at most 1 MiB ahead and keeps at most max.inflight.requests.per.connection (64) answers
    outstanding, so it handles far fewer than were written and the rest of the flood waits in the
    kernel's socket buffers, not in the sidecar's memory (before the read-ahead bound: +130 MiB)."""
    from kio.schema.share_acknowledge.v1.request import ShareAcknowledgeRequest

    from kshare_sidecar.protocol.requests import request_frame

    sc = hostile_sidecar
    target = Target("kshare", sc.sasl_port, sc.backend, sc)
    mark = Watermark(target, "pipelined flood (20 s, never read)")
    conn = AuthedConnection("127.0.0.1", target.port)
    frame = request_frame(ShareAcknowledgeRequest(group_id="flood", member_id=member_id(), share_session_epoch=5,
                                                  topics=()), 99, "flood")
    handled_before = _handled_acks(sc)
    conn.sock.setblocking(False)
    sent, deadline, blocked_since = 0, time.monotonic() + 20, None
    while time.monotonic() < deadline:
        try:
            conn.sock.send(frame)
            sent, blocked_since = sent + 1, None
        except BlockingIOError:
            blocked_since = blocked_since or time.monotonic()
            if time.monotonic() - blocked_since > 3:  # held for 3 s: the sidecar is not reading
                break
            time.sleep(0.05)
            mark.sample()
    # it goes on answering what it has read (slowly, into socket buffers the client does not read)
    time.sleep(5)
    mark.sample()
    handled = _handled_acks(sc) - handled_before
    print(f"\n[kshare] pipelined flood: {sent} requests written, {handled} handled 5 s later: the rest "
          f"wait in socket buffers")
    assert sent > handled + 64, (sent, handled)
    conn.close()
    assert sc.proc.poll() is None
    assert mark.worst - mark.before < 30, f"RSS {mark.before:.1f} -> {mark.worst:.1f} MiB"


def _handled_acks(sc) -> int:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{sc.metrics_port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("kshare_total_share_acknowledgement_requests_total "):
            return int(float(line.split()[1]))
    raise AssertionError("no ShareAcknowledge counter in /metrics")
