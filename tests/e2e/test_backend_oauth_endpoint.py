"""The sidecar gets its backend OAUTHBEARER tokens from a client-credentials token endpoint, and
its backend sessions expire (KIP-368).

A Kafka 3.9 with a SASL_PLAINTEXT OAUTHBEARER listener (Kafka's unsecured JWS validator, unsigned
JWTs) and ``connections.max.reauth.ms=10000``: every SASL session ends after at most 10 s, or at
its token's ``exp`` if sooner, and the broker closes a connection whose session expired at its
next request. The token endpoint is this test's own (http.server on loopback) issuing 20 s
tokens, so during a ~40 s share-consume the sidecar must refresh its token (several endpoint
calls) and its connections must re-authenticate or reconnect, with nothing lost and no stall.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from confluent_kafka import Producer

from kshare_sidecar.testing.kafka import KafkaBroker, free_port
from tests.e2e.conftest import SidecarProcess
from tests.e2e.test_backend_mtls_oauth import _start_fails, unsecured_jwt
from tests.support import create_topic, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

CLIENT_ID, SECRET = "kshare-sidecar", "s3cr3t-client-credential"
TOKEN_LIFETIME_S = 20
RUN_S = float(os.environ.get("KSHARE_REAUTH_RUN_S", "40"))  # 60+ for a longer look; 40 keeps the suite quick


class ReauthOauthBroker(KafkaBroker):
    oauth_port = 0

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        self.oauth_port = self.oauth_port or free_port()
        extra = f",OAUTH://127.0.0.1:{self.oauth_port}"
        props["listeners"] += extra
        props["advertised.listeners"] += extra
        props["listener.security.protocol.map"] += ",OAUTH:SASL_PLAINTEXT"
        props["listener.name.oauth.sasl.enabled.mechanisms"] = "OAUTHBEARER"
        props["listener.name.oauth.oauthbearer.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker";')
        props["connections.max.reauth.ms"] = "10000"  # KIP-368: SASL sessions end after 10 s
        return props


class TokenEndpoint:
    """A client-credentials token endpoint (RFC 6749 4.4) on loopback, counting its grants."""

    def __init__(self) -> None:
        self.grants: list[float] = []
        self.refusals = 0
        self.forms: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                endpoint.forms.append(form)
                expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{SECRET}".encode()).decode()
                if self.headers.get("Authorization") != expected or form.get("grant_type") != ["client_credentials"]:
                    endpoint.refusals += 1
                    self._answer(401, {"error": "invalid_client", "error_description": "bad client credentials"})
                    return
                endpoint.grants.append(time.monotonic())
                self._answer(200, {"access_token": unsecured_jwt("kshare", TOKEN_LIFETIME_S), "token_type": "bearer",
                                   "expires_in": TOKEN_LIFETIME_S})

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> TokenEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def broker():
    with ReauthOauthBroker("3.9") as b:
        yield b


def _env(url: str, secret: str) -> dict[str, str]:
    return {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KSHARE_BACKEND_SASL_MECHANISM": "OAUTHBEARER",
            "KSHARE_BACKEND_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": url,
            "KSHARE_BACKEND_SASL_OAUTHBEARER_CLIENT_CREDENTIALS_CLIENT_ID": CLIENT_ID,
            "KSHARE_BACKEND_SASL_OAUTHBEARER_CLIENT_CREDENTIALS_CLIENT_SECRET": secret,
            "KSHARE_BACKEND_SASL_OAUTHBEARER_SCOPE": "kafka"}


@pytest.mark.optin("tokens")  # ~45 s
def test_tokens_refresh_and_sessions_reauthenticate_during_a_share_consume(broker, tmp_path):
    from confluent_kafka import ShareConsumer

    topic, group = unique("oa"), unique("oa-g")
    create_topic(broker.bootstrap, topic, 2)
    with TokenEndpoint() as endpoint:
        sc = SidecarProcess(f"127.0.0.1:{broker.oauth_port}", tmp_path / "sidecar.log", env=_env(endpoint.url, SECRET),
                            args=["--log-level", "DEBUG"]).start()
        sent: list[bytes] = []
        stop = threading.Event()

        def produce() -> None:  # pass-through: the sidecar's raw connections to the OAUTH listener
            producer = Producer({"bootstrap.servers": sc.bootstrap, "linger.ms": 5})
            i = 0
            while not stop.is_set():
                value = b"r%d" % i
                producer.produce(topic, value)
                sent.append(value)
                producer.poll(0)
                i += 1
                time.sleep(0.05)
            assert producer.flush(60) == 0

        producer_thread = threading.Thread(target=produce)
        consumer = ShareConsumer({"bootstrap.servers": sc.bootstrap, "group.id": group})
        got: dict[bytes, float] = {}
        try:
            producer_thread.start()
            consumer.subscribe([topic])
            start = time.monotonic()
            while time.monotonic() - start < RUN_S:
                for msg in consumer.poll(0.5):
                    assert not msg.error(), msg.error()
                    got.setdefault(msg.value(), time.monotonic())
            stop.set()
            producer_thread.join(90)
            deadline = time.monotonic() + 60
            while set(sent) - set(got) and time.monotonic() < deadline:
                for msg in consumer.poll(0.5):
                    assert not msg.error(), msg.error()
                    got.setdefault(msg.value(), time.monotonic())
        finally:
            stop.set()
            consumer.close()
            sc.stop()
        log = sc.log_path.read_text(errors="replace")
    missing = set(sent) - set(got)
    assert not missing, f"{len(missing)} of {len(sent)} records never consumed"
    arrivals = sorted(got.values())
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    print(f"\n{len(sent)} records, token grants {len(endpoint.grants)} at "
          f"{[round(t - endpoint.grants[0], 1) for t in endpoint.grants]}, largest gap {max(gaps):.2f} s, "
          f"re-authentications logged {log.count('re-authenticated')}")
    assert len(endpoint.grants) >= 2, "the sidecar never refreshed its token"
    assert endpoint.forms[0].get("scope") == ["kafka"]
    assert log.count("re-authenticated") >= 1, "no KIP-368 re-authentication on a raw backend connection"
    # without it the broker closes the raw connections: pass-through Produce/Metadata fail at the client
    assert "broker closed the connection" not in log and "backend unavailable" not in log
    assert max(gaps) < 8, f"consumption stalled for {max(gaps):.1f} s"
    assert SECRET not in log and "Traceback" not in log


def test_a_wrong_client_secret_fails_start_up_with_one_line(broker):
    wrong = "wrong-secret-value-123"
    with TokenEndpoint() as endpoint:
        output = _start_fails(f"127.0.0.1:{broker.oauth_port}", _env(endpoint.url, wrong))
    assert endpoint.refusals >= 1
    assert wrong not in output and SECRET not in output
    assert "Traceback" not in output, output[-3000:]
    failed = [line for line in output.splitlines() if "start-up failed" in line]
    assert len(failed) == 1, output[-2000:]
    assert "no OAUTHBEARER token for the backend" in failed[0] and "HTTP 401 invalid_client" in failed[0], failed[0]


def test_a_token_command(broker, tmp_path):
    """backend.sasl.oauthbearer.token.command: the command's output is the token (lifetime: its exp)."""
    from tests.e2e.test_backend_mtls_oauth import _through_sidecar

    script = tmp_path / "token.py"
    script.write_text("import base64, json, time\n"
                      "b64 = lambda o: base64.urlsafe_b64encode(json.dumps(o).encode()).rstrip(b'=').decode()\n"
                      "now = time.time()\n"
                      "claims = {'sub': 'kshare', 'iat': now - 60, 'exp': now + 3600}\n"
                      "print(b64({'alg': 'none'}) + '.' + b64(claims) + '.')\n")
    env = {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KSHARE_BACKEND_SASL_MECHANISM": "OAUTHBEARER",
           "KSHARE_BACKEND_SASL_OAUTHBEARER_TOKEN_COMMAND": f"{sys.executable} {script}"}
    sc = SidecarProcess(f"127.0.0.1:{broker.oauth_port}", tmp_path / "sidecar.log", env=env).start()
    try:
        _through_sidecar(broker, sc, b"cmd", n=30)
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    assert "Traceback" not in log
