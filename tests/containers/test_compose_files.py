"""compose/ run for real with Debian's docker-compose (1.29) on the session's engine, on the host's
network (compose/host-network/ overlays; free ports through their variables; the local images
through KAFKA_IMAGE / KSHARE_IMAGE / PROMETHEUS_IMAGE):

- compose/kafka39.yml with compose/metrics.yml: both services healthy by their own healthchecks,
  the compose README's demo (produce to Kafka, a confluent-kafka ShareConsumer through the
  sidecar), Prometheus healthy and scraping the sidecar;
- compose/kafka39-cluster.yml: three sidecars, three ShareConsumer processes under load, one
  sidecar container killed with `docker kill`: every record accepted exactly once, then the
  killed one started again and healthy.

Compose 1.29's Docker SDK refuses published ports with `network_mode: host` (Compose v2 drops them
with a warning, and an overlay cannot remove them in 1.29): the files are merged and interpolated by
`docker-compose config`, and only the `ports` of host-network services are dropped before `up`.
Not run: compose/redpanda.yml (no Redpanda image can be made from Debian's packages) and
compose/kubernetes/ (not compose; `make test-topology` runs it on network namespaces)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml

from kshare_sidecar.testing.kafka import free_port

pytestmark = pytest.mark.optin("containers")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
WORKER = ROOT / "tests" / "e2e" / "share_worker.py"


class Project:
    """One compose project: files merged by `docker-compose config`, run with `up -d`, always `down -v`."""

    def __init__(self, docker, name: str, files: list[str], env: dict[str, str], tmp: Path) -> None:
        self.docker, self.name, self.tmp = docker, name, tmp
        self.env = {**docker.engine.env(), **docker.env, **env}
        self.tool = shutil.which("docker-compose")
        assert self.tool, "docker-compose (Debian's, 1.29) is not installed: apt-get install docker-compose"
        rendered = self.compose("config", files=files).stdout
        doc = yaml.safe_load(rendered)
        for svc in doc["services"].values():
            if svc.get("network_mode") == "host":
                svc.pop("ports", None)
        self.file = tmp / f"{name}.yml"
        self.file.write_text(yaml.safe_dump(doc))
        self.services = list(doc["services"])

    def compose(self, *args: str, files: list[str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
        paths = [str(COMPOSE / f) for f in files] if files else [str(self.file)]
        argv = [self.tool, "-p", self.name, *[a for p in paths for a in ("-f", p)], *args]
        result = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=600, check=False)
        if check:
            assert result.returncode == 0, f"{' '.join(args)}: {result.stderr[-3000:]}"
        return result

    def container(self, service: str):
        found = self.docker.client.containers.list(all=True, filters={
            "label": [f"com.docker.compose.project={self.name}", f"com.docker.compose.service={service}"]})
        assert len(found) == 1, f"{service}: {found}"
        return found[0]

    def health(self, service: str) -> str:
        container = self.container(service)
        container.reload()
        return container.attrs["State"].get("Health", {}).get("Status", container.status)

    def wait_healthy(self, services: list[str], timeout_s: float = 300) -> float:
        started = time.monotonic()
        while True:
            states = {s: self.health(s) for s in services}
            if all(v == "healthy" for v in states.values()):
                return time.monotonic() - started
            assert time.monotonic() - started < timeout_s, f"not healthy in {timeout_s} s: {states}\n{self.logs()}"
            time.sleep(2)

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "40", check=False).stdout[-6000:]

    def __enter__(self) -> Project:
        self.compose("up", "-d")
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            (self.tmp / f"{self.name}.log").write_text(self.compose("logs", "--no-color", check=False).stdout)
        self.compose("down", "-v", "--remove-orphans", check=False)
        left = self.docker.client.containers.list(all=True, filters={"label": f"com.docker.compose.project={self.name}"})
        assert not left, f"compose down left {left}"


def ports(*names: str) -> dict[str, str]:
    return {name: str(free_port()) for name in names}


def test_kafka39_with_metrics(docker, tmp_path):
    from confluent_kafka import Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, NewTopic

    env = ports("KAFKA_PORT", "KAFKA_INTERNAL_PORT", "KAFKA_CONTROLLER_PORT", "SIDECAR_PORT", "KSHARE_METRICS_PORT",
                "PROMETHEUS_PORT")
    env["KSHARE_SHARE_AUTO_OFFSET_RESET"] = "earliest"  # compose/README.md: the demo reads from the beginning
    config = tmp_path / "prometheus.yml"
    config.write_text((COMPOSE / "host-network" / "prometheus.yml").read_text()
                      .replace("127.0.0.1:9193", f"127.0.0.1:{env['KSHARE_METRICS_PORT']}"))
    env["PROMETHEUS_CONFIG"] = str(config)
    files = ["kafka39.yml", "host-network/kafka39.yml", "metrics.yml", "host-network/metrics.yml"]
    with Project(docker, "kshare-kafka39", files, env, tmp_path) as project:
        took = project.wait_healthy(["kafka", "kshare", "prometheus"])
        # the compose README's demo: Kafka for producers and admin, the sidecar for share consumers
        kafka, sidecar = f"127.0.0.1:{env['KAFKA_PORT']}", f"127.0.0.1:{env['SIDECAR_PORT']}"
        admin = AdminClient({"bootstrap.servers": kafka})
        admin.create_topics([NewTopic("jobs", 3, 1)])["jobs"].result(30)
        producer = Producer({"bootstrap.servers": kafka})
        for i in range(10):
            producer.produce("jobs", f"job-{i}".encode())
        assert producer.flush(30) == 0
        consumer = ShareConsumer({"bootstrap.servers": sidecar, "group.id": "workers"})
        consumer.subscribe(["jobs"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.poll(1.0) if m.error() is None]
        consumer.close()
        assert sorted(got) == sorted(f"job-{i}".encode() for i in range(10))

        prometheus = f"http://127.0.0.1:{env['PROMETHEUS_PORT']}"
        deadline = time.monotonic() + 60
        while True:  # scrape_interval 5 s
            with urllib.request.urlopen(f"{prometheus}/api/v1/targets", timeout=5) as answer:
                targets = json.load(answer)["data"]["activeTargets"]
            if targets and targets[0]["health"] == "up" or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert [(t["labels"]["job"], t["health"]) for t in targets] == [("kshare", "up")], targets
        query = urllib.parse.quote("count({job=\"kshare\",__name__=~\"kshare_.+\"})")
        with urllib.request.urlopen(f"{prometheus}/api/v1/query?query={query}", timeout=5) as answer:
            result = json.load(answer)["data"]["result"]
        assert result and int(result[0]["value"][1]) > 0, result
    docker.report.append(f"compose kafka39.yml + metrics.yml: kafka, kshare, prometheus healthy in {took:.0f} s; "
                         f"the README demo's 10 records through the sidecar; Prometheus scraping kshare_* series")


def check_exactly_once(acks: Counter, records: int, partitions: int) -> None:
    expected = {(i % partitions, i // partitions) for i in range(records)}
    missing = expected - set(acks)
    assert not missing, f"{len(missing)} records never accepted, e.g. {sorted(missing)[:5]}"
    twice = {k: n for k, n in acks.items() if n > 1}
    assert not twice, f"{len(twice)} records accepted twice, e.g. {list(twice.items())[:5]}"


def test_cluster_survives_docker_kill_of_a_sidecar_under_load(docker, tmp_path):
    from tests.support import create_topic, produce

    env = ports("KAFKA_PORT", "KAFKA_INTERNAL_PORT", "KAFKA_CONTROLLER_PORT",
                *(f"SIDECAR_{n}_{kind}PORT" for n in (1, 2, 3) for kind in ("", "INTERNAL_")))
    env["KSHARE_SHARE_AUTO_OFFSET_RESET"] = "earliest"
    files = ["kafka39-cluster.yml", "host-network/kafka39-cluster.yml"]
    sidecars = ["kshare-1", "kshare-2", "kshare-3"]
    records, partitions = 12_000, 6
    with Project(docker, "kshare-kafka39-cluster", files, env, tmp_path) as project:
        took = project.wait_healthy(["kafka", *sidecars])
        kafka = f"127.0.0.1:{env['KAFKA_PORT']}"
        create_topic(kafka, "orders", partitions)
        produce(kafka, "orders", records, partitions=partitions)
        bootstraps = [f"127.0.0.1:{env[f'SIDECAR_{n}_PORT']}" for n in (1, 2, 3)]
        outs = [tmp_path / f"w{i}.jsonl" for i in range(3)]
        logs = [open(tmp_path / f"w{i}.log", "w") for i in range(3)]
        procs = [subprocess.Popen([sys.executable, str(WORKER), "--bootstrap", b, "--group", "compose-orders",
                                   "--topic", "orders", "--out", str(out), "--mode", "explicit",
                                   "--max-poll-records", "100", "--work-ms", "1", "--idle-s", "30",
                                   "--grace-s", "60", "--max-s", "400"], stdout=log, stderr=subprocess.STDOUT,
                                  cwd=ROOT)
                 for b, out, log in zip(bootstraps, outs, logs)]

        def accepted() -> Counter:
            acks: Counter = Counter()
            for out in outs:
                if out.exists():
                    for line in out.read_text().splitlines():
                        if line.endswith("}"):
                            event = json.loads(line)
                            if event["ev"] == "ack" and event["ok"]:
                                acks[(event["p"], event["o"])] += 1
            return acks

        try:
            deadline = time.monotonic() + 240
            while sum(accepted().values()) <= records // 3:
                assert time.monotonic() < deadline, "the consumers did not get going"
                time.sleep(0.2)
            before = sum(accepted().values())
            killed = project.container("kshare-2")
            killed.kill()  # docker kill: SIGKILL, under load
            for proc in procs:
                assert proc.wait(600) == 0, (tmp_path / "w0.log").read_text()[-2000:]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            for log in logs:
                log.close()
        acks = accepted()
        check_exactly_once(acks, records, partitions)
        # minutes later: the restart policy (unless-stopped) left the container `docker kill` stopped alone
        killed.reload()
        state = killed.attrs["State"]
        assert state["Status"] == "exited" and state["ExitCode"] == 137, state
        project.compose("start", "kshare-2")
        back = project.wait_healthy(["kshare-2"], timeout_s=120)
    docker.report.append(
        f"compose kafka39-cluster.yml: kafka and 3 sidecars healthy in {took:.0f} s; {records} records, "
        f"kshare-2 killed (docker kill, exit 137) after {before} accepted: every record accepted exactly once "
        f"through the two left; kshare-2 started again and healthy in {back:.0f} s")
