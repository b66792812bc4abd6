"""Kafka's SASL gate on a listener (SaslServerAuthenticator's states), driven with frames."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest as AuthV0
from kio.schema.sasl_authenticate.v0.response import SaslAuthenticateResponse as AuthRespV0
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from kshare_sidecar.api import Dispatcher, build_registry
from kshare_sidecar.api.sasl import ListenerHandler
from kshare_sidecar.auth.scram import make_credential
from kshare_sidecar.metrics import STATS
from kshare_sidecar.wire import codec
from kshare_sidecar.wire.errors import CloseAfterResponse, CloseConnection

from .conftest import NODE, FakeConnection, request_frame


class Users:
    mechanisms = frozenset({"PLAIN", "SCRAM-SHA-512"})

    def __init__(self) -> None:
        self.cred = make_credential("SCRAM-SHA-512", "alice-pw")

    async def verify_plain(self, username, password):
        return (username, password) == ("alice", "alice-pw")

    async def scram_credential(self, mechanism, username):
        return self.cred if username == "alice" else None

    async def close(self):
        pass


class Conn(FakeConnection):
    def __init__(self) -> None:
        super().__init__()
        self.principal = "User:ANONYMOUS"
        self.listener = "SASL_SSL"
        self.peer_cert = None


@pytest.fixture
def seen():
    return []


@pytest.fixture
def handler(catalog, seen):
    registry = build_registry(catalog)
    metadata = registry.get(3)

    async def spy(ctx, header, request):  # records the principal a handler sees
        seen.append((ctx.principal, ctx.listener))
        return await metadata.handler(ctx, header, request)

    registry.register(3, metadata.min_version, metadata.max_version, spy, error_response=metadata.error_response,
                      replace=True)
    return ListenerHandler(Dispatcher(registry, NODE), listener="SASL_SSL", mechanisms=("PLAIN", "SCRAM-SHA-512"),
                           authenticator=Users(), sasl=True)


async def send(handler, conn, request, cid=1):
    out = await handler(conn, request_frame(request, cid), lambda: None)
    return codec.decode_response(out[4:], _response_class(request))[1]


def _response_class(request):
    return codec.response_class(type(request).__api_key__, type(request).__version__)


def plain(user, password):
    return SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode())


async def test_plain_then_requests_carry_the_principal(handler, seen):
    ok_before = STATS.authentications.get("SASL_SSL", 0)
    conn = Conn()
    versions = await send(handler, conn, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert {17, 36} <= {k.api_key for k in versions.api_keys}
    hs = await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))
    assert hs.error_code == ErrorCode.none and tuple(hs.mechanisms) == ("PLAIN", "SCRAM-SHA-512")
    auth = await send(handler, conn, plain("alice", "alice-pw"))
    assert auth.error_code == ErrorCode.none and auth.session_lifetime == datetime.timedelta(0)
    assert STATS.authentications.get("SASL_SSL", 0) == ok_before + 1
    assert conn.principal == "User:alice"
    await send(handler, conn, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False))
    assert seen == [("User:alice", "SASL_SSL")]
    again = await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))  # KafkaApis' answer
    assert again.error_code == ErrorCode.illegal_sasl_state


async def test_a_wrong_password_answers_58_then_closes(handler, caplog):
    handler.failure_delay_s = 0.2  # connection.failed.authentication.delay.ms
    failed_before = STATS.authentication_failures.get("SASL_SSL", 0)
    conn = Conn()
    await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))
    started = asyncio.get_running_loop().time()
    with pytest.raises(CloseAfterResponse) as exc:
        await send(handler, conn, plain("alice", "Wrong-pw-123"))
    assert asyncio.get_running_loop().time() - started >= 0.19
    _, body = codec.decode_response(exc.value.response[4:], SaslAuthenticateResponse)
    assert body.error_code == ErrorCode.sasl_authentication_failed
    assert body.error_message == "Authentication failed: Invalid username or password"
    assert conn.principal == "User:ANONYMOUS"
    assert STATS.authentication_failures["SASL_SSL"] == failed_before + 1
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "failed authentication on listener SASL_SSL" in warnings[0].getMessage()
    assert "Wrong-pw-123" not in caplog.text and "alice" not in warnings[0].getMessage()


@pytest.mark.parametrize("request_", [
    MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
    SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-pw"),  # no handshake first
])
async def test_nothing_but_apiversions_and_handshake_before_authentication(handler, request_, seen):
    with pytest.raises(CloseConnection, match="during SASL handshake"):
        await send(handler, Conn(), request_)
    assert seen == []


async def test_apiversions_once_and_other_requests_during_authentication_close(handler):
    conn = Conn()
    await send(handler, conn, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    with pytest.raises(CloseConnection, match="Unexpected ApiVersions"):
        await send(handler, conn, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    conn = Conn()
    await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))
    with pytest.raises(CloseConnection, match="during SASL authentication"):  # no error form: closed
        await send(handler, conn, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                  include_topic_authorized_operations=False))
    conn = Conn()
    await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))
    with pytest.raises(CloseAfterResponse) as exc:  # Kafka's answer in the API's error form, then closed
        await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))
    _, body = codec.decode_response(exc.value.response[4:], SaslHandshakeResponse)
    assert body.error_code == ErrorCode.illegal_sasl_state


async def test_an_unknown_mechanism_lists_the_enabled_ones_then_closes(handler):
    with pytest.raises(CloseAfterResponse) as exc:
        await send(handler, Conn(), SaslHandshakeRequest(mechanism="GSSAPI"))
    _, body = codec.decode_response(exc.value.response[4:], SaslHandshakeResponse)
    assert body.error_code == ErrorCode.unsupported_sasl_mechanism
    assert tuple(body.mechanisms) == ("PLAIN", "SCRAM-SHA-512")


async def _scram_exchange(handler, conn, password="alice-pw"):
    """aiokafka's SCRAM-SHA-512 client as alice through the gate: (final answer, the client)."""
    from aiokafka.conn import ScramAuthenticator

    await send(handler, conn, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    client = ScramAuthenticator(loop=asyncio.get_running_loop(), sasl_plain_username="alice",
                                sasl_plain_password=password, sasl_mechanism="SCRAM-SHA-512")
    token, _ = await client.step(None)
    first = await send(handler, conn, SaslAuthenticateRequest(auth_bytes=token))
    token, _ = await client.step(first.auth_bytes)
    return await send(handler, conn, SaslAuthenticateRequest(auth_bytes=token)), client


async def test_scram_sha_512_with_aiokafkas_client(handler):
    conn = Conn()
    final, client = await _scram_exchange(handler, conn)
    assert final.error_code == ErrorCode.none and await client.step(final.auth_bytes) is None
    assert conn.principal == "User:alice"


async def test_scram_unknown_user_gets_kafkas_generic_message(handler):
    conn = Conn()
    await send(handler, conn, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    with pytest.raises(CloseAfterResponse) as exc:
        await send(handler, conn, SaslAuthenticateRequest(auth_bytes=b"n,,n=mallory,r=abc"))
    _, body = codec.decode_response(exc.value.response[4:], SaslAuthenticateResponse)
    assert body.error_message == ("Authentication failed during authentication due to invalid credentials with "
                                  "SASL mechanism SCRAM-SHA-512")


async def test_handshake_v0_then_raw_tokens_and_authenticate_v0(handler):
    conn = Conn()
    await send(handler, conn, HandshakeV0(mechanism="PLAIN"))
    out = await handler(conn, b"\0alice\0alice-pw", lambda: None)
    assert out == b"\0\0\0\0" and conn.principal == "User:alice"
    conn = Conn()
    await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))
    body = await send(handler, conn, AuthV0(auth_bytes=b"\0alice\0alice-pw"))
    assert isinstance(body, AuthRespV0) and body.error_code == ErrorCode.none


async def test_plaintext_listener_answers_sasl_requests_illegal_state(catalog):
    handler = ListenerHandler(Dispatcher(build_registry(catalog), NODE), listener="PLAINTEXT")
    conn = Conn()
    body = await send(handler, conn, SaslAuthenticateRequest(auth_bytes=b"x"))
    assert body.error_code == ErrorCode.illegal_sasl_state
    assert body.error_message == "SaslAuthenticate request received after successful authentication"
    assert conn.principal == "User:ANONYMOUS"


async def test_ssl_listener_principal_is_the_certificate_subject(catalog):
    handler = ListenerHandler(Dispatcher(build_registry(catalog), NODE), listener="SSL")
    conn = Conn()
    conn.peer_cert = {"subject": ((("organizationName", "Acme"),), (("commonName", "svc-a"),))}
    await send(handler, conn, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert conn.principal == "User:CN=svc-a,O=Acme"


async def test_frames_are_held_to_the_pre_authentication_limit_until_authenticated(handler):
    """Kafka's sasl.server.max.receive.size: an unauthenticated client cannot make the listener
    buffer socket.request.max.bytes; once authenticated the full limit applies (loopback socket)."""
    from kshare_sidecar.wire.server import Listener

    listener = Listener(handler, "127.0.0.1", 0, max_frame_bytes=1 << 20, initial_max_frame_bytes=4096,
                        name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT")
    await listener.start()
    try:
        big = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        padded = request_frame(big) + b"\0" * 8000  # trailing bytes are tolerated, the size is what counts

        async def exchange(writer, reader, payload):
            writer.write(len(payload).to_bytes(4, "big") + payload)
            size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5), "big")
            return await reader.readexactly(size)

        handshake = request_frame(SaslHandshakeRequest(mechanism="PLAIN"))
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        await exchange(writer, reader, handshake + b"\0" * 3000)  # within the limit: answered
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        oversized = handshake + b"\0" * 8000
        writer.write(len(oversized).to_bytes(4, "big") + oversized)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
        writer.close()

        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        await exchange(writer, reader, request_frame(SaslHandshakeRequest(mechanism="PLAIN")))
        await exchange(writer, reader, request_frame(plain("alice", "alice-pw")))
        answer = await exchange(writer, reader, padded)
        _, body = codec.decode_response(answer, _response_class(big))
        assert body.brokers[0].port == NODE.port
        writer.close()
    finally:
        await listener.stop()


# -- KIP-368 re-authentication (connections.max.reauth.ms) ------------------------------------------
async def _authenticated(handler, user="alice", password="alice-pw"):
    conn = Conn()
    await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))
    first = await send(handler, conn, plain(user, password))
    return conn, first


async def test_reauthentication_renews_the_session(handler):
    handler.reauth_ms = 300
    conn, first = await _authenticated(handler)
    assert first.session_lifetime == datetime.timedelta(milliseconds=300)
    await asyncio.sleep(0.35)  # past the first session: only the re-authentication is let through
    assert (await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))).error_code == ErrorCode.none
    again = await send(handler, conn, plain("alice", "alice-pw"))
    assert again.error_code == ErrorCode.none and again.session_lifetime == datetime.timedelta(milliseconds=300)
    body = await send(handler, conn, MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                     include_topic_authorized_operations=False))
    assert body.brokers  # the renewed session serves requests
    # at most one re-authentication a second: a handshake right after goes to the API layer
    assert (await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))).error_code == \
        ErrorCode.illegal_sasl_state


async def test_an_expired_session_closes_the_connection(handler):
    handler.reauth_ms = 100
    conn, _ = await _authenticated(handler)
    await asyncio.sleep(0.15)
    with pytest.raises(CloseAfterResponse, match="expired"):
        await send(handler, conn, MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                  include_topic_authorized_operations=False))


async def test_reauthentication_keeps_principal_and_mechanism(handler):
    handler.reauth_ms = 60000
    conn, _ = await _authenticated(handler)
    conn_b, _ = await _authenticated(handler)
    handler.authenticator.verify_plain = _also_bob(handler.authenticator.verify_plain)
    await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))
    with pytest.raises(CloseAfterResponse) as exc:
        await send(handler, conn, plain("bob", "bob-pw"))
    _, body = codec.decode_response(exc.value.response[4:], SaslAuthenticateResponse)
    assert body.error_message == "Cannot change principals during re-authentication from User.alice: User.bob"
    await send(handler, conn_b, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    with pytest.raises(CloseAfterResponse) as exc:
        await send(handler, conn_b, SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=abc"))
    _, body = codec.decode_response(exc.value.response[4:], SaslAuthenticateResponse)
    assert body.error_message == ("SASL mechanism 'SCRAM-SHA-512' requested by client is not supported for "
                                  "re-authentication of mechanism 'PLAIN'")


async def test_without_reauth_a_second_handshake_is_illegal_state_and_sessions_never_end(handler):
    conn, first = await _authenticated(handler)
    assert first.session_lifetime == datetime.timedelta(0)
    assert (await send(handler, conn, SaslHandshakeRequest(mechanism="PLAIN"))).error_code == \
        ErrorCode.illegal_sasl_state


def _also_bob(verify):
    async def wrapped(username, password):
        return (username, password) == ("bob", "bob-pw") or await verify(username, password)
    return wrapped


# -- hostile input before authentication: nothing but answers or a closed connection ------------------

_TOKENS = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"n,,n=alice,r=abc", b"n,a=,n=,r=", b"c=biws,r=abc,p=xyz=", b"c=,r=,p=", b"\0alice\0",
                     b"\0\0\0", b"n,,n=alice,r=abc,ext", b"c=biws,r=abc,p=" + b"A" * 88]),
    st.text(max_size=40).map(str.encode),
)
_FRAMES = st.one_of(
    st.binary(max_size=48),
    _TOKENS.map(lambda t: request_frame(SaslAuthenticateRequest(auth_bytes=t))),
    _TOKENS.map(lambda t: request_frame(AuthV0(auth_bytes=t))),
    st.sampled_from(["PLAIN", "SCRAM-SHA-512", "GSSAPI", ""]).map(
        lambda m: request_frame(SaslHandshakeRequest(mechanism=m))),
    st.sampled_from(["PLAIN", "SCRAM-SHA-512"]).map(lambda m: request_frame(HandshakeV0(mechanism=m))),
    st.just(request_frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"))),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(_FRAMES, min_size=1, max_size=6))
def test_any_frame_sequence_is_answered_or_closes(handler, frames):
    async def run():
        conn = Conn()
        for frame in frames:
            try:
                out = await handler(conn, frame, lambda: None)
            except CloseConnection:
                return
            assert out is None or int.from_bytes(out[:4], "big") == len(out) - 4

    asyncio.run(run())


async def test_plain_credentials_stay_on_the_connection_only_when_asked(handler):
    """passthrough.credentials = client: a PLAIN client's user and password go with its connection
    (pass-through authenticates to the backend as it); otherwise nothing is kept."""
    conn, _ = await _authenticated(handler)
    assert getattr(conn, "backend_credentials", None) is None
    handler.keep_plain_credentials = True
    conn, _ = await _authenticated(handler)
    assert conn.backend_credentials == ("alice", "alice-pw")


class _BackendRelay:
    """A relayed SCRAM exchange whose far end is a ScramServer holding alice's keys (the backend)."""

    def __init__(self, users: Users, mechanism: str, down: bool) -> None:
        from kshare_sidecar.auth.scram import ScramServer

        self.server, self.users, self.down = ScramServer(mechanism), users, down
        self.username = None
        self.closed = False

    async def step(self, token):
        from kshare_sidecar.auth.authenticators import CredentialsUnavailable, RelayRefused
        from kshare_sidecar.auth.scram import ScramInvalid

        if self.down:
            raise CredentialsUnavailable("no backend broker could check the credentials: refused")
        generic = "Authentication failed during authentication due to invalid credentials with SASL mechanism " \
                  "SCRAM-SHA-512 (the backend's)"
        try:
            if self.username is None:
                self.username = self.server.client_first(token)
                return self.server.server_first(self.users.cred), False
            return self.server.client_final(token), True
        except ScramInvalid as exc:
            raise RelayRefused(generic, f"the backend refused: {exc}") from None

    def close(self):
        self.closed = True


@pytest.mark.parametrize("password,down,outcome", [
    ("alice-pw", False, None),
    ("not-alices", False, "Authentication failed during authentication due to invalid credentials with SASL "
                          "mechanism SCRAM-SHA-512 (the backend's)"),
    ("alice-pw", True, "Authentication failed: credentials for user could not be verified"),
])
async def test_a_relayed_scram_exchange_takes_the_far_ends_verdict(handler, caplog, password, down, outcome):
    """An authenticator with ``scram_relay`` (delegate): the exchange is answered by the relay, not
    from stored keys; its refusal message is the client's; "could not check" is Kafka's message."""
    users = Users()
    users.scram_relay = lambda mechanism: _BackendRelay(users, mechanism, down)  # type: ignore[attr-defined]
    handler.authenticator = users
    conn = Conn()
    try:
        final, client = await _scram_exchange(handler, conn, password)
    except CloseAfterResponse as exc:
        _, body = codec.decode_response(exc.response[4:], SaslAuthenticateResponse)
        assert body.error_code == ErrorCode.sasl_authentication_failed and body.error_message == outcome
        assert conn.principal == "User:ANONYMOUS" and password not in caplog.text
        return
    assert outcome is None and final.error_code == ErrorCode.none
    assert await client.step(final.auth_bytes) is None  # the far end's signature checks out at the client
    assert conn.principal == "User:alice"


async def test_the_relay_checks_kafkas_grammar_and_sees_tokenauth():
    from kshare_sidecar.auth.authenticators import RelayRefused
    from kshare_sidecar.auth.delegate import ScramRelay, _token_auth

    with pytest.raises(RelayRefused, match="invalid credentials"):  # before any backend connection
        await ScramRelay(None, "SCRAM-SHA-512").step(b"y,,n=alice,r=abc")  # type: ignore[arg-type]
    assert _token_auth(b"n,,n=tokenid,r=abcdef,tokenauth=true")
    assert _token_auth(b"n,,n=tokenid,r=abcdef,tokenauth=TRUE")  # Java's Boolean.parseBoolean
    assert not _token_auth(b"n,,n=alice,r=abcdef")
    assert not _token_auth(b"n,,n=alice,r=abcdef,tokenauth=false")


async def test_a_relayed_token_authentication_takes_the_owner_and_the_tokens_lifetime(handler):
    """The relay names the backend's principal (a delegation token's owner) and the session the
    backend granted (the token's remaining life): the client's principal and SessionLifetimeMs."""
    users = Users()

    def relay(mechanism):
        far = _BackendRelay(users, mechanism, False)
        far.principal, far.lifetime_ms = "User:carol", 1500
        return far

    users.scram_relay = relay  # type: ignore[attr-defined]
    handler.authenticator = users
    conn = Conn()
    final, _ = await _scram_exchange(handler, conn)
    assert final.error_code == ErrorCode.none and final.session_lifetime == datetime.timedelta(milliseconds=1500)
    assert conn.principal == "User:carol"
