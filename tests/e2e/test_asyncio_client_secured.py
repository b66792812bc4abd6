"""The asyncio ShareConsumer's TLS/SASL options (aiokafka's names) against a secured native
Kafka 4.3 and a secured kshare sidecar (on the session's Kafka 3.9), side by side, same assertions:

- SASL_SSL with SCRAM-SHA-512: consume, acknowledge, RENEW (ShareAcknowledge v2) — the share
  APIs work on an authenticated TLS connection, the broker's certificate checked against the
  test's CA (host name verified);
- SASL_PLAINTEXT with PLAIN;
- SSL with a client certificate on a listener that requires one (mTLS);
- a wrong password: ``start()`` raises AuthenticationFailedError (not retried), the password in
  no message; a CA the consumer does not trust: ``start()`` fails naming the certificate check.

Native: Kafka 4.3 with a SASL_PLAINTEXT (PLAIN) listener, a SASL_SSL (SCRAM-SHA-512) listener and
an SSL listener with ``ssl.client.auth=required`` (tests/e2e/test_secured_backend.SaslBroker plus
one listener). kshare: one sidecar with the same three listeners (static credentials file with
the same users and passwords).
"""

from __future__ import annotations

import ssl
import subprocess
import time
from pathlib import Path

import pytest

from kshare_sidecar.client import AcknowledgeType, AuthenticationFailedError, ShareConsumer, ShareConsumerError
from kshare_sidecar.client.conn import BrokerConnError
from kshare_sidecar.testing.kafka import free_port
from kshare_sidecar.testing.maven import require_tool
from tests.e2e.conftest import LOCK_MS, SidecarProcess, Target
from tests.e2e.test_secured_backend import JAAS, SaslBroker, make_ca_and_server_cert
from tests.support import create_topic, produce, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

#: SCRAM user on the native SASL_SSL listener (format-time) and in the sidecar's credentials file;
#: PLAIN user "kshare" of the native SASL_PLAINTEXT listener's JAAS (tests/e2e/test_secured_backend.py)
SCRAM_PW = "kshare-Secret-9f3c"
PLAIN_PW = SCRAM_PW
WRONG_PW = "wrong-Pw-Asyncio-31"


class SecuredNative(SaslBroker):
    """SaslBroker (SASL_PLAINTEXT PLAIN, SASL_SSL SCRAM-SHA-512) + an SSL listener requiring a client
    certificate signed by the test CA, with the e2e suite's short share-group intervals."""

    mtls_port = 0
    oauth_port = 0
    truststore: Path | None = None

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        self.mtls_port = self.mtls_port or free_port()
        self.oauth_port = self.oauth_port or free_port()
        extra = f",MTLS://127.0.0.1:{self.mtls_port},OAUTH://127.0.0.1:{self.oauth_port}"
        props["listeners"] += extra
        props["advertised.listeners"] += extra
        props["listener.security.protocol.map"] += ",MTLS:SSL,OAUTH:SASL_PLAINTEXT"
        # OAUTHBEARER with Kafka's unsecured JWS validator (the broker default; for tests)
        props["listener.name.oauth.sasl.enabled.mechanisms"] = "OAUTHBEARER"
        props["listener.name.oauth.oauthbearer.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker";')
        props["listener.name.mtls.ssl.keystore.type"] = "PEM"
        props["listener.name.mtls.ssl.keystore.location"] = str(self.keystore)
        props["listener.name.mtls.ssl.truststore.type"] = "PEM"
        props["listener.name.mtls.ssl.truststore.location"] = str(self.truststore)
        props["listener.name.mtls.ssl.client.auth"] = "required"
        return props


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, Path]:
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")
    d = tmp_path_factory.mktemp("aio-certs")
    ca, keystore = make_ca_and_server_cert(d)
    _openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/O=kshare-test/CN=aio-client", "-keyout",
             "client.key", "-out", "client.csr")
    _openssl(d, "x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-out", "client.pem")
    users = d / "users"
    users.write_text(f"kshare:{SCRAM_PW}\n")
    return {"ca": ca, "keystore": keystore, "client_cert": d / "client.pem", "client_key": d / "client.key",
            "users": users}


@pytest.fixture(scope="module")
def native_secured(certs):
    broker = SecuredNative("4", extra_config={"group.share.record.lock.duration.ms": str(LOCK_MS),
                                              "group.share.min.record.lock.duration.ms": "1000",
                                              "group.share.heartbeat.interval.ms": "1000",
                                              "group.share.min.heartbeat.interval.ms": "1000"})
    broker.keystore, broker.truststore = certs["keystore"], certs["ca"]
    broker.format_args = ["--add-scram", f"SCRAM-SHA-512=[name=kshare,password={SCRAM_PW}]"]
    with broker:
        yield broker


@pytest.fixture(scope="module")
def kshare_secured(kafka_39, certs, tmp_path_factory):
    port, sasl_port, ssl_port, mtls_port = free_port(), free_port(), free_port(), free_port()
    env = {"KSHARE_SSL_KEYSTORE_LOCATION": str(certs["keystore"]), "KSHARE_SSL_TRUSTSTORE_LOCATION": str(certs["ca"]),
           "KSHARE_SSL_CLIENT_AUTH": "required", "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512,PLAIN",
           "KSHARE_SASL_AUTHENTICATOR": "static", "KSHARE_SASL_CREDENTIALS_FILE": str(certs["users"])}
    listeners = (f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                 f"SASL_SSL://127.0.0.1:{ssl_port},SSL://127.0.0.1:{mtls_port}")
    sc = SidecarProcess(kafka_39.bootstrap, tmp_path_factory.mktemp("aio-secured") / "sidecar.log", port=port,
                        env=env, listeners=listeners, args=["--log-level", "DEBUG"]).start()
    sc.sasl_port, sc.ssl_port, sc.mtls_port = sasl_port, ssl_port, mtls_port
    yield sc
    sc.stop()


class SecuredTarget(Target):
    sasl_plaintext: str = ""
    sasl_ssl: str = ""
    mtls: str = ""


@pytest.fixture(params=["kshare", "native"])
def secured(request) -> SecuredTarget:
    if request.param == "kshare":
        sc = request.getfixturevalue("kshare_secured")
        t = SecuredTarget("kshare", sc.bootstrap, sc.backend)
        t.sasl_plaintext, t.sasl_ssl, t.mtls = (f"127.0.0.1:{p}" for p in (sc.sasl_port, sc.ssl_port, sc.mtls_port))
        t.log_path = sc.log_path
    else:
        b = request.getfixturevalue("native_secured")
        t = SecuredTarget("native", b.bootstrap, b.bootstrap)
        t.sasl_plaintext, t.sasl_ssl, t.mtls = b.sasl_bootstrap, b.ssl_bootstrap, f"127.0.0.1:{b.mtls_port}"
        t.log_path = None
    return t


def _setup(t: SecuredTarget, records: int) -> tuple[str, str, list[bytes]]:
    topic, group = unique("aio-sec"), unique("aio-sec-g")
    create_topic(t.backend, topic, 1)
    set_group_config(t.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    return topic, group, produce(t.backend, topic, records)


def _ca_context(certs, client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    if client_cert:
        ctx.load_cert_chain(str(certs["client_cert"]), str(certs["client_key"]))
    return ctx


async def _consume_all(c: ShareConsumer, want: int, timeout: float = 40.0) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for recs in (await c.getmany(timeout_ms=500)).values():
            for r in recs:
                c.acknowledge(r, AcknowledgeType.ACCEPT)
            got += recs
    assert all(exc is None for exc in (await c.commit()).values())
    return got


async def test_sasl_ssl_scram_sha_512_consumes_acknowledges_and_renews(secured, certs):
    topic, group, values = _setup(secured, 30)
    async with ShareConsumer(topic, bootstrap_servers=secured.sasl_ssl, group_id=group,
                             acknowledgement_mode="explicit", security_protocol="SASL_SSL",
                             ssl_context=_ca_context(certs), sasl_mechanism="SCRAM-SHA-512",
                             sasl_plain_username="kshare", sasl_plain_password=SCRAM_PW) as c:
        first = []
        while not first:
            for recs in (await c.getmany(timeout_ms=1000, max_records=1)).values():
                first += recs
        await c.renew(first[0])  # ShareAcknowledge v2 over the authenticated TLS connection
        c.acknowledge(first[0])
        rest = await _consume_all(c, len(values) - len(first))
    assert sorted(r.value for r in first + rest) == sorted(values)
    if secured.log_path is not None:
        log = secured.log_path.read_text(errors="replace")
        assert "authenticated as User:kshare with SCRAM-SHA-512 on listener SASL_SSL" in log
        assert SCRAM_PW not in log


async def test_sasl_plaintext_plain(secured):
    topic, group, values = _setup(secured, 10)
    async with ShareConsumer(topic, bootstrap_servers=secured.sasl_plaintext, group_id=group,
                             acknowledgement_mode="explicit", security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="kshare", sasl_plain_password=PLAIN_PW) as c:
        got = await _consume_all(c, len(values))
    assert sorted(r.value for r in got) == sorted(values)


async def test_mtls_client_certificate_on_an_ssl_listener_requiring_one(secured, certs):
    topic, group, values = _setup(secured, 10)
    async with ShareConsumer(topic, bootstrap_servers=secured.mtls, group_id=group, acknowledgement_mode="explicit",
                             security_protocol="SSL", ssl_context=_ca_context(certs, client_cert=True)) as c:
        got = await _consume_all(c, len(values))
    assert sorted(r.value for r in got) == sorted(values)
    if secured.log_path is not None:
        assert ("principal User:CN=aio-client,O=kshare-test (TLS client certificate) on listener SSL"
                in secured.log_path.read_text(errors="replace"))
    # without the certificate the listener refuses the handshake: no broker answers
    c = ShareConsumer(topic, bootstrap_servers=secured.mtls, group_id=group, security_protocol="SSL",
                      ssl_context=_ca_context(certs), request_timeout_ms=5000)
    with pytest.raises((BrokerConnError, ShareConsumerError, TimeoutError)):
        await c.start()
    await c.close()


async def test_wrong_password_is_a_clear_authentication_error(secured, certs):
    topic, group, _ = _setup(secured, 0)
    c = ShareConsumer(topic, bootstrap_servers=secured.sasl_ssl, group_id=group, security_protocol="SASL_SSL",
                      ssl_context=_ca_context(certs), sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="kshare",
                      sasl_plain_password=WRONG_PW)
    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError) as err:
        await c.start()
    await c.close()
    assert time.monotonic() - started < 15, "an authentication failure must not be retried"
    assert "SASL_AUTHENTICATION_FAILED" in str(err.value).upper() and WRONG_PW not in str(err.value)
    if secured.log_path is not None:
        time.sleep(0.3)
        assert WRONG_PW not in secured.log_path.read_text(errors="replace")


async def test_an_untrusted_broker_certificate_fails_start(secured):
    topic, group, _ = _setup(secured, 0)
    c = ShareConsumer(topic, bootstrap_servers=secured.sasl_ssl, group_id=group, security_protocol="SASL_SSL",
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="kshare", sasl_plain_password=SCRAM_PW)
    with pytest.raises(BrokerConnError) as err:  # the system CAs do not know the test's CA
        await c.start()
    await c.close()
    assert "CERTIFICATE_VERIFY_FAILED" in str(err.value)
    assert SCRAM_PW not in str(err.value)


class Tokens:
    """An OAUTHBEARER token provider (aiokafka's AbstractTokenProvider shape): unsigned JWTs."""

    def __init__(self, lifetime_s: float) -> None:
        self.lifetime_s, self.calls = lifetime_s, 0

    async def token(self) -> str:
        from tests.e2e.test_backend_mtls_oauth import unsecured_jwt

        self.calls += 1
        return unsecured_jwt("aio-user", self.lifetime_s)


async def test_oauthbearer_token_provider_on_native_kafka(native_secured):
    """Native only: the sidecar's listeners offer PLAIN and SCRAM, not OAUTHBEARER (docs/security.md).
    A good token consumes; an expired one is AuthenticationFailedError with the broker's reason
    (Kafka answers RFC 7628's error challenge, which backend/sasl.py completes with kvsep)."""
    t = SecuredTarget("native", native_secured.bootstrap, native_secured.bootstrap)
    topic, group, values = _setup(t, 10)
    bootstrap = f"127.0.0.1:{native_secured.oauth_port}"
    tokens = Tokens(3600)
    async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, acknowledgement_mode="explicit",
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                             sasl_oauth_token_provider=tokens) as c:
        got = await _consume_all(c, len(values))
    assert sorted(r.value for r in got) == sorted(values) and tokens.calls >= 1
    c = ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Tokens(-30))
    with pytest.raises(AuthenticationFailedError, match="invalid_token"):
        await c.start()
    await c.close()
