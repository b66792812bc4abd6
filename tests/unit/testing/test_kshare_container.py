"""KShareContainer's configuration without a Docker engine: the command, ports, settings, start
script, backend addresses and the readiness wait it would use (Docker's client is faked)."""

from __future__ import annotations

import io
import tarfile

import pytest
import testcontainers.core.container as tc_container
from testcontainers.community.kafka import KafkaContainer, RedpandaContainer

from kshare_sidecar.testing.containers import KShareContainer, NetworkedRedpandaContainer, setting_env


class FakeDockerClient:
    def __init__(self, **kwargs):
        pass


class FakeNetwork:
    name = "net-1"


class FakeWrapped:
    """docker-py's Container: attrs, status, put_archive."""

    def __init__(self, ip="172.17.0.5", statuses=("running",)):
        self.attrs = {"NetworkSettings": {"IPAddress": ip}}
        self._statuses = list(statuses)
        self.status = self._statuses[0]
        self.archives: list[tuple[str, bytes]] = []

    def reload(self):
        if len(self._statuses) > 1:
            self._statuses.pop(0)
        self.status = self._statuses[0]

    def put_archive(self, path, data):
        self.archives.append((path, data.read()))


@pytest.fixture(autouse=True)
def no_docker(monkeypatch):
    monkeypatch.setattr(tc_container, "DockerClient", FakeDockerClient)
    monkeypatch.delenv("KSHARE_IMAGE", raising=False)


def test_string_backend_command_ports_and_settings():
    c = KShareContainer("kafka:9092", settings={"share.auto.offset.reset": "earliest",
                                                "KSHARE_STATE_TOPIC_REPLICATION_FACTOR": 1})
    assert c.image == "kshare-sidecar:dev"
    assert c._kwargs["entrypoint"] == "sh"
    assert "9192" in c.ports
    assert c._command == '-c "while [ ! -f /tmp/kshare-start.sh ]; do sleep 0.1; done; . /tmp/kshare-start.sh"'
    assert c.environment("localhost:32768") == {
        "KSHARE_BOOTSTRAP_SERVERS": "kafka:9092", "KSHARE_LISTEN": "0.0.0.0:9192",
        "KSHARE_ADVERTISED_LISTENER": "localhost:32768",
        "KSHARE_SHARE_AUTO_OFFSET_RESET": "earliest", "KSHARE_STATE_TOPIC_REPLICATION_FACTOR": "1"}
    script = c.start_script("localhost:32768").decode().splitlines()
    assert script[0] == "export KSHARE_BOOTSTRAP_SERVERS=kafka:9092"
    assert "export KSHARE_ADVERTISED_LISTENER=localhost:32768" in script
    assert script[-1] == "exec kshare sidecar run"


def test_image_from_argument_or_environment(monkeypatch):
    assert KShareContainer("k:1", image="registry.local/kshare:1.2").image == "registry.local/kshare:1.2"
    monkeypatch.setenv("KSHARE_IMAGE", "mine:latest")
    assert KShareContainer("k:1").image == "mine:latest"
    assert "19092" in KShareContainer("k:1", port=19092).ports


def test_setting_names():
    assert setting_env("group.share.record.lock.duration.ms") == "KSHARE_GROUP_SHARE_RECORD_LOCK_DURATION_MS"
    assert setting_env("KSHARE_LOG_LEVEL") == "KSHARE_LOG_LEVEL"
    c = KShareContainer("k:1").with_setting("state.topic.partitions", 4)
    assert c.settings == {"KSHARE_STATE_TOPIC_PARTITIONS": "4"}


def test_script_quotes_values():
    c = KShareContainer("k:1", settings={"sasl.jaas.config": "a b'c"})
    assert "export KSHARE_SASL_JAAS_CONFIG='a b'\"'\"'c'" in c.start_script("h:1").decode()


def test_kafka_backend_on_a_network_joins_it_and_uses_the_alias():
    kafka = KafkaContainer().with_network(FakeNetwork()).with_network_aliases("kafka")
    c = KShareContainer(kafka)
    assert c._network is kafka._network
    assert c.backend_bootstrap() == "kafka:9092"  # the BROKER listener, not the host's mapped port


def test_kafka_backend_on_the_default_bridge_uses_its_ip():
    kafka = KafkaContainer()
    kafka._container = FakeWrapped(ip="172.17.0.9")
    c = KShareContainer(kafka)
    assert c._network is None
    assert c.backend_bootstrap() == "172.17.0.9:9092"


def test_plain_redpanda_is_refused_networked_redpanda_uses_its_internal_listener():
    with pytest.raises(TypeError, match="NetworkedRedpandaContainer"):
        KShareContainer(RedpandaContainer())
    rp = NetworkedRedpandaContainer().with_network(FakeNetwork()).with_network_aliases("redpanda")
    assert KShareContainer(rp).backend_bootstrap() == "redpanda:29092"


def test_networked_redpanda_advertises_its_alias(monkeypatch):
    rp = NetworkedRedpandaContainer().with_network(FakeNetwork()).with_network_aliases("redpanda")
    rp.get_container_host_ip = lambda: "localhost"
    rp.get_exposed_port = lambda port: 40000
    written = {}
    rp.create_file = lambda content, path: written.update({path: content.decode()})
    rp.tc_start()
    (path, script), = written.items()
    assert path == RedpandaContainer.TC_START_SCRIPT
    assert "--advertise-kafka-addr PLAINTEXT://redpanda:29092,OUTSIDE://localhost:40000" in script
    with pytest.raises(ValueError, match="with_network"):
        NetworkedRedpandaContainer().tc_start()


def test_unsupported_backend():
    c = KShareContainer(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unsupported backend"):
        c.backend_bootstrap()


def test_start_writes_the_script_with_the_mapped_port_then_waits(monkeypatch):
    c = KShareContainer("kafka:9092")
    wrapped = FakeWrapped()
    monkeypatch.setattr(tc_container.DockerContainer, "start", lambda self: setattr(self, "_container", wrapped))
    c.get_container_host_ip = lambda: "localhost"
    c.get_exposed_port = lambda port: 32999
    probes = []
    monkeypatch.setattr(KShareContainer, "wait_ready",
                        lambda self, host, port: probes.append((host, port)))
    assert c.start() is c
    (path, data), = wrapped.archives
    assert path == "/tmp"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.getmember("kshare-start.sh")
        text = tar.extractfile(member).read().decode()
    assert "export KSHARE_ADVERTISED_LISTENER=localhost:32999" in text
    assert probes == [("localhost", 32999)]
    assert c.get_bootstrap_server() == "localhost:32999"


def test_wait_ready_polls_until_metadata_answers():
    c = KShareContainer("k:1")
    c._container = FakeWrapped()
    answers = iter([False, False, True])
    sleeps = []
    c.wait_ready("localhost", 1, probe=lambda h, p, timeout: next(answers), sleep=sleeps.append)
    assert sleeps == [0.5, 0.5]


def test_wait_ready_fails_early_when_the_container_exits():
    c = KShareContainer("k:1")
    c._container = FakeWrapped(statuses=("running", "exited"))
    c.get_logs = lambda: (b"kshare: bad setting KSHARE_X\n", b"")
    with pytest.raises(RuntimeError, match="exited before it was ready:\nkshare: bad setting"):
        c.wait_ready("localhost", 1, probe=lambda *a, **k: False, sleep=lambda s: None)


def test_wait_ready_times_out():
    c = KShareContainer("k:1", startup_timeout=2)
    c._container = FakeWrapped()
    c.get_logs = lambda: (b"", b"")
    now = [0.0]

    def sleep(s):
        now[0] += s

    with pytest.raises(TimeoutError, match="not ready in 2 s"):
        c.wait_ready("localhost", 1, probe=lambda *a, **k: False, clock=lambda: now[0], sleep=sleep)


def test_kafka_with_kshare_wires_network_alias_and_sidecar(monkeypatch):
    import testcontainers.core.network as tc_network

    from kshare_sidecar.testing.containers import kafka_with_kshare

    events = []

    class FakeNet:
        name = "net-x"

        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            events.append("network")
            return self

        def __exit__(self, *exc):
            events.append("network removed")

    monkeypatch.setattr(kc_module(), "Network", FakeNet)
    monkeypatch.setattr(tc_network, "Network", FakeNet)
    monkeypatch.setattr(KafkaContainer, "start", lambda self, timeout=30: events.append(("kafka", self.image)) or self)
    monkeypatch.setattr(KShareContainer, "start", lambda self: events.append(("kshare", self.backend_bootstrap())) or self)
    monkeypatch.setattr(tc_container.DockerContainer, "stop", lambda self, **k: events.append(("stop", self.image)))
    with kafka_with_kshare(image="kshare:test") as kshare:
        assert isinstance(kshare, KShareContainer) and kshare.image == "kshare:test"
        assert kshare._network is kshare.backend._network
    assert events == ["network", ("kafka", "confluentinc/cp-kafka:7.9.0"), ("kshare", "kafka:9092"),
                      ("stop", "kshare:test"), ("stop", "confluentinc/cp-kafka:7.9.0"), "network removed"]


def kc_module():
    import kshare_sidecar.testing.containers as module

    return module


# -- the host's network: ApacheKafkaContainer and the sidecar in front of it -------------------------

def test_apache_kafka_container_on_the_host_network_listens_on_loopback():
    from kshare_sidecar.testing.containers import ApacheKafkaContainer

    kafka = ApacheKafkaContainer("kshare-local/kafka:3.9.2", port=40001, controller_port=40002,
                                 env={"KAFKA_NUM_PARTITIONS": "3"})
    assert kafka._kwargs["network_mode"] == "host" and kafka.ports == {}
    env = kafka.env
    assert env["KAFKA_LISTENERS"] == "PLAINTEXT://127.0.0.1:40001,CONTROLLER://127.0.0.1:40002"
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://127.0.0.1:40001"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@127.0.0.1:40002"
    assert len(env["CLUSTER_ID"]) == 22 and env["KAFKA_NUM_PARTITIONS"] == "3"
    assert kafka.get_bootstrap_server() == "127.0.0.1:40001"
    assert ApacheKafkaContainer().image == "apache/kafka:3.9.2"
    a, b = ApacheKafkaContainer(), ApacheKafkaContainer()
    assert len({a.port, a.controller_port, b.port, b.controller_port}) == 4  # free ports


def test_kshare_in_front_of_a_host_network_kafka_uses_the_image_entrypoint_on_loopback(monkeypatch):
    from kshare_sidecar.testing.containers import ApacheKafkaContainer

    kafka = ApacheKafkaContainer(port=40001, controller_port=40002)
    c = KShareContainer(kafka, port=40010, settings={"share.auto.offset.reset": "earliest"})
    assert c.host_network and c._kwargs["network_mode"] == "host"
    assert "entrypoint" not in c._kwargs and c._command is None and c.ports == {}  # the image's own ENTRYPOINT/CMD
    assert c.environment("127.0.0.1:40010") == {
        "KSHARE_BOOTSTRAP_SERVERS": "127.0.0.1:40001", "KSHARE_LISTEN": "127.0.0.1:40010",
        "KSHARE_ADVERTISED_LISTENER": "127.0.0.1:40010", "KSHARE_SHARE_AUTO_OFFSET_RESET": "earliest"}
    monkeypatch.setattr(tc_container.DockerContainer, "start", lambda self: setattr(self, "_container", FakeWrapped()))
    probes = []
    monkeypatch.setattr(KShareContainer, "wait_ready", lambda self, host, port: probes.append((host, port)))
    c.start()
    assert c.env["KSHARE_LISTEN"] == "127.0.0.1:40010" and probes == [("127.0.0.1", 40010)]
    assert c.get_bootstrap_server() == "127.0.0.1:40010"


def test_host_network_kafka_needs_a_host_network_sidecar():
    from kshare_sidecar.testing.containers import ApacheKafkaContainer

    c = KShareContainer(ApacheKafkaContainer(), network_mode="bridge")
    with pytest.raises(ValueError, match="host's network"):
        c.backend_bootstrap()


def test_restart_is_docker_start_and_waits_again():
    from kshare_sidecar.testing.containers import ApacheKafkaContainer

    class Wrapped(FakeWrapped):
        def __init__(self):
            super().__init__()
            self.calls = []

        def kill(self, signal):
            self.calls.append(("kill", signal))

        def wait(self, timeout):
            self.calls.append("wait")

        def start(self):
            self.calls.append("start")

    c = KShareContainer(ApacheKafkaContainer(), port=40020)
    c._container = Wrapped()
    waits = []
    c.wait_ready = lambda host, port: waits.append((host, port))
    c.kill()
    c.restart()
    assert c._container.calls == [("kill", "SIGKILL"), "wait", "start"] and waits == [("127.0.0.1", 40020)]
    bridge = KShareContainer("k:1")
    bridge._container = Wrapped()
    with pytest.raises(NotImplementedError, match="host's network"):
        bridge.restart()


def test_logs_on_failure_writes_logs_only_when_a_test_failed(tmp_path):
    from kshare_sidecar.testing.containers import logs_on_failure

    class Session:
        testsfailed = 0

    class Node:
        nodeid = "t.py::test"
        user_properties: list = []

    class Config:
        class pluginmanager:
            @staticmethod
            def get_plugin(name):
                return None

    class Request:
        session, node, config = Session(), Node(), Config()

    class C:
        image = "registry.example/kshare-sidecar:dev"

        def logs(self):
            return "kshare sidecar serving share groups\n"

    with logs_on_failure(Request(), C(), directory=tmp_path / "a"):
        pass
    assert not (tmp_path / "a").exists()
    request = Request()
    with logs_on_failure(request, C(), directory=tmp_path / "b"):
        request.session.testsfailed += 1
    assert (tmp_path / "b" / "0-kshare-sidecar-dev.log").read_text() == "kshare sidecar serving share groups\n"
    assert request.node.user_properties == [("container_logs", [str(tmp_path / "b" / "0-kshare-sidecar-dev.log")])]
