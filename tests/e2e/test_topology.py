"""The deployment topologies of docs/deployment.md, run for real on network namespaces.

No Docker engine or Kubernetes here, so each "host" is a network namespace (tests/e2e/netlab.py)
with its own address and /etc/hosts, and each container is the process its image would run:

* **compose/kafka39-cluster.yml** — read, not copied: Kafka 3.9 (from the harness's jars) on a host
  named ``kafka``, configured from the ``kafka`` service's ``KAFKA_*`` environment as the
  apache/kafka image does; each ``kshare-N`` service's command and environment (on top of the
  Dockerfile's ENTRYPOINT and ENV) on a host named after the service; readiness is the service's
  healthcheck (the Dockerfile's ``kshare-healthcheck``) run in that host. Clients on another host
  bootstrap with the service names; a "Docker host" publishes the services' ``ports`` on its
  localhost (tests/e2e/netlab_proxy.py, as docker-proxy does) for a client there. Records are
  produced and share-consumed through different sidecars, one sidecar is killed with SIGKILL
  mid-run, and every record must be accepted exactly once, the state topic ending at every
  partition's end.
* **compose/kubernetes/kshare-statefulset.yaml** — the StatefulSet's container command
  (``KSHARE_NODE_ID=${HOSTNAME##*-} exec kshare sidecar run`` under ``sh -c``) and environment
  (ConfigMap, downward-API pod name and namespace, ``$(VAR)`` expansion as the kubelet does) in
  pods ``kshare-0..2`` whose stable names resolve through a headless-service hosts entry; the
  ConfigMap's backend address and state-topic replication factor are replaced (by this lab's one
  broker's). Node ids must be the
  ordinals, addresses the pods' DNS names; a pod killed with SIGKILL and started again under its
  name rejoins, and nothing is lost.

Opt-in (``make test-topology``; root and iproute2): a few minutes.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.conftest import WORKER, wait_until
from tests.e2e.netlab import Lab, LabKafka, available, client_env, compose_env, k8s_container_env
from tests.unit.deploy.conftest import COMPOSE_DIR, DOCKERFILE, env_pairs, final_stage, parse_dockerfile

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.optin("topology"),
    pytest.mark.skipif(available() is not None, reason=f"network namespaces: {available()}"),
]

yaml = pytest.importorskip("yaml")
COMPOSE_FILE = COMPOSE_DIR / "kafka39-cluster.yml"
K8S_FILE = COMPOSE_DIR / "kubernetes" / "kshare-statefulset.yaml"
NAMESPACE = "queues"  # the Kubernetes namespace the manifest's comment applies it to
VENV_BIN = Path(sys.executable).parent


class Image:
    """The kshare image as the Dockerfile builds it: ENTRYPOINT, CMD, ENV and its healthcheck script."""

    def __init__(self, tmp: Path) -> None:
        stage = final_stage(parse_dockerfile(DOCKERFILE.read_text()))
        self.entrypoint = next(i for i in reversed(stage) if i.keyword == "ENTRYPOINT").exec_form() or []
        self.cmd = next(i for i in reversed(stage) if i.keyword == "CMD").exec_form() or []
        self.env: dict[str, str] = {}
        for inst in stage:
            if inst.keyword == "ENV":
                self.env |= env_pairs(inst)
        self.bin = tmp / "image-bin"  # /usr/local/bin of the image: the healthcheck script
        self.bin.mkdir(exist_ok=True)
        for inst in stage:
            if inst.keyword == "COPY" and inst.heredocs:
                target = self.bin / Path(inst.args.split()[-1]).name
                body = next(iter(inst.heredocs.values()))
                target.write_text(f"#!{sys.executable}\n" + body.split("\n", 1)[1])
                target.chmod(0o755)

    def environment(self, env: dict[str, str], hostname: str) -> dict[str, str]:
        """A container's environment: the image's ENV, then the service's, as Docker sets them."""
        return {"PATH": f"{VENV_BIN}:{self.bin}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
                "HOSTNAME": hostname, **self.env, **env}

    def argv(self, command: list[str] | None) -> list[str]:
        return [*self.entrypoint, *(command if command is not None else self.cmd)]


def consume_and_kill(lab: Lab, tmp: Path, bootstraps: list[str], topic: str, records: int, kill) -> tuple[Counter, float]:
    """Three ShareConsumer processes on the client host, each bootstrapped to a different sidecar;
    ``kill()`` once a third of the records is accepted. Returns the accepted (partition, offset)s."""
    group = f"topology-{topic}"
    outs = [tmp / f"{topic}-w{i}.jsonl" for i in range(len(bootstraps))]
    procs = [lab.popen("client", [sys.executable, str(WORKER), "--bootstrap", b, "--group", group, "--topic", topic,
                                  "--out", str(out), "--mode", "explicit", "--max-poll-records", "100",
                                  "--work-ms", "1", "--idle-s", "30", "--grace-s", "60", "--max-s", "400"],
                       env=client_env(), log=f"{topic}-w{i}.log")
             for i, (b, out) in enumerate(zip(bootstraps, outs))]

    def accepted() -> Counter:
        acks: Counter = Counter()
        for out in outs:
            if out.exists():
                for line in out.read_text().splitlines():
                    if line.endswith("}"):
                        e = json.loads(line)
                        if e["ev"] == "ack" and e["ok"]:
                            acks[(e["p"], e["o"])] += 1
        return acks

    assert wait_until(lambda: sum(accepted().values()) > records // 3, 240), "consumers did not get going"
    killed_at = time.monotonic()
    kill()
    for p in procs:
        assert p.wait(600) == 0, (tmp / "logs").as_posix()
    return accepted(), killed_at


def check_exactly_once(acks: Counter, records: int, partitions: int) -> None:
    expected = {(i % partitions, i // partitions) for i in range(records)}
    missing = expected - set(acks)
    assert not missing, f"{len(missing)} records never accepted, e.g. {sorted(missing)[:5]}"
    twice = {k: n for k, n in acks.items() if n > 1}
    assert not twice, f"{len(twice)} records accepted twice, e.g. {list(twice.items())[:5]}"


SNIPPETS = {
    "create": "from tests.support import create_topic; import sys; create_topic(sys.argv[1], sys.argv[2], 6)",
    "earliest": "from tests.support import set_group_config; import sys; "
                "set_group_config(sys.argv[1], sys.argv[2], {'share.auto.offset.reset': 'earliest'})",
    "produce": "from tests.support import produce; import sys; produce(sys.argv[1], sys.argv[2], int(sys.argv[3]), "
               "partitions=6)",
    "brokers": ("import asyncio, json, sys\n"
                "from kshare_sidecar.client import protocol\n"
                "from kshare_sidecar.client.conn import NodeConn\n"
                "async def main(host, port, topic):\n"
                "    conn = NodeConn(-1, host, int(port), 'topology', timeout_s=10)\n"
                "    try:\n"
                "        r = await conn.call(protocol.metadata([topic]))\n"
                "    finally:\n"
                "        await conn.close()\n"
                "    print(json.dumps({'brokers': sorted([b.node_id, b.host, b.port] for b in r.brokers),\n"
                "                      'leaders': sorted({p.leader_id for t in r.topics for p in t.partitions})}))\n"
                "asyncio.run(main(*sys.argv[1:]))"),
    "spso": ("import asyncio, json, sys\n"
             "from tests.support import read_state_topic\n"
             "from kshare_sidecar.persist import codec\n"
             "out = {}\n"
             "for p, o, k, v in asyncio.run(read_state_topic(sys.argv[1], sys.argv[2], int(sys.argv[4]))):\n"
             "    kind, ident = codec.decode_key(k)\n"
             "    if kind == 'p' and ident.group_id == sys.argv[3] and v is not None:\n"
             "        out[ident.partition] = codec.decode_partition(v).state.start_offset\n"
             "print(json.dumps(out))"),
}


def client(lab: Lab, name: str, *args: str, host: str = "client") -> str:
    done = lab.python(host, SNIPPETS[name], *map(str, args), timeout=180)
    assert done.returncode == 0, f"{name} on {host}: {done.stderr[-2000:]}"
    return done.stdout


def brokers(lab: Lab, address: str, topic: str) -> dict:
    host, port = address.rsplit(":", 1)
    done = lab.python("client", SNIPPETS["brokers"], host, port, topic, timeout=60)
    return json.loads(done.stdout) if done.returncode == 0 else {}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    logs = tmp_path_factory.mktemp("topology")
    with Lab(logs) as lab:
        yield lab
    assert lab.leftovers() == [], "the lab left namespaces or hosts files behind"


@pytest.fixture(scope="module")
def compose_doc() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def backend(lab, compose_doc):
    """The compose file's Kafka on its host ``kafka``; the sidecars' bootstrap address."""
    services = compose_doc["services"]
    sidecar_env = compose_env(next(s for n, s in services.items() if n.startswith("kshare")), {})
    bootstrap = sidecar_env["KSHARE_BOOTSTRAP_SERVERS"]
    for name in ["kafka", *services, "client", "dockerhost"]:
        if name not in lab.hosts:
            lab.add_host(name)
    kafka = LabKafka(lab, "kafka", compose_env(services["kafka"], {}), probe_from="client", bootstrap=bootstrap)
    kafka.start()
    yield bootstrap
    kafka.stop()


def test_compose_cluster_file(lab, compose_doc, backend, tmp_path):
    image = Image(tmp_path)
    services = {n: s for n, s in compose_doc["services"].items() if n.startswith("kshare")}
    assert len(services) == 3
    shell = {"KSHARE_SHARE_AUTO_OFFSET_RESET": "earliest"}  # `KSHARE_..._RESET=earliest docker compose up`
    procs, envs = {}, {}
    try:
        for name, svc in services.items():
            envs[name] = image.environment(compose_env(svc, shell), name)
            procs[name] = lab.popen(name, image.argv(svc.get("command")), env=envs[name], log=f"{name}.log")
        for name, svc in services.items():  # readiness: the service's healthcheck, in its container
            test = svc["healthcheck"]["test"]
            assert test[0] == "CMD", test

            def healthy() -> bool:
                assert procs[name].poll() is None, (lab.logs / f"{name}.log").read_text()[-3000:]
                return lab.run(name, test[1:], env=envs[name]).returncode == 0
            assert wait_until(healthy, 180, step=1), (lab.logs / f"{name}.log").read_text()[-3000:]
        # published ports on the Docker host (docker-proxy), for the client there
        published = [f"{p.split(':')[0]}:{name}:{p.split(':')[1]}"
                     for name, svc in compose_doc["services"].items() for p in svc.get("ports", [])]
        lab.popen("dockerhost", [sys.executable, str(Path(__file__).with_name("netlab_proxy.py")), *published],
                  env=client_env(), log="dockerhost-proxy.log")

        inside = [f"{name}:{svc_port(envs[name])}" for name in services]  # clients on the compose network
        topic, records = "jobs", 12_000
        client(lab, "create", ",".join(inside), topic)
        client(lab, "produce", inside[1], topic, records)  # through a sidecar (pass-through)
        assert wait_until(lambda: len(brokers(lab, inside[0], topic).get("brokers", [])) == 3, 60)
        view = brokers(lab, inside[0], topic)
        print(f"\n[topology] compose: Metadata at {inside[0]} lists {view['brokers']}, leaders {view['leaders']}")
        victim = "kshare-2"
        acks, _ = consume_and_kill(lab, tmp_path, inside, topic, records,
                                   lambda: procs[victim].send_signal(signal.SIGKILL))
        check_exactly_once(acks, records, 6)
        spso = json.loads(client(lab, "spso", backend, state_topic(envs), f"topology-{topic}", 16))
        assert spso == {str(p): records // 6 for p in range(6)}, spso
        survivors = [[int(n[-1]), n, int(svc_port(envs[n]))] for n in services if n != victim]
        assert wait_until(lambda: brokers(lab, inside[0], topic).get("brokers") == survivors, 60)

        # the Docker host: a client on published ports, and a producer on Kafka's published port
        host_bootstrap = ",".join(f"localhost:{svc['ports'][0].split(':')[0]}" for svc in services.values()
                                  if svc.get("ports"))
        kafka_port = compose_doc["services"]["kafka"]["ports"][0].split(":")[0]
        client(lab, "create", f"localhost:{kafka_port}", "from-host", host="dockerhost")
        client(lab, "produce", f"localhost:{kafka_port}", "from-host", 60, host="dockerhost")
        out = lab.run("dockerhost", [str(VENV_BIN / "kshare"), "consume", "-b", host_bootstrap, "--group", "on-the-host",
                                     "--topic", "from-host", "--timeout", "20", "--json"], env=client_env())
        assert out.returncode == 0 and len(out.stdout.splitlines()) == 60, out.stderr[-2000:]
        print(f"[topology] compose: {records} records accepted exactly once through {', '.join(inside)} with "
              f"{victim} killed (SIGKILL) mid-run; on the Docker host, 60 records produced at localhost:{kafka_port} "
              f"and share-consumed through {host_bootstrap}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(60)


def test_statefulset_manifest(lab, backend, tmp_path):
    image = Image(tmp_path)
    docs = [d for d in yaml.safe_load_all(K8S_FILE.read_text()) if d]
    config_maps = {d["metadata"]["name"]: {k: str(v) for k, v in d["data"].items()}
                   for d in docs if d["kind"] == "ConfigMap"}
    service = next(d for d in docs if d["kind"] == "Service")
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    assert service["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == service["metadata"]["name"]
    # replaced: the ConfigMap's backend address and state-topic replication, by this lab's one broker
    (cm,) = [cm for cm in config_maps.values() if "KSHARE_BOOTSTRAP_SERVERS" in cm]
    cm |= {"KSHARE_BOOTSTRAP_SERVERS": backend, "KSHARE_STATE_TOPIC_REPLICATION_FACTOR": "1"}
    container = sts["spec"]["template"]["spec"]["containers"][0]
    argv = [*container["command"], *container.get("args", [])]  # command replaces the image's ENTRYPOINT and CMD
    domain = f"{service['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
    pods = [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]
    for pod in pods:
        lab.add_host(f"{pod}.{domain}", hostname=pod)
    lab.write_hosts(extra={domain: [f"{pod}.{domain}" for pod in pods]})  # the headless service
    envs = {pod: image.environment(k8s_container_env(container, {"metadata.name": pod, "metadata.namespace": NAMESPACE},
                                                     config_maps), pod) for pod in pods}
    probe = container["readinessProbe"]["exec"]["command"]
    procs: dict = {}

    def start(pod: str) -> None:
        procs[pod] = lab.popen(f"{pod}.{domain}", argv, env=envs[pod], log=f"{pod}.log")

    def ready(pod: str) -> bool:
        def probed() -> bool:
            assert procs[pod].poll() is None, (lab.logs / f"{pod}.log").read_text()[-3000:]
            return lab.run(f"{pod}.{domain}", probe, env=envs[pod]).returncode == 0
        return wait_until(probed, 180, step=1)

    try:
        for pod in pods:
            start(pod)
        for pod in pods:
            assert ready(pod), (lab.logs / f"{pod}.log").read_text()[-3000:]
        port = container["ports"][0]["containerPort"]
        bootstrap = f"{domain}:{port}"  # clients: the service name
        topic, records = "k8s-jobs", 9_000
        client(lab, "create", bootstrap, topic)
        client(lab, "produce", bootstrap, topic, records)
        # the manifest keeps Kafka's default (latest): the application sets its group's config, through
        # whichever pod it reaches (forwarded to the group's coordinator, docs/deployment.md)
        client(lab, "earliest", bootstrap, f"topology-{topic}")
        everyone = [[i, f"{pod}.{domain}", port] for i, pod in enumerate(pods)]
        assert wait_until(lambda: brokers(lab, bootstrap, topic).get("brokers") == everyone, 60), \
            brokers(lab, bootstrap, topic)
        victim = pods[1]

        def kill_and_replace() -> None:  # the StatefulSet controller starts the pod again under its name
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait(30)
            start(victim)

        acks, _ = consume_and_kill(lab, tmp_path, [bootstrap] * 3, topic, records, kill_and_replace)
        check_exactly_once(acks, records, 6)
        assert ready(victim)
        assert wait_until(lambda: brokers(lab, bootstrap, topic).get("brokers") == everyone, 60)
        spso = json.loads(client(lab, "spso", backend, envs[pods[0]]["KSHARE_STATE_TOPIC"], f"topology-{topic}", 16))
        assert spso == {str(p): records // 6 for p in range(6)}, spso
        print(f"\n[topology] StatefulSet: pods {', '.join(pods)} are nodes {[b[0] for b in everyone]} at "
              f"{', '.join(b[1] for b in everyone)}; {records} records accepted exactly once through {bootstrap} with "
              f"{victim} killed (SIGKILL) and started again under its name")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(60)


def svc_port(env: dict[str, str]) -> str:
    """The in-network address's port of a sidecar service: its INTERNAL listener, else its listen."""
    for entry in env.get("KSHARE_LISTENERS", "").split(","):
        if entry.startswith("INTERNAL://"):
            return entry.rsplit(":", 1)[1]
    return env["KSHARE_LISTEN"].rsplit(":", 1)[1]


def state_topic(envs: dict[str, dict[str, str]]) -> str:
    return next(iter(envs.values()))["KSHARE_STATE_TOPIC"]
