"""OAUTHBEARER tokens for the backend: the cache (refresh at Kafka's window factor), the
client-credentials request, the token command, the settings — and no secret in any error."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.config import ConfigError, load_config
from kshare_sidecar.backend.oauth import CachedToken, OAuthTokenError, client_credentials, jwt_lifetime, token_command
from kshare_sidecar.backend.sasl import sasl_authenticate
from kshare_sidecar.backend.security import BackendSecurity
from tests.unit.backend.test_backend_sasl_oauth import HANDSHAKE_OK, ScriptedBroker, _frame

SECRET = "cl13nt-s3cret/with:odd&chars"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@given(lifetime=st.floats(1, 1e5), factor=st.floats(0.5, 1.0), steps=st.lists(st.floats(0, 1e4), max_size=30))
def test_a_token_is_reused_until_the_window_factor_of_its_lifetime(lifetime, factor, steps):
    """Naive model: a new fetch exactly when the clock reaches fetch time + factor * lifetime."""
    clock, fetched = Clock(), []

    def fetch():
        fetched.append(clock.now)
        return f"t{len(fetched)}", lifetime

    cache = CachedToken(fetch, describe="test", refresh_factor=factor, clock=clock)
    expected, refresh_at = 0, None

    async def run():
        nonlocal expected, refresh_at
        for step in [0.0, *steps]:
            clock.now += step
            token = await cache.token()
            if refresh_at is None or clock.now >= refresh_at:
                expected += 1
                refresh_at = clock.now + lifetime * factor
            assert token == f"t{expected}"
    asyncio.run(run())
    assert len(fetched) == expected == cache.fetches


def test_concurrent_connections_share_one_fetch():
    calls = []

    def fetch():
        calls.append(1)
        return "tok", 60.0

    cache = CachedToken(fetch, describe="test")

    async def run():
        return await asyncio.gather(*(cache.token() for _ in range(20)))
    assert asyncio.run(run()) == ["tok"] * 20 and len(calls) == 1


def test_jwt_lifetime():
    body = base64.urlsafe_b64encode(json.dumps({"exp": 1000}).encode()).rstrip(b"=").decode()
    assert jwt_lifetime(f"e30.{body}.", now=900) == 100
    assert jwt_lifetime("opaque-token") is None


class _Endpoint:
    def __init__(self, answer: tuple[int, dict]) -> None:
        self.requests: list[tuple[str, dict]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                endpoint.requests.append((self.headers["Authorization"], form))
                data = json.dumps(answer[1]).encode()
                self.send_response(answer[0])
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_client_credentials_grant_as_kafka_sends_it():
    endpoint = _Endpoint((200, {"access_token": "abc", "expires_in": 42}))
    try:
        assert client_credentials(endpoint.url, "my id", SECRET, "kafka read")() == ("abc", 42.0)
    finally:
        endpoint.close()
    auth, form = endpoint.requests[0]
    user, _, password = base64.b64decode(auth.removeprefix("Basic ")).decode().partition(":")
    assert (urllib.parse.unquote(user), urllib.parse.unquote(password)) == ("my id", SECRET)
    assert form == {"grant_type": ["client_credentials"], "scope": ["kafka read"]}


@pytest.mark.parametrize("answer, expect", [
    ((401, {"error": "invalid_client", "error_description": "bad secret"}), "HTTP 401 invalid_client bad secret"),
    ((200, {"token_type": "bearer"}), "without an access_token"),
])
def test_a_refusal_names_the_endpoint_and_the_reason_never_the_secret(answer, expect):
    endpoint = _Endpoint(answer)
    try:
        with pytest.raises(OAuthTokenError) as err:
            client_credentials(endpoint.url, "me", SECRET)()
    finally:
        endpoint.close()
    assert expect in str(err.value) and endpoint.url in str(err.value) and SECRET not in str(err.value)


def test_an_unreachable_endpoint():
    with pytest.raises(OAuthTokenError, match="cannot be reached"):
        client_credentials("http://127.0.0.1:1/token", "me", SECRET, timeout_s=2)()


def test_token_command(tmp_path):
    body = base64.urlsafe_b64encode(json.dumps({"exp": 4102444800}).encode()).rstrip(b"=").decode()
    token, lifetime = token_command(f"{sys.executable} -c \"print('e30.{body}.')\"")()
    assert token == f"e30.{body}." and lifetime > 1e8
    with pytest.raises(OAuthTokenError) as err:
        token_command(f"{sys.executable} -c \"import sys; print('{SECRET}'); sys.exit(3)\"")()
    assert "exit 3" in str(err.value) and SECRET not in str(err.value)


def _security(**settings):
    cfg = load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092",
                                         "backend.security.protocol": "SASL_SSL",
                                         "backend.sasl.mechanism": "OAUTHBEARER", **settings})
    return BackendSecurity.from_config(cfg), cfg


def test_endpoint_settings_build_a_cached_provider(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    security, cfg = _security(**{
        "backend.sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "backend.sasl.oauthbearer.client.credentials.client.id": "kshare",
        "backend.sasl.oauthbearer.client.credentials.client.secret.file": str(secret_file),
        "backend.sasl.login.refresh.window.factor": "0.9"})
    provider = security.aiokafka_options()["sasl_oauth_token_provider"]
    assert isinstance(provider, CachedToken) and provider.refresh_factor == 0.9
    assert provider is security.aiokafka_options()["sasl_oauth_token_provider"], "one cache for all clients"
    for text in (repr(security), repr(cfg), repr(provider), security.describe()):
        assert SECRET not in text


@pytest.mark.parametrize("settings, message", [
    ({}, "needs exactly one of"),
    ({"backend.sasl.oauthbearer.token.endpoint.url": "https://idp/t", "backend.sasl.oauthbearer.token.command": "x"},
     "set: backend.sasl.oauthbearer.token.endpoint.url, backend.sasl.oauthbearer.token.command"),
    ({"backend.sasl.oauthbearer.token.endpoint.url": "idp/t"}, "expected an http(s):// URL"),
    ({"backend.sasl.oauthbearer.token.endpoint.url": "https://idp/t",
      "backend.sasl.oauthbearer.client.credentials.client.secret": SECRET},
     "needs backend.sasl.oauthbearer.client.credentials.client.id"),
    ({"backend.sasl.login.refresh.window.factor": "0.3", "backend.sasl.oauthbearer.token.command": "x"},
     "out of range"),
])
def test_bad_settings_name_the_key_never_the_secret(settings, message):
    with pytest.raises(ConfigError) as err:
        _security(**settings)
    assert message in str(err.value) and SECRET not in str(err.value)


def test_the_session_lifetime_is_returned_for_kip_368():
    from kio.schema.errors import ErrorCode
    from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse

    granted = _frame(SaslAuthenticateResponse(error_code=ErrorCode.none, error_message=None, auth_bytes=b"",
                                              session_lifetime=datetime.timedelta(milliseconds=9500)))
    security = BackendSecurity(protocol="SASL_PLAINTEXT", mechanism="OAUTHBEARER",
                               token_provider=CachedToken(lambda: ("h.p.", 60), describe="t"))
    assert asyncio.run(sasl_authenticate(ScriptedBroker([HANDSHAKE_OK, granted]), security)) == 9.5


def test_a_failed_refresh_keeps_the_current_token_until_it_expires(caplog):
    clock, answers = Clock(), [("t1", 100.0), OAuthTokenError("endpoint down"), OAuthTokenError("endpoint down"), ("t2", 100.0)]

    def fetch():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    cache = CachedToken(fetch, describe="test", clock=clock)

    async def run():
        assert await cache.token() == "t1"
        clock.now = 90  # past 80 %: refresh fails, t1 still valid for 10 s
        assert await cache.token() == "t1"
        clock.now = 100  # expired: the failure is the answer
        with pytest.raises(OAuthTokenError):
            await cache.token()
        assert await cache.token() == "t2"
    asyncio.run(run())
    assert "refresh failed" in caplog.text


def test_kafka_3_jaas_options_for_the_client_credentials(monkeypatch):
    jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            f'clientId="old-id" clientSecret="{SECRET}" scope="kafka";')
    seen = {}

    def fake_grant(url, cid, secret, scope):
        seen.update(cid=cid, secret=secret, scope=scope)
        return lambda: ("t", 1.0)
    monkeypatch.setattr("kshare_sidecar.backend.oauth.client_credentials", fake_grant)
    security, cfg = _security(**{"backend.sasl.oauthbearer.token.endpoint.url": "https://idp/t",
                                 "backend.sasl.jaas.config": jaas,
                                 "backend.sasl.oauthbearer.client.credentials.client.id": "new-id"})
    assert seen == {"cid": "new-id", "secret": SECRET, "scope": "kafka"}  # the setting wins over clientId
    assert SECRET not in repr(cfg) and SECRET not in repr(security)
