"""The sidecar against a backend that wants a client certificate (mTLS) or an OAUTHBEARER token.
Kafka 3.9 with, beside the plaintext listener the harness probes:

- ``MTLS``: SSL with ``ssl.client.auth=required`` (certificates from a CA this test makes);
- ``OAUTH``: SASL_PLAINTEXT with OAUTHBEARER and Kafka's *unsecured* JWS validator
  (``OAuthBearerUnsecuredValidatorCallbackHandler``, the broker default, for tests): an unsigned
  JWT (``alg: none``) with ``sub``, ``iat`` and ``exp`` claims.

Each: share consumption (reads, state writes, admin — aiokafka clients) and pass-through (raw
connections) through the sidecar; and the failure (no certificate / an expired token): start-up
fails with one clear line, and no key or token reaches the output.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kshare_sidecar.testing.kafka import KafkaBroker, free_port
from kshare_sidecar.testing.maven import require_tool
from tests.e2e.conftest import SidecarProcess
from tests.e2e.test_secured_backend import make_ca_and_server_cert, make_client_cert
from tests.support import create_topic, share_consume, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


class MtlsOauthBroker(KafkaBroker):
    mtls_port = 0
    oauth_port = 0
    keystore: Path | None = None
    truststore: Path | None = None

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        self.mtls_port = self.mtls_port or free_port()
        self.oauth_port = self.oauth_port or free_port()
        extra = f",MTLS://127.0.0.1:{self.mtls_port},OAUTH://127.0.0.1:{self.oauth_port}"
        props["listeners"] += extra
        props["advertised.listeners"] += extra
        props["listener.security.protocol.map"] += ",MTLS:SSL,OAUTH:SASL_PLAINTEXT"
        props["listener.name.mtls.ssl.keystore.type"] = "PEM"
        props["listener.name.mtls.ssl.keystore.location"] = str(self.keystore)
        props["listener.name.mtls.ssl.truststore.type"] = "PEM"
        props["listener.name.mtls.ssl.truststore.location"] = str(self.truststore)
        props["listener.name.mtls.ssl.client.auth"] = "required"
        props["listener.name.oauth.sasl.enabled.mechanisms"] = "OAUTHBEARER"
        props["listener.name.oauth.oauthbearer.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker";')
        return props


def unsecured_jwt(sub: str, lifetime_s: float) -> str:
    """An unsigned JWS (``alg: none``) as Kafka's unsecured OAUTHBEARER validator accepts it."""
    def b64(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    now = time.time()
    return f'{b64({"alg": "none"})}.{b64({"sub": sub, "iat": now - 60, "exp": now + lifetime_s})}.'


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, Path]:
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")
    d = tmp_path_factory.mktemp("mtls-certs")
    ca, keystore = make_ca_and_server_cert(d)
    cert, key = make_client_cert(d, "/O=kshare-test/CN=kshare-sidecar", "client")
    client_keystore = d / "client-keystore.pem"
    client_keystore.write_text(key.read_text() + cert.read_text())
    return {"ca": ca, "keystore": keystore, "client_keystore": client_keystore, "client_key": key}


@pytest.fixture(scope="module")
def broker(certs):
    b = MtlsOauthBroker("3.9")
    b.keystore, b.truststore = certs["keystore"], certs["ca"]
    with b:
        yield b


def _through_sidecar(broker, sc, prefix: bytes, n: int = 60) -> None:
    topic, group = unique("bk"), unique("bk-g")
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": sc.bootstrap})  # pass-through: upstream is the secured listener
    for i in range(n):
        producer.produce(topic, prefix + b"%d" % i)
    assert producer.flush(60) == 0
    got = share_consume(sc.bootstrap, group, topic, n, timeout_s=90)
    assert sorted(v for v, _ in got) == sorted(prefix + b"%d" % i for i in range(n))


def _start_fails(bootstrap: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "sidecar", "run", "--bootstrap-server",
                           bootstrap, "--listen", f"127.0.0.1:{free_port()}"],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-2000:]
    lines = [line for line in output.splitlines() if "start-up failed" in line]
    assert len(lines) == 1, output[-3000:]  # one line says why
    print("\n" + lines[0])
    return output


def test_mtls_client_certificate_to_the_backend(broker, certs, tmp_path):
    env = {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SSL", "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(certs["ca"]),
           "KSHARE_BACKEND_SSL_KEYSTORE_LOCATION": str(certs["client_keystore"])}
    sc = SidecarProcess(f"127.0.0.1:{broker.mtls_port}", tmp_path / "sidecar.log", env=env).start()
    try:
        _through_sidecar(broker, sc, b"mtls")
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    assert "Traceback" not in log and "PRIVATE KEY" not in log


def test_without_a_client_certificate_start_up_fails_with_one_line(broker, certs):
    output = _start_fails(f"127.0.0.1:{broker.mtls_port}", {
        "KSHARE_BACKEND_SECURITY_PROTOCOL": "SSL", "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(certs["ca"])})
    assert "Traceback" not in output, output[-3000:]
    assert "start-up failed: TLS with the backend failed (SSL)" in output and "ALERT" in output, \
        output[-2000:]


def test_oauthbearer_token_file_to_the_backend(broker, tmp_path):
    token = tmp_path / "token"
    token.write_text(unsecured_jwt("kshare", 3600))
    env = {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KSHARE_BACKEND_SASL_MECHANISM": "OAUTHBEARER",
           "KSHARE_BACKEND_SASL_OAUTHBEARER_TOKEN_FILE": str(token)}
    sc = SidecarProcess(f"127.0.0.1:{broker.oauth_port}", tmp_path / "sidecar.log", env=env).start()
    try:
        _through_sidecar(broker, sc, b"oauth")
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    assert "Traceback" not in log and token.read_text() not in log


def test_an_expired_token_fails_start_up_with_one_line(broker, tmp_path):
    token = tmp_path / "expired"
    token.write_text(unsecured_jwt("kshare", -30))
    output = _start_fails(f"127.0.0.1:{broker.oauth_port}", {
        "KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KSHARE_BACKEND_SASL_MECHANISM": "OAUTHBEARER",
        "KSHARE_BACKEND_SASL_OAUTHBEARER_TOKEN_FILE": str(token)})
    assert token.read_text() not in output
    assert "Traceback" not in output, output[-3000:]
    assert "start-up failed: the backend refused the sidecar's credentials (SASL_PLAINTEXT OAUTHBEARER)" in output, \
        output[-2000:]
    assert "OAUTHBEARER token refused" in output and "invalid_token" in output, output[-2000:]  # the broker's
