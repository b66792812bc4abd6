"""The nemesis lab: a cluster of sidecars on a Kafka backend, every process on its own address in a
network namespace the test makes (tests/e2e/netlab.py, named ``neme…``), under a steady
share-consume, while the network between them is cut, split, slowed or flapped.

Hosts: ``kafka-1..N`` (Apache Kafka 3.9 from the harness's jars, KRaft, every node a voter),
``delay`` (tests/e2e/netlab_delay.py: one address per broker, standing in for it towards the
sidecars, so each sidecar's backend link can be slowed alone), ``s1..s3`` (``kshare sidecar run``,
one cluster, node ids 1..3), ``c1..c4`` (share consumers, tests/e2e/nemesis_worker.py: confluent-
kafka's ShareConsumer and kshare's asyncio client, explicit ACCEPT), ``prod`` (a producer at a
steady rate straight to the backend, and the tools: tests/e2e/nemesis_tools.py).

Faults are iptables DROP rules in a host's own namespace (:meth:`Lab.block`) — silent, as a cut
cable or a firewall — or the proxy's per-sidecar delay; :meth:`Run.heal` removes them, and the
lab's namespaces (with every rule in them) go at the end, also after a failure. Traffic stays in
the lab's namespaces. A run's history (what every client saw, the state topic, the faults'
times, the sidecars' exits) goes to the checker, :mod:`kshare_sidecar.testing.nemesis`.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kshare_sidecar.testing.kafka import KafkaBroker, _cluster_id
from kshare_sidecar.testing.maven import kafka_libs, require_tool
from kshare_sidecar.testing.process import die_with_parent
from kshare_sidecar.testing.nemesis import History
from tests.e2e.nemesis_history import event_lines, history_of, log_time
from tests.e2e.netlab import Lab, client_env

HERE = Path(__file__).parent
PORT = 9092
ALIAS = "10.77.0.{}"  # the delay proxy's address standing in for broker n: .20n


@dataclass(frozen=True)
class Settings:
    brokers: int = 1
    sidecars: int = 3
    clients: tuple[str, ...] = ("confluent", "asyncio", "confluent", "asyncio")
    partitions: int = 12
    state_partitions: int = 8
    session_ms: int = 10_000  # cluster.session.timeout.ms: Kafka's and kshare's default
    heartbeat_ms: int = 1000
    lock_ms: int = 15_000
    limit: int = 10  # delivery count limit: a record redelivered by many faults is not archived
    backlog: int = 4000
    rate: float = 150.0  # records per second, for the whole run
    work_ms: float = 0.5
    max_poll_records: int = 100
    unserved_bound_s: float = 15.0


class NetBroker(KafkaBroker):
    """One KRaft node (broker and voter) on a lab host, advertised by its host name."""

    def __init__(self, lab: Lab, host: str, node_id: int, voters: str, brokers: int, cluster_id: str) -> None:
        super().__init__("3.9", heap="512m" if brokers == 1 else "384m")
        self.lab, self.host, self.node_id, self.voters, self.brokers = lab, host, node_id, voters, brokers
        self.port, self.controller_port, self.cluster_id = PORT, 9093, cluster_id

    def _properties(self) -> dict[str, str]:
        assert self.workdir is not None
        rf = str(min(3, self.brokers))
        return {"process.roles": "broker,controller", "node.id": str(self.node_id),
                "controller.quorum.voters": self.voters,
                "listeners": f"PLAINTEXT://0.0.0.0:{PORT},CONTROLLER://0.0.0.0:9093",
                "advertised.listeners": f"PLAINTEXT://{self.host}:{PORT}",
                "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "log.dirs": str(self.workdir / "data"), "num.partitions": "1", "default.replication.factor": rf,
                "min.insync.replicas": "2" if self.brokers >= 3 else "1",
                "offsets.topic.replication.factor": rf, "offsets.topic.num.partitions": "4",
                "transaction.state.log.replication.factor": rf, "transaction.state.log.num.partitions": "4",
                "transaction.state.log.min.isr": "2" if self.brokers >= 3 else "1",
                "group.initial.rebalance.delay.ms": "0", "log.cleaner.backoff.ms": "1000"}

    def _spawn(self, java: str, libs: Path) -> None:
        assert self.workdir is not None
        log = open(self.workdir / "broker.log", "ab")
        with log:
            self._proc = subprocess.Popen(
                [*self.lab.enter(self.host), *self._java(java, libs), "kafka.Kafka",
                 str(self.workdir / "server.properties")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                cwd=self.workdir, preexec_fn=die_with_parent)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        code = (f"import sys; from kshare_sidecar.testing.probe import broker_ready; "
                f"sys.exit(0 if broker_ready({self.host!r}, {PORT}, timeout=2) else 1)")
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"Kafka exited during start-up: {self.log_tail()}")
            if self.lab.python("prod", code, timeout=30).returncode == 0:
                return
            time.sleep(1)
        raise RuntimeError(f"Kafka on {self.host} did not answer: {self.log_tail()}")


class NemesisLab:
    """The hosts and the backend, for many runs (each with its own cluster of sidecars and topic)."""

    def __init__(self, logs: Path, settings: Settings = Settings()) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        self.logs, self.settings = logs, settings
        self.lab = Lab(logs, name="neme")
        self.brokers: list[NetBroker] = []
        self.delay_file = logs / "delays.json"

    def __enter__(self) -> NemesisLab:
        s, lab = self.settings, self.lab.__enter__()
        try:
            names = [f"kafka-{n}" for n in range(1, s.brokers + 1)]
            for name in [*names, "delay", *self.sidecar_hosts, *self.client_hosts, "prod"]:
                lab.add_host(name)
            for n in range(1, s.brokers + 1):
                lab.add_address("delay", ALIAS.format(200 + n))
            for host in self.sidecar_hosts:  # their backend is the proxy
                lab.resolve_as(host, {f"kafka-{n}": ALIAS.format(200 + n) for n in range(1, s.brokers + 1)})
            self.delay_file.write_text("{}")
            lab.popen("delay", [sys.executable, str(HERE / "netlab_delay.py"), str(self.delay_file),
                                *(f"{ALIAS.format(200 + n)}:{PORT}:kafka-{n}:{PORT}" for n in range(1, s.brokers + 1))],
                      env=client_env(), log="delay.log")
            self._start_brokers(names)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def sidecar_hosts(self) -> list[str]:
        return [f"s{n}" for n in range(1, self.settings.sidecars + 1)]

    @property
    def client_hosts(self) -> list[str]:
        return [f"c{n}" for n in range(1, len(self.settings.clients) + 1)]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"kafka-{n}:{PORT}" for n in range(1, self.settings.brokers + 1))

    def ip(self, host: str) -> str:
        return self.lab.hosts[host].ip

    def backend_ips(self) -> list[str]:
        """What a sidecar's backend link is: the proxy's addresses (and the brokers', never used)."""
        n = self.settings.brokers
        return [ALIAS.format(200 + i) for i in range(1, n + 1)] + [self.ip(f"kafka-{i}") for i in range(1, n + 1)]

    def _start_brokers(self, names: list[str]) -> None:
        voters = ",".join(f"{i}@{name}:9093" for i, name in enumerate(names, 1))
        cid = _cluster_id()
        self.brokers = [NetBroker(self.lab, name, i, voters, len(names), cid) for i, name in enumerate(names, 1)]
        java = require_tool("java", "install a Java 17+ runtime")
        import tempfile
        for b in self.brokers:
            b.workdir = Path(tempfile.mkdtemp(prefix=f"kshare-nemesis-{b.host}-"))
            b._launch(java, kafka_libs(b.version))
        for b in self.brokers:
            b._wait_ready()

    def close(self) -> None:
        for b in self.brokers:
            try:
                b.stop()
            except Exception:  # noqa: BLE001 - the lab goes on closing
                pass
        self.lab.close()

    def set_delay(self, host: str, ms: float) -> None:
        delays = json.loads(self.delay_file.read_text() or "{}")
        if ms:
            delays[self.ip(host)] = ms
        else:
            delays.pop(self.ip(host), None)
        self.delay_file.write_text(json.dumps(delays))

    def run(self, name: str, **overrides) -> Run:
        return Run(self, name, **overrides)


@dataclass
class FaultRecord:
    what: str
    started: float
    healed: float | None = None


@dataclass
class Run:
    """One cluster of sidecars, one topic and group, its load and its faults."""

    nl: NemesisLab
    name: str
    env: dict[str, str] = field(default_factory=dict)  # extra KSHARE_* settings for the sidecars
    sidecar_argv: list[str] | None = None  # how a sidecar is started (a deliberately broken build)
    debug: bool = False  # the clients' debug logs (c*.log)
    hold_every: int = 0  # poison records for the consumers (nemesis_worker.py --hold-every)

    def __post_init__(self) -> None:
        s = self.nl.settings
        tag = uuid.uuid4().hex[:8]
        self.topic, self.group, self.cluster = f"nem-{self.name}-{tag}", f"nem-g-{tag}", f"nem-{tag}"
        self.state_topic = f"__kshare_state_nem_{tag}"
        self.dir = self.nl.logs / f"{self.name}-{tag}"
        self.dir.mkdir(parents=True)
        self.sidecars: dict[int, subprocess.Popen] = {}
        self.exits: dict[str, int | None] = {}
        self.clients: list[subprocess.Popen] = []
        self.producer: subprocess.Popen | None = None
        self.faults: list[FaultRecord] = []
        self._blocked: dict[str, list[str]] = {}
        self._flappers: list[threading.Event] = []
        self.settings = s

    # -- processes ------------------------------------------------------------------------------
    def start_sidecar(self, n: int, *, wait: bool = True) -> None:
        s, host = self.settings, f"s{n}"
        env = client_env(**{**dict(
            KSHARE_BOOTSTRAP_SERVERS=self.nl.bootstrap, KSHARE_CLUSTER_NAME=self.cluster, KSHARE_NODE_ID=str(n),
            KSHARE_LISTEN="", KSHARE_LISTENERS=f"PLAINTEXT://0.0.0.0:{PORT}",
            KSHARE_ADVERTISED_LISTENERS=f"PLAINTEXT://{host}:{PORT}", KSHARE_STATE_TOPIC=self.state_topic,
            KSHARE_STATE_TOPIC_PARTITIONS=str(s.state_partitions),
            KSHARE_STATE_TOPIC_REPLICATION_FACTOR=str(min(3, s.brokers)),
            KSHARE_CLUSTER_SESSION_TIMEOUT_MS=str(s.session_ms),
            KSHARE_CLUSTER_HEARTBEAT_INTERVAL_MS=str(s.heartbeat_ms),
            KSHARE_SHARE_AUTO_OFFSET_RESET="earliest", KSHARE_GROUP_SHARE_RECORD_LOCK_DURATION_MS=str(s.lock_ms),
            KSHARE_GROUP_SHARE_DELIVERY_COUNT_LIMIT=str(s.limit)), **self.env})
        argv = self.sidecar_argv or [sys.executable, "-m", "kshare_sidecar.cli"]
        self.sidecars[n] = self.nl.lab.popen(host, [*argv, "sidecar", "run", "--log-level", "INFO"], env=env,
                                             log=f"{self.dir.name}/sidecar{n}.log")
        if wait:
            self.wait_sidecar(n)

    def wait_sidecar(self, n: int, timeout: float = 180) -> None:
        code = (f"import sys; from kshare_sidecar.testing.probe import broker_ready; "
                f"sys.exit(0 if broker_ready('s{n}', {PORT}, timeout=2) else 1)")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sidecars[n].poll() is not None:
                raise RuntimeError(f"sidecar {n} exited: {self.sidecar_log(n)[-3000:]}")
            if self.nl.lab.python("prod", code, timeout=30).returncode == 0:
                return
            time.sleep(1)
        raise RuntimeError(f"sidecar {n} did not open its listener: {self.sidecar_log(n)[-3000:]}")

    def sidecar_log(self, n: int) -> str:
        path = self.dir / f"sidecar{n}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_sidecar(self, n: int, sig: int = signal.SIGTERM) -> int | None:
        proc = self.sidecars.get(n)
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(sig)
        try:
            return proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)

    def start(self) -> None:
        """The cluster, the producer (backlog, then the steady rate) and the consumers."""
        s = self.settings
        made = self.nl.lab.run("prod", [sys.executable, str(HERE / "nemesis_tools.py"), "state-topic", "--bootstrap",
                                        self.nl.bootstrap, "--topic", self.state_topic, "--partitions",
                                        str(s.state_partitions), "--replication", str(min(3, s.brokers))],
                               env=client_env(), timeout=120)
        if made.returncode != 0:  # the checker needs every owner record: no compaction during the run
            raise RuntimeError(f"creating the state topic failed: {made.stderr[-2000:]}")
        for n in range(1, s.sidecars + 1):
            self.start_sidecar(n, wait=False)
        for n in range(1, s.sidecars + 1):
            self.wait_sidecar(n)
        self.produced_path = self.dir / "produced.txt"
        self.producer = self.nl.lab.popen("prod", [sys.executable, str(HERE / "nemesis_tools.py"), "produce",
                                                   "--bootstrap", self.nl.bootstrap, "--topic", self.topic,
                                                   "--partitions", str(s.partitions),
                                                   "--replication", str(min(3, s.brokers)),
                                                   "--backlog", str(s.backlog), "--rate", str(s.rate),
                                                   "--out", str(self.produced_path)],
                                          env=client_env(), log=f"{self.dir.name}/producer.log")
        bootstrap = ",".join(f"{h}:{PORT}" for h in self.nl.sidecar_hosts)
        self.client_paths = []
        for host, kind in zip(self.nl.client_hosts, s.clients):
            out = self.dir / f"{host}-{kind}.jsonl"
            self.client_paths.append((host, out))
            self.clients.append(self.nl.lab.popen(
                host, [sys.executable, str(HERE / "nemesis_worker.py"), "--kind", kind, "--bootstrap", bootstrap,
                       "--group", self.group, "--topic", self.topic, "--out", str(out),
                       "--max-poll-records", str(s.max_poll_records), "--work-ms", str(s.work_ms),
                       "--hold-every", str(self.hold_every), *(["--debug"] if self.debug else [])],
                env=client_env(), log=f"{self.dir.name}/{host}-{kind}.log"))
        if not wait_until(lambda: self.accepted_count() >= s.backlog // 4, 180):
            raise RuntimeError(f"consumption did not get going: {self.accepted_count()} accepted")

    # -- progress -------------------------------------------------------------------------------
    def accepted_count(self) -> int:
        return sum(sum(1 for line in event_lines(path) if '"ev": "ack"' in line and '"ok": true' in line)
                   for _h, path in self.client_paths)

    def produced(self) -> dict[int, int]:
        ends: dict[int, int] = {}
        for line in event_lines(self.produced_path):
            p, o = map(int, line.split())
            ends[p] = max(ends.get(p, 0), o + 1)
        return ends

    def drain(self, timeout: float = 300) -> bool:
        """Stop producing; wait until every record produced has been accepted."""
        if self.producer is not None and self.producer.poll() is None:
            self.producer.send_signal(signal.SIGTERM)
            self.producer.wait(180)
        total = sum(self.produced().values())
        deadline, last, stalled_since = time.monotonic() + timeout, -1, time.monotonic()
        while time.monotonic() < deadline:
            done = self._distinct_accepted()
            if done >= total:
                return True
            if done != last:
                last, stalled_since = done, time.monotonic()
            elif time.monotonic() - stalled_since > 45:
                return False  # nothing accepted for longer than three lock durations: the checker says why
            time.sleep(2)
        return False

    def _distinct_accepted(self) -> int:
        """Records done: accepted, or delivered at the delivery limit (archived: poison)."""
        seen = set()
        limit = self.settings.limit
        for _h, path in self.client_paths:
            for line in event_lines(path):
                if ('"ev": "ack"' in line and '"ok": true' in line) or \
                        ('"ev": "rec"' in line and f'"dc": {limit},' in line):
                    e = json.loads(line)
                    seen.add((e["p"], e["o"]))
        return len(seen)

    # -- faults ---------------------------------------------------------------------------------
    def block(self, what: str, pairs: list[tuple[str, list[str]]]) -> FaultRecord:
        """Cut each host from the addresses given (iptables in the host's namespace)."""
        for host, ips in pairs:
            self.nl.lab.block(host, ips)
            self._blocked.setdefault(host, []).extend(ips)
        fault = FaultRecord(what, time.time())
        self.faults.append(fault)
        return fault

    def heal(self, fault: FaultRecord | None = None) -> None:
        """Remove every rule and delay (a heal of everything: faults may overlap)."""
        for stop in self._flappers:
            stop.set()
        self._flappers.clear()
        for host in list(self._blocked):
            self.nl.lab.unblock(host)
        self._blocked.clear()
        for host in self.nl.sidecar_hosts:
            self.nl.set_delay(host, 0)
        now = time.time()
        for f in self.faults:
            if f.healed is None:
                f.healed = now

    def cut_from_backend(self, n: int) -> FaultRecord:
        return self.block(f"s{n} cut from the backend", [(f"s{n}", self.nl.backend_ips())])

    def cut_from_clients_and_peers(self, n: int) -> FaultRecord:
        others = [self.nl.ip(h) for h in [*self.nl.client_hosts, *self.nl.sidecar_hosts] if h != f"s{n}"]
        return self.block(f"s{n} cut from clients and peers", [(f"s{n}", others)])

    def split(self, minority: list[str]) -> FaultRecord:
        """``minority`` hosts on one side, everything else (the backend too) on the other."""
        majority = [h for h in self.nl.lab.hosts if h not in minority]
        far = [self.nl.ip(h) for h in majority] + [ALIAS.format(200 + n) for n in range(1, self.settings.brokers + 1)]
        return self.block(f"split {minority} | rest", [(h, far) for h in minority])

    def slow_backend(self, n: int, ms: float) -> FaultRecord:
        self.nl.set_delay(f"s{n}", ms)
        fault = FaultRecord(f"s{n} backend link slowed by {ms:.0f} ms", time.time())
        self.faults.append(fault)
        return fault

    def isolate_broker(self, n: int) -> FaultRecord:
        others = [self.nl.ip(f"kafka-{i}") for i in range(1, self.settings.brokers + 1) if i != n]
        return self.block(f"kafka-{n} isolated from the other brokers", [(f"kafka-{n}", others)])

    def flap(self, n: int, down_s: float, up_s: float, seed: int = 0) -> FaultRecord:
        """s{n}'s backend link down and up in turns (jittered) until :meth:`heal`."""
        stop, rng, lab, ips = threading.Event(), random.Random(seed), self.nl.lab, self.nl.backend_ips()
        host = f"s{n}"

        def loop() -> None:
            while not stop.is_set():
                lab.block(host, ips)
                if stop.wait(down_s * rng.uniform(0.7, 1.3)):
                    break
                lab.unblock(host)
                stop.wait(up_s * rng.uniform(0.7, 1.3))
            lab.unblock(host)

        threading.Thread(target=loop, daemon=True, name=f"flap-{host}").start()
        self._flappers.append(stop)
        self._blocked.setdefault(host, [])
        fault = FaultRecord(f"s{n} backend link flapping ({down_s:.0f} s down / {up_s:.0f} s up)", time.time())
        self.faults.append(fault)
        return fault

    # -- the end --------------------------------------------------------------------------------
    def finish(self) -> History:
        """Stop everything (recording which sidecar had died), dump the state topic, build the history."""
        self.heal()
        self.exits = {f"s{n}": p.poll() for n, p in self.sidecars.items()}
        if self.producer is not None and self.producer.poll() is None:
            self.producer.send_signal(signal.SIGTERM)
            self.producer.wait(180)
        for c in self.clients:
            if c.poll() is None:
                c.send_signal(signal.SIGTERM)
        for c in self.clients:
            try:
                c.wait(60)
            except subprocess.TimeoutExpired:
                c.kill()
        for n in list(self.sidecars):
            self.stop_sidecar(n)
        dump = self.dir / "state.jsonl"
        s = self.settings
        done = self.nl.lab.run("prod", [sys.executable, str(HERE / "nemesis_tools.py"), "dump", "--bootstrap",
                                        self.nl.bootstrap, "--state-topic", self.state_topic, "--state-partitions",
                                        str(s.state_partitions), "--topic", self.topic, "--partitions",
                                        str(s.partitions), "--out", str(dump)], env=client_env(), timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"dumping the state topic failed: {done.stderr[-2000:]}")
        (self.dir / "run.json").write_text(json.dumps({
            "group": self.group, "topic": self.topic, "settings": dataclasses.asdict(self.settings),
            "exits": self.exits, "reloads": self.reloads(),
            "faults": [dataclasses.asdict(f) for f in self.faults],
            "clients": [[h, str(p)] for h, p in self.client_paths]}))
        return self.history(dump)

    def history(self, dump: Path) -> History:
        return history_of(self.dir)

    def reloads(self) -> dict[int, list[float]]:
        """Per user partition, when a sidecar reloaded its share-partition from the state topic
        (its log, persist/ and share/cache.py: after a write whose outcome was unknown)."""
        pattern = re.compile(rf"(\S+ \S+) WARNING kshare.partitions: share-partition group={re.escape(self.group)} "
                             rf"partition={re.escape(self.topic)}-(\d+) reloads from the state topic")
        out: dict[int, list[float]] = {}
        for n in self.sidecars:
            for line in self.sidecar_log(n).splitlines():
                m = pattern.match(line)
                if m:
                    out.setdefault(int(m.group(2)), []).append(log_time(m.group(1)))
        return out


def wait_until(predicate, timeout: float, step: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()

