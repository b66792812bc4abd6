"""The sidecar's own listeners secured: confluent-kafka clients over
SASL_SSL with SCRAM-SHA-512 (static credentials file), mTLS on an SSL listener (principal
``User:CN=...``), a wrong password, a plaintext client on a TLS port — and no secret in the log.

One sidecar (on the session's plain Kafka 3.9) serves three listeners: PLAINTEXT (the readiness
probe's), SASL_SSL and SSL with ``ssl.client.auth=required``; its key is encrypted
(``ssl.key.password``). It logs at DEBUG so that the principal lines can be checked and the
secret grep covers everything the sidecar can write.
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from kshare_sidecar.testing.kafka import free_port
from kshare_sidecar.testing.maven import require_tool
from kshare_sidecar.testing.probe import broker_ready, call
from tests.e2e.conftest import SidecarProcess
from tests.e2e.test_java_consumer import java_consumer  # noqa: F401 (a fixture)
from tests.e2e.test_secured_backend import first_errors, make_ca_and_server_cert, make_client_cert
from tests.support import create_topic, share_consume, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

ALICE_PW = "alice-Scram-7d21"
WRONG_PW = "not-Alices-Pw-55"
KEY_PW = "key-Pass-3e8a"


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, Path]:
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")
    d = tmp_path_factory.mktemp("listener-certs")
    ca, _ = make_ca_and_server_cert(d)
    # the sidecar's keystore with an encrypted key (ssl.key.password)
    _openssl(d, "pkcs8", "-topk8", "-in", "server.key", "-out", "server-enc.pk8", "-passout", f"pass:{KEY_PW}",
             "-v2", "aes-256-cbc")
    keystore = d / "sidecar-keystore.pem"
    keystore.write_text((d / "server-enc.pk8").read_text() + (d / "server.pem").read_text())
    client_cert, client_key = make_client_cert(d, "/O=kshare-test/CN=svc-a", "client")  # from the same CA
    users = d / "users"
    users.write_text(f"# kshare e2e users\nalice:{ALICE_PW}\n")
    return {"ca": ca, "keystore": keystore, "client_cert": client_cert, "client_key": client_key,
            "users": users}


@pytest.fixture(scope="module")
def secured(kafka_39, certs, tmp_path_factory):
    port, sasl_port, ssl_port, metrics_port = free_port(), free_port(), free_port(), free_port()
    env = {"KSHARE_METRICS_PORT": str(metrics_port), "KSHARE_SSL_KEYSTORE_LOCATION": str(certs["keystore"]), "KSHARE_SSL_KEY_PASSWORD": KEY_PW,
           "KSHARE_SSL_TRUSTSTORE_LOCATION": str(certs["ca"]), "KSHARE_SSL_CLIENT_AUTH": "required",
           "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512,PLAIN", "KSHARE_SASL_AUTHENTICATOR": "static",
           "KSHARE_SASL_CREDENTIALS_FILE": str(certs["users"])}
    listeners = (f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port}")
    sc = SidecarProcess(kafka_39.bootstrap, tmp_path_factory.mktemp("secured") / "sidecar.log", port=port, env=env,
                        listeners=listeners, args=["--log-level", "DEBUG"]).start()
    sc.sasl_bootstrap, sc.ssl_bootstrap = f"127.0.0.1:{sasl_port}", f"127.0.0.1:{ssl_port}"
    sc.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    yield sc
    sc.stop()


def scram(certs, password: str = ALICE_PW) -> dict:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
            "sasl.password": password, "ssl.ca.location": str(certs["ca"])}


def _log(sc) -> str:
    return sc.log_path.read_text(errors="replace")


def _first_error(config: dict, topic: str, timeout_s: float = 20) -> KafkaError | None:
    errors = first_errors(config, topic, timeout_s)
    return errors[0] if errors else None


def test_producer_and_share_consumer_over_sasl_ssl_scram(secured, certs, kafka_39):
    topic, group = unique("sasl-ssl"), unique("sasl-ssl-g")
    create_topic(kafka_39.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": secured.sasl_bootstrap, **scram(certs)})
    for i in range(40):
        producer.produce(topic, b"s%d" % i)
    assert producer.flush(60) == 0
    got = share_consume(secured.sasl_bootstrap, group, topic, 40, timeout_s=60, extra=scram(certs))
    assert sorted(v for v, _ in got) == sorted(b"s%d" % i for i in range(40))
    log = _log(secured)
    assert "authenticated as User:alice with SCRAM-SHA-512 on listener SASL_SSL" in log  # DEBUG only
    assert "Traceback" not in log


def test_metadata_names_the_listener_the_client_is_connected_on(secured):
    from kio.schema.metadata.v12.request import MetadataRequest

    answer = call("127.0.0.1", secured.port, MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                             include_topic_authorized_operations=False))
    assert [(b.host, b.port) for b in answer.brokers] == [("127.0.0.1", secured.port)]
    # the SASL_SSL clients above only work because they were told the SASL_SSL port, not this one


def test_mtls_principal_is_the_certificate_subject(secured, certs, kafka_39):
    topic = unique("mtls")
    create_topic(kafka_39.bootstrap, topic, 1)
    tls = {"bootstrap.servers": secured.ssl_bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(certs["ca"])}
    producer = Producer({**tls, "ssl.certificate.location": str(certs["client_cert"]),
                         "ssl.key.location": str(certs["client_key"])})
    producer.produce(topic, b"mtls")
    assert producer.flush(30) == 0
    assert "principal User:CN=svc-a,O=kshare-test (TLS client certificate) on listener SSL" in _log(secured)
    # ssl.client.auth=required: without a certificate the handshake fails, the client reads the alert
    error = _first_error(tls, topic)
    assert error is not None and "SSL alert number" in error.str(), error


def test_a_wrong_password_is_an_authentication_error_and_one_line(secured, certs):
    before = _log(secured).count("failed authentication on listener SASL_SSL")
    error = _first_error({"bootstrap.servers": secured.sasl_bootstrap, **scram(certs, WRONG_PW)}, unique("wrong"))
    assert error is not None and error.code() == KafkaError._AUTHENTICATION, error
    assert "Authentication failed during authentication due to invalid credentials" in error.str()
    time.sleep(0.5)
    lines = [line for line in _log(secured).splitlines() if "failed authentication on listener SASL_SSL" in line]
    new = lines[before:]
    # one WARNING line per refused connection (librdkafka may reconnect once before it is stopped);
    # each names the listener and mechanism, never the user or the password
    assert 1 <= len(new) <= 3, new
    assert all("WARNING" in line and "SCRAM-SHA-512" in line and "alice" not in line for line in new)
    metrics = urllib.request.urlopen(secured.metrics_url, timeout=10).read().decode()
    assert f'kshare_failed_authentication_total{{listener="SASL_SSL"}} {float(len(lines))}' in metrics
    assert 'kshare_successful_authentication_total{listener="SASL_SSL"}' in metrics


def _tls_failures(sc, listener: str) -> list[str]:
    return [line for line in _log(sc).splitlines() if f"to listener {listener}: TLS handshake failed" in line]


def _still_serving(sc) -> None:
    """No crash: the process runs and answers Metadata on its PLAINTEXT listener."""
    assert sc.proc is not None and sc.proc.poll() is None, "the sidecar exited"
    assert broker_ready("127.0.0.1", sc.port), "the sidecar stopped answering"


def _one_tls_attempt(address: str, context: ssl.SSLContext) -> str:
    """One TLS connection that sends ApiVersions: what the client sees (an SSL error's reason, or
    'closed' when the server drops the connection after the handshake — TLS 1.3 checks a client
    certificate after the client has finished)."""
    host, port = address.split(":")
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
    try:
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(struct.pack(">i", len(body)) + body)
                return "closed" if not tls.recv(4096) else "answered"
    except ssl.SSLError as exc:
        return exc.reason or type(exc).__name__
    except OSError as exc:
        return type(exc).__name__


def test_an_untrusted_client_certificate_is_refused_with_one_line(secured, certs, tmp_path):
    """A client certificate from a CA the sidecar does not trust, on the SSL listener
    (ssl.client.auth=required): the handshake fails — the client gets an SSL error, the sidecar
    one WARNING line for the one connection, and it keeps serving."""
    make_ca_and_server_cert(tmp_path, "another-ca")  # a CA the sidecar does not trust
    cert, key = make_client_cert(tmp_path, "/O=elsewhere/CN=svc-x", "svc-x")
    before = len(_tls_failures(secured, "SSL"))
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    context.load_cert_chain(str(cert), str(key))
    seen = _one_tls_attempt(secured.ssl_bootstrap, context)
    time.sleep(0.5)
    new = _tls_failures(secured, "SSL")[before:]
    print(f"\nclient: {seen}\nsidecar: {new}")
    assert seen != "answered" and len(new) == 1 and "WARNING" in new[0], (seen, new)
    tls = {"bootstrap.servers": secured.ssl_bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(certs["ca"]),
           "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    # librdkafka reads OpenSSL's alert, as from a Kafka broker (which sends "certificate unknown")
    error = _first_error(tls, unique("untrusted"))
    assert error is not None and "SSL alert number" in error.str(), error
    print(f"librdkafka: {error.name()}: {error.str()}")
    _still_serving(secured)


def test_a_client_that_does_not_trust_the_sidecar_is_refused_with_one_line(secured, tmp_path):
    """The client's CA is not the one that signed the sidecar's certificate: the client fails the
    handshake (certificate verify failed), the sidecar logs one line for the connection."""
    other_ca, _ = make_ca_and_server_cert(tmp_path, "another-ca")
    before = len(_tls_failures(secured, "SASL_SSL"))
    seen = _one_tls_attempt(secured.sasl_bootstrap, ssl.create_default_context(cafile=str(other_ca)))
    time.sleep(0.5)
    new = _tls_failures(secured, "SASL_SSL")[before:]
    print(f"\nclient: {seen}\nsidecar: {new}")
    assert seen == "CERTIFICATE_VERIFY_FAILED" and len(new) == 1, (seen, new)
    error = _first_error({"bootstrap.servers": secured.sasl_bootstrap, "security.protocol": "SASL_SSL",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": ALICE_PW,
                          "ssl.ca.location": str(other_ca)}, unique("distrust"))
    assert error is not None and "certificate verify failed" in error.str(), error
    print(f"librdkafka: {error.name()}: {error.str()}")
    _still_serving(secured)


def test_plaintext_to_a_tls_port_closes_cleanly(secured, certs):
    before = len(_tls_failures(secured, "SASL_SSL"))
    host, port = secured.sasl_bootstrap.split(":")
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"  # ApiVersions v0 in the clear
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        received = b""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
        else:
            pytest.fail("the sidecar did not close a plaintext connection to its TLS port")
    assert not received.startswith(b"\0\0\0"), "a Kafka answer on a TLS port"  # at most a TLS alert
    time.sleep(0.5)
    new = _tls_failures(secured, "SASL_SSL")[before:]
    assert len(new) == 1 and "WARNING" in new[0], new  # one connection, one line
    error = _first_error({"bootstrap.servers": secured.sasl_bootstrap, "security.protocol": "PLAINTEXT"},
                         unique("plain"), timeout_s=15)
    assert error is not None
    print(f"\nsidecar: {new[0]}\nlibrdkafka: {error.name()}: {error.str()}")
    assert "Traceback" not in _log(secured)
    _still_serving(secured)


def test_java_share_consumer_over_sasl_ssl_scram(secured, certs, kafka_39, java_consumer, tmp_path):
    """Java's KafkaShareConsumer (kafka-clients 4.x: Kafka's own SCRAM client, ApiVersions →
    SaslHandshake v1 → SaslAuthenticate v2) against the sidecar's SASL_SSL listener."""
    topic, group = unique("java-sasl"), unique("java-sasl-g")
    create_topic(kafka_39.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": secured.sasl_bootstrap, **scram(certs)})
    for i in range(10):
        producer.produce(topic, b"j%d" % i)
    assert producer.flush(60) == 0
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     f'username="alice" password="{ALICE_PW}";\n'
                     f"ssl.truststore.type=PEM\nssl.truststore.location={certs['ca']}\n")
    result = subprocess.run(java_consumer + [secured.sasl_bootstrap, group, topic, "10", "60000", str(props)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "DONE 10", result.stdout[-2000:] + result.stderr[-2000:]


def test_no_secret_in_the_log(secured):
    log = _log(secured)
    for secret in (ALICE_PW, WRONG_PW, KEY_PW):
        assert secret not in log
    assert "ERROR" not in log and "Traceback" not in log


def test_kip368_reauthentication_with_librdkafka(kafka_39, certs, tmp_path):
    """connections.max.reauth.ms: librdkafka re-authenticates its connections before the session
    ends (KIP-368) while producing and share-consuming; nothing is lost, no connection is cut."""
    port, sasl_port = free_port(), free_port()
    env = {"KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-256", "KSHARE_SASL_CREDENTIALS_FILE": str(certs["users"]),
           "KSHARE_CONNECTIONS_MAX_REAUTH_MS": "3000"}
    sc = SidecarProcess(kafka_39.bootstrap, tmp_path / "sidecar.log", port=port, env=env, args=["--log-level", "DEBUG"],
                        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}").start()
    client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
              "sasl.password": ALICE_PW}
    topic, group = unique("reauth"), unique("reauth-g")
    create_topic(kafka_39.bootstrap, topic, 1)
    try:
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{sasl_port}", **client})
        deadline = time.monotonic() + 6.5  # two session lifetimes
        sent = 0
        while time.monotonic() < deadline:
            producer.produce(topic, b"r%d" % sent)
            sent += 1
            producer.poll(0.05)
        assert producer.flush(30) == 0
        got = share_consume(f"127.0.0.1:{sasl_port}", group, topic, sent, timeout_s=60, extra=client)
        assert len({v for v, _ in got}) == sent
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    assert "re-authenticated as User:alice with SCRAM-SHA-256 on listener SASL_PLAINTEXT" in log
    assert "SASL session expired" not in log and "Traceback" not in log and ALICE_PW not in log
