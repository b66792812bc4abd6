"""The sidecar against a backend that requires SASL: share consumption and
pass-through both authenticate; wrong credentials fail start-up with one clear line and the secret
never reaches the log. Kafka 3.9 with, beside its plaintext listener (which the harness's
readiness probe uses), a SASL_PLAINTEXT listener (PLAIN) and a SASL_SSL listener (SCRAM-SHA-512,
users created at format time, a certificate from a CA this test makes with openssl)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kshare_sidecar.testing.kafka import KafkaBroker, free_port
from kshare_sidecar.testing.maven import require_tool
from tests.e2e.conftest import SidecarProcess
from tests.support import create_topic, share_consume, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PASSWORD = "kshare-Secret-9f3c"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="admin-secret" user_admin="admin-secret" user_kshare="{PASSWORD}";')


def make_ca_and_server_cert(directory: Path, ca_name: str = "kshare-test-ca") -> tuple[Path, Path]:
    """A CA and a server certificate for 127.0.0.1/localhost (PEM): (ca.pem, key+chain for Kafka)."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={ca_name}",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key",
        "-out", "server.csr")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "server.pem")
    run("pkcs8", "-topk8", "-nocrypt", "-in", "server.key", "-out", "server.pk8")
    keystore = directory / "server-keystore.pem"
    keystore.write_text((directory / "server.pk8").read_text() + (directory / "server.pem").read_text())
    return directory / "ca.pem", keystore


def make_client_cert(directory: Path, subject: str, name: str) -> tuple[Path, Path]:
    """A client certificate signed by :func:`make_ca_and_server_cert`'s CA in ``directory``
    (``subject`` like ``/O=kshare-test/CN=svc-a``): (certificate PEM, key PEM)."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key", "-out", f"{name}.csr")
    run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-out", f"{name}.pem")
    return directory / f"{name}.pem", directory / f"{name}.key"


class SaslBroker(KafkaBroker):
    """Kafka with a SASL_PLAINTEXT listener (PLAIN users admin, kshare) and a SASL_SSL listener
    (SCRAM-SHA-512 user kshare)."""

    sasl_port = 0
    ssl_port = 0
    keystore: Path | None = None

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        self.sasl_port = self.sasl_port or free_port()
        self.ssl_port = self.ssl_port or free_port()
        props["listeners"] += (f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
                               f",SASL_SSL://127.0.0.1:{self.ssl_port}")
        props["advertised.listeners"] += (f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
                                          f",SASL_SSL://127.0.0.1:{self.ssl_port}")
        props["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
        props["listener.name.sasl_plaintext.sasl.enabled.mechanisms"] = "PLAIN"
        props["listener.name.sasl_ssl.sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
        props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = JAAS
        props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"] = \
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        props["listener.name.sasl_ssl.ssl.keystore.type"] = "PEM"
        props["listener.name.sasl_ssl.ssl.keystore.location"] = str(self.keystore)
        return props

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"


def _env(password: str) -> dict[str, str]:
    return {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KSHARE_BACKEND_SASL_MECHANISM": "PLAIN",
            "KSHARE_BACKEND_SASL_USERNAME": "kshare", "KSHARE_BACKEND_SASL_PASSWORD": password}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Path, Path]:
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")  # missing: an error, not a skip
    return make_ca_and_server_cert(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def sasl_broker(certs):
    broker = SaslBroker("3.9")
    broker.keystore = certs[1]
    broker.format_args = ["--add-scram", f"SCRAM-SHA-512=[name=kshare,password={PASSWORD}]"]
    with broker:
        yield broker


def test_sasl_ssl_with_scram_and_a_private_ca(sasl_broker, certs, tmp_path):
    """TLS (the broker's certificate checked against the test CA, host name verified) + SCRAM."""
    topic, group = unique("scram"), unique("scram-g")
    create_topic(sasl_broker.bootstrap, topic, 1)
    env = {**_env(PASSWORD), "KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL",
           "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512", "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(certs[0])}
    sc = SidecarProcess(sasl_broker.ssl_bootstrap, tmp_path / "sidecar.log", env=env).start()
    try:
        producer = Producer({"bootstrap.servers": sc.bootstrap})
        for i in range(50):
            producer.produce(topic, b"tls%d" % i)
        assert producer.flush(60) == 0
        got = share_consume(sc.bootstrap, group, topic, 50, timeout_s=90)
        assert {v for v, _ in got} == {b"tls%d" % i for i in range(50)}
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    assert PASSWORD not in log and "Traceback" not in log


def start_up_fails(bootstrap: str, env: dict[str, str], *secrets: str, listeners: str | None = None) -> str:
    """``kshare sidecar run`` that must not start: exit code 1 or 2, exactly one line saying why
    (``start-up failed: ...`` or, for a setting, ``kshare sidecar: ...``), no traceback, none of
    ``secrets`` in the output. Returns that line."""
    where = ["--listeners", listeners] if listeners else ["--listen", f"127.0.0.1:{free_port()}"]
    proc = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "sidecar", "run", "--bootstrap-server",
                           bootstrap, *where], env={**__import__("os").environ, **env},
                          capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode in (1, 2), output[-2000:]
    lines = [line for line in output.splitlines() if "start-up failed" in line or line.startswith("kshare sidecar:")]
    assert len(lines) == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    for secret in secrets:
        assert secret not in output
    print("\n" + lines[0])
    return lines[0]


def test_an_untrusted_certificate_fails_start_up(sasl_broker):
    """Without the test CA the broker's certificate is not trusted: start-up fails, one line
    naming TLS and the verification failure."""
    line = start_up_fails(sasl_broker.ssl_bootstrap, {**_env(PASSWORD), "KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL",
                                                     "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512"}, PASSWORD)
    assert "TLS with the backend failed (SASL_SSL SCRAM-SHA-512 as 'kshare')" in line
    assert "CERTIFICATE_VERIFY_FAILED" in line, line


def test_plaintext_to_a_tls_backend_port_fails_start_up(sasl_broker):
    """backend.security.protocol without TLS against the broker's SASL_SSL port: the broker drops
    the connection; start-up fails with one line that says the port may want TLS."""
    for protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
        env = {**_env(PASSWORD), "KSHARE_BACKEND_SECURITY_PROTOCOL": protocol,
               "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512"}
        line = start_up_fails(sasl_broker.ssl_bootstrap, env, PASSWORD)
        assert f"the backend closed the connection ({protocol}" in line and "a TLS listener?" in line, line


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


def test_wrong_password_fails_start_up_with_one_line(sasl_broker):
    wrong = "not-the-Password-77"
    line = start_up_fails(sasl_broker.sasl_bootstrap, _env(wrong), wrong)
    assert "the backend refused the sidecar's credentials (SASL_PLAINTEXT PLAIN as 'kshare')" in line, line
    assert "Authentication failed: Invalid username or password" in line, line  # the broker's own message


def test_delegate_authenticator_checks_plain_and_relays_scram(sasl_broker, certs, tmp_path):
    """``sasl.authenticator=delegate`` on a SASL_PLAINTEXT listener with PLAIN and SCRAM-SHA-512, the
    backend its SASL_SSL listener (SCRAM-SHA-512 user kshare). PLAIN credentials are checked by
    authenticating to the backend with them; a SCRAM exchange is relayed to the backend — the
    sidecar holds no password and no stored keys. A wrong password (either mechanism) and an unknown
    user get the backend's SASL_AUTHENTICATION_FAILED message; one WARNING line per refused
    connection; no secret in the log."""
    from confluent_kafka import KafkaError

    topic, group = unique("delegate"), unique("delegate-g")
    create_topic(sasl_broker.bootstrap, topic, 1)
    port, sasl_port = free_port(), free_port()
    env = {**_env(PASSWORD), "KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL",
           "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512", "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(certs[0]),
           "KSHARE_SASL_AUTHENTICATOR": "delegate", "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512,PLAIN"}
    sc = SidecarProcess(sasl_broker.ssl_bootstrap, tmp_path / "sidecar.log", port=port, env=env,
                        args=["--log-level", "DEBUG"],
                        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}").start()
    scram = {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kshare", "sasl.password": PASSWORD}
    plain = {**scram, "sasl.mechanism": "PLAIN"}
    wrong = "kshare-Wrong-88"
    try:
        producer = Producer(plain)  # PLAIN, checked at the backend
        for i in range(20):
            producer.produce(topic, b"r%d" % i)
        assert producer.flush(60) == 0
        got = share_consume(scram["bootstrap.servers"], group, topic, 20, timeout_s=60,  # SCRAM, relayed
                            extra={k: v for k, v in scram.items() if k != "bootstrap.servers"})
        assert sorted(v for v, _ in got) == sorted(b"r%d" % i for i in range(20))
        outcomes = {}
        for name, config in (("SCRAM wrong password", {**scram, "sasl.password": wrong}),
                             ("SCRAM unknown user", {**scram, "sasl.username": "nobody"}),
                             ("PLAIN wrong password", {**plain, "sasl.password": wrong})):
            before = sc.log_path.read_text(errors="replace").count("failed authentication on listener")
            errors = first_errors(config, topic)
            assert errors and errors[0].code() == KafkaError._AUTHENTICATION, (name, errors)
            outcomes[name] = errors[0].str()
            time.sleep(0.5)
            lines = [line for line in sc.log_path.read_text(errors="replace").splitlines()
                     if "failed authentication on listener" in line][before:]
            assert 1 <= len(lines) <= 3 and all("WARNING" in line for line in lines), (name, lines)
        _still_answering(sc)
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    print("\n", outcomes)
    for name in ("SCRAM wrong password", "SCRAM unknown user"):  # Kafka's own message, from the backend
        assert ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                "SCRAM-SHA-512") in outcomes[name], outcomes
    assert "Invalid username or password" in outcomes["PLAIN wrong password"], outcomes
    assert "the backend refused: SASL_AUTHENTICATION_FAILED" in log
    assert "authenticated as User:kshare with SCRAM-SHA-512 on listener SASL_PLAINTEXT" in log
    assert "authenticated as User:kshare with PLAIN on listener SASL_PLAINTEXT" in log
    for secret in (PASSWORD, wrong):
        assert secret not in log
    assert "Traceback" not in log


def _still_answering(sc) -> None:
    from kshare_sidecar.testing.probe import broker_ready

    assert sc.proc is not None and sc.proc.poll() is None and broker_ready("127.0.0.1", sc.port)


def test_delegate_refuses_a_scram_mechanism_the_backend_does_not_offer(sasl_broker, certs):
    """SCRAM-SHA-256 relayed to a listener that offers only SCRAM-SHA-512: start-up fails, one line."""
    env = {**_env(PASSWORD), "KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL",
           "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512", "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(certs[0]),
           "KSHARE_SASL_AUTHENTICATOR": "delegate", "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-256"}
    line = start_up_fails(sasl_broker.ssl_bootstrap, env, PASSWORD,
                          listeners=f"SASL_PLAINTEXT://127.0.0.1:{free_port()}")
    assert "SCRAM-SHA-256" in line and "it offers: SCRAM-SHA-512" in line, line


def first_errors(config: dict, topic: str, timeout_s: float = 20) -> list:
    """The errors a Producer reports (error_cb) while trying to send one record."""
    errors: list = []
    producer = Producer({**config, "error_cb": errors.append, "log_level": 0})
    producer.produce(topic, b"never")
    deadline = time.monotonic() + timeout_s
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(0)
    return errors


def test_client_credentials_without_delegation_tokens_fail_start_up_with_one_line(sasl_broker, certs):
    """passthrough.credentials = client with a SCRAM listener needs delegation tokens; this backend
    has no delegation.token.secret.key: the start-up check says so in one line."""
    env = {**_env(PASSWORD), "KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL",
           "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512", "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(certs[0]),
           "KSHARE_SASL_AUTHENTICATOR": "delegate", "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512",
           "KSHARE_PASSTHROUGH_CREDENTIALS": "client"}
    line = start_up_fails(sasl_broker.ssl_bootstrap, env, PASSWORD,
                          listeners=f"SASL_PLAINTEXT://127.0.0.1:{free_port()}")
    assert "DELEGATION_TOKEN_AUTH_DISABLED" in line and "delegation.token.secret.key" in line, line
