"""The sidecar against a backend that requires SASL (issue 16, backend side): share consumption and
pass-through both authenticate; wrong credentials fail start-up with one clear line and the secret
never reaches the log. Kafka 3.9 with a SASL_PLAINTEXT/PLAIN listener beside its plaintext one
(which the harness's readiness probe uses). TLS towards the backend is not covered here yet."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Producer

from kshare_sidecar.testing.kafka import KafkaBroker, free_port
from tests.e2e.conftest import SidecarProcess
from tests.support import create_topic, share_consume, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PASSWORD = "kshare-Secret-9f3c"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="admin-secret" user_admin="admin-secret" user_kshare="{PASSWORD}";')


class SaslBroker(KafkaBroker):
    """Kafka with an extra SASL_PLAINTEXT listener (PLAIN users admin and kshare)."""

    sasl_port = 0

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        self.sasl_port = self.sasl_port or free_port()
        props["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
        props["advertised.listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
        props["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
        props["sasl.enabled.mechanisms"] = "PLAIN"
        props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = JAAS
        return props

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


def _env(password: str) -> dict[str, str]:
    return {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KSHARE_BACKEND_SASL_MECHANISM": "PLAIN",
            "KSHARE_BACKEND_SASL_USERNAME": "kshare", "KSHARE_BACKEND_SASL_PASSWORD": password}


@pytest.fixture(scope="module")
def sasl_broker():
    with SaslBroker("3.9") as broker:
        yield broker


def test_share_consume_and_pass_through_over_sasl(sasl_broker, tmp_path):
    topic, group = unique("sasl"), unique("sasl-g")
    create_topic(sasl_broker.bootstrap, topic, 2)
    sc = SidecarProcess(sasl_broker.sasl_bootstrap, tmp_path / "sidecar.log", env=_env(PASSWORD)).start()
    try:
        producer = Producer({"bootstrap.servers": sc.bootstrap})  # pass-through: upstream is SASL
        for i in range(200):
            producer.produce(topic, b"s%d" % i)
        assert producer.flush(60) == 0
        got = share_consume(sc.bootstrap, group, topic, 200, timeout_s=90)
        assert sorted(v for v, _ in got) == sorted(b"s%d" % i for i in range(200))
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    assert PASSWORD not in log
    assert "Traceback" not in log


def test_wrong_password_fails_start_up_with_one_line(sasl_broker, tmp_path):
    wrong = "not-the-Password-77"
    env = {**__import__("os").environ, **_env(wrong)}
    proc = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "sidecar", "run", "--bootstrap-server",
                           sasl_broker.sasl_bootstrap, "--listen", f"127.0.0.1:{free_port()}"],
                          env=env, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert wrong not in output
    assert "start-up failed" in output and "Authentication failed" in output, output[-2000:]
