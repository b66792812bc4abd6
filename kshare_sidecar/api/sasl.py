"""SaslHandshake (17) and SaslAuthenticate (36), and Kafka's gate in front of a SASL listener.

Kafka authenticates a SASL connection before any request reaches its request handlers
(``SaslServerAuthenticator``); so does :class:`ListenerHandler`, the frame handler of one
listener, in front of its :class:`~.registry.Dispatcher`:

- before authentication only ApiVersions (once, first) and SaslHandshake are served; any other
  request closes the connection ("Unexpected Kafka request of type ... during SASL handshake");
- SaslHandshake v1 → SaslAuthenticate requests carry the mechanism's tokens; v0 → the next frames
  are raw tokens (no Kafka header), answered with raw tokens;
- an unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then close;
- wrong credentials: SASL_AUTHENTICATION_FAILED with Kafka's message, then close, and one
  rate-limited WARNING here (never the password; the user name only at debug level);
- after authentication, SaslHandshake / SaslAuthenticate are answered ILLEGAL_SASL_STATE as
  KafkaApis does (also on PLAINTEXT and SSL listeners) — unless ``connections.max.reauth.ms`` is
  set (KIP-368): then SessionLifetimeMs tells the client how long its session lasts, a
  SaslHandshake on the authenticated connection starts a re-authentication (same mechanism, same
  principal, at most one a second), and a request arriving after the session ended closes the
  connection. With the default 0, SessionLifetimeMs is 0 and sessions never end.

The principal (``User:alice``; ``User:<subject DN>`` for an SSL client certificate, else
``User:ANONYMOUS``) is set on the connection and reaches handlers as ``ctx.principal``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import weakref
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.constants import ApiKey
from ..auth import ANONYMOUS
from ..auth.authenticators import Authenticator, CredentialsUnavailable, RelayRefused
from ..auth.plain import PlainInvalid, parse_plain
from ..auth.principal import tls_principal
from ..auth.scram import HASHES, ScramInvalid, ScramRefused, ScramServer
from ..metrics import STATS
from ..ratelog import RateLimitedLog
from ..wire import codec
from ..wire.errors import CloseAfterResponse, CloseConnection, MalformedFrame
from ..wire.framing import FramePieces
from ..wire.framing import frame as framed
from .context import ConnectionHandle
from .convert import convert
from .registry import ApiRegistry, Dispatcher, generic_error_response

log = logging.getLogger("kshare.auth")
failures = RateLimitedLog(log)

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.API_VERSIONS
HANDSHAKE_VERSIONS, AUTHENTICATE_VERSIONS = (0, 1), (0, 2)


class _State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = 1  # nothing yet: ApiVersions or SaslHandshake
    HANDSHAKE = 2  # ApiVersions answered: SaslHandshake
    AUTHENTICATE = 3  # SaslAuthenticate requests (handshake v1)
    AUTHENTICATE_RAW = 4  # raw tokens (handshake v0)
    COMPLETE = 5


class AuthFailed(Exception):
    """``message`` goes to the client; ``reason`` (never a secret) to the sidecar's log."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message, self.reason = message, reason


class Exchange:
    """One mechanism's server side over an authenticator (sans-I/O but for the authenticator's
    awaits): ``await step(token)`` → ``(reply token, done)``; raises :class:`AuthFailed`."""

    def __init__(self, mechanism: str, authenticator: Authenticator) -> None:
        self.mechanism = mechanism
        self.authenticator = authenticator
        self.username: str | None = None
        #: PLAIN only, after success: the client's password, kept for passthrough.credentials =
        #: client (never logged, dropped with the exchange unless the listener keeps it)
        self.password: str | None = None
        #: a relayed exchange's own answer: the backend's principal (a delegation token's owner)
        #: and the session lifetime it granted (bounded by the token's expiry)
        self.principal: str | None = None
        self.lifetime_ms = 0
        relay = getattr(authenticator, "scram_relay", None) if mechanism in HASHES else None
        #: the whole exchange elsewhere (the delegate authenticator: the backend checks the proof)
        self._relay = relay(mechanism) if relay is not None else None
        self._scram = ScramServer(mechanism) if mechanism in HASHES and self._relay is None else None
        self._generic = (f"Authentication failed during authentication due to invalid credentials with SASL "
                         f"mechanism {mechanism}")

    async def step(self, token: bytes) -> tuple[bytes, bool]:
        if self._relay is not None:
            return await self._relayed(token)
        if self._scram is None:
            return await self._plain(token), True
        scram = self._scram
        try:
            if scram.username is None:
                username = scram.client_first(token)
                self.username = username
                try:
                    credential = await self.authenticator.scram_credential(self.mechanism, username)
                except Exception as exc:  # Kafka: "Credentials could not be obtained", a SaslException
                    raise AuthFailed(self._generic, f"credentials could not be obtained: {exc}") from None
                if credential is None:
                    raise AuthFailed(self._generic, "unknown user")
                return scram.server_first(credential), False
            return scram.client_final(token), True
        except ScramRefused as exc:
            raise AuthFailed(str(exc), str(exc)) from None
        except ScramInvalid as exc:
            raise AuthFailed(self._generic, str(exc)) from None

    async def _relayed(self, token: bytes) -> tuple[bytes, bool]:
        relay = self._relay
        assert relay is not None
        try:
            reply, done = await relay.step(token)
        except RelayRefused as exc:
            raise AuthFailed(exc.message, exc.reason) from None
        except Exception as exc:  # CredentialsUnavailable, or a broken plugin: not a wrong password
            relay.close()
            reason = str(exc) if isinstance(exc, CredentialsUnavailable) else f"authenticator failed: {exc!r}"
            raise AuthFailed("Authentication failed: credentials for user could not be verified", reason) from None
        finally:
            self.username = relay.username
        if done:
            self.principal = getattr(relay, "principal", None)
            self.lifetime_ms = int(getattr(relay, "lifetime_ms", 0) or 0)
        return reply, done

    async def _plain(self, token: bytes) -> bytes:
        try:
            authzid, username, password = parse_plain(token)
        except PlainInvalid as exc:
            raise AuthFailed(self._generic, str(exc)) from None
        self.username = username
        try:
            ok = await self.authenticator.verify_plain(username, password)
        except Exception as exc:  # CredentialsUnavailable, or a broken plugin: not a wrong password
            reason = str(exc) if isinstance(exc, CredentialsUnavailable) else f"authenticator failed: {exc!r}"
            raise AuthFailed("Authentication failed: credentials for user could not be verified", reason) from None
        if not ok:
            raise AuthFailed("Authentication failed: Invalid username or password", "invalid username or password")
        if authzid and authzid != username:
            message = "Authentication failed: Client requested an authorization id that is different from username"
            raise AuthFailed(message, message)
        self.password = password
        return b""


class _Session:
    __slots__ = ("bad_mechanism", "exchange", "expires_at", "lifetime_ms", "mechanism", "principal",
                 "reauth_started", "reauthenticating", "state")

    def __init__(self) -> None:
        self.state = _State.HANDSHAKE_OR_VERSIONS
        self.exchange: Exchange | None = None
        # KIP-368 (connections.max.reauth.ms > 0): when the session ends, what it was made with
        self.expires_at: float | None = None
        self.lifetime_ms = 0
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.reauth_started = float("-inf")
        self.reauthenticating = False
        self.bad_mechanism: str | None = None  # Kafka's REAUTH_BAD_MECHANISM: fails the next token


class ListenerHandler:
    """The frame handler of one listener (see module docstring). ``sasl`` is false for PLAINTEXT
    and SSL listeners: then only the principal is set (mTLS) and frames go to the dispatcher."""

    def __init__(self, dispatcher: Dispatcher, *, listener: str = "PLAINTEXT",
                 mechanisms: tuple[str, ...] = (), authenticator: Authenticator | None = None,
                 sasl: bool = False, failure_delay_s: float = 0.0, reauth_ms: int = 0,
                 keep_plain_credentials: bool = False) -> None:
        if sasl and (not mechanisms or authenticator is None):
            raise ValueError("a SASL listener needs mechanisms and an authenticator")
        self.dispatcher = dispatcher
        self.listener = listener
        self.mechanisms = mechanisms
        self.authenticator = authenticator
        self.sasl = sasl
        #: Kafka's connection.failed.authentication.delay.ms: the failure answer and the close wait
        #: this long, so a client cannot try passwords as fast as the network allows.
        self.failure_delay_s = failure_delay_s
        #: Kafka's connections.max.reauth.ms (KIP-368): > 0 gives authenticated sessions this
        #: lifetime (SessionLifetimeMs); clients re-authenticate on the connection before it ends,
        #: and a request on an expired session closes the connection. 0: sessions never end.
        self.reauth_ms = reauth_ms
        #: passthrough.credentials = client: a PLAIN client's user and password stay on its
        #: connection (``conn.backend_credentials``) so pass-through authenticates to the backend as it
        self.keep_plain_credentials = keep_plain_credentials
        self._sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()

    async def __call__(self, conn: ConnectionHandle, frame: bytes, release: Callable[[], None]) -> bytes | bytearray | FramePieces | None:
        session = self._sessions.get(conn)
        if session is None:
            session = self._sessions[conn] = _Session()
            if not self.sasl:
                session.state = _State.COMPLETE
                principal = tls_principal(getattr(conn, "peer_cert", None))
                _set_principal(conn, principal)
                if principal != ANONYMOUS:
                    log.debug("conn %d from %s: principal %s (TLS client certificate) on listener %s", conn.conn_id,
                              f"{conn.peer_host}:{conn.peer_port}", principal, self.listener)
        if session.state is _State.COMPLETE:
            if session.expires_at is not None:
                peeked = codec.peek(frame)
                now = asyncio.get_running_loop().time()
                # Kafka: at most one re-authentication a second; otherwise the handshake goes to
                # the API layer (ILLEGAL_SASL_STATE)
                if peeked.api_key == SASL_HANDSHAKE and now - session.reauth_started >= 1.0:
                    session.reauth_started = now
                    return self._handshake(session, frame, reauth=True)
                if now > session.expires_at:
                    log.debug("conn %d from %s: SASL session expired (connections.max.reauth.ms), closing",
                              conn.conn_id, f"{conn.peer_host}:{conn.peer_port}")
                    raise CloseAfterResponse("SASL session expired without re-authentication", None)
            return await self.dispatcher(conn, frame, release)
        if session.state is _State.AUTHENTICATE_RAW:
            token, _ = await self._authenticate(conn, session, frame, None)
            return framed(token)
        peeked = codec.peek(frame)
        if session.state is _State.AUTHENTICATE:
            if peeked.api_key != SASL_AUTHENTICATE:
                raise self._illegal_state(conn, frame, peeked)
            return await self._sasl_authenticate(conn, session, frame)
        if peeked.api_key == API_VERSIONS:
            if session.state is not _State.HANDSHAKE_OR_VERSIONS:
                raise CloseConnection("Unexpected ApiVersions request received during SASL authentication")
            answer = await self.dispatcher(conn, frame, release)
            entry = self.dispatcher.registry.get(API_VERSIONS)
            if entry is not None and entry.serves(peeked.api_version):  # else: the v0 downgrade answer
                session.state = _State.HANDSHAKE
            return answer
        if peeked.api_key == SASL_HANDSHAKE:
            return self._handshake(session, frame)
        raise CloseConnection(f"Unexpected Kafka request of type {_api_name(peeked.api_key)} during SASL handshake")

    def _illegal_state(self, conn: ConnectionHandle, frame: bytes, peeked: codec.RequestPeek) -> CloseConnection:
        """Another request where SaslAuthenticate was due: Kafka answers it ILLEGAL_SASL_STATE in
        that API's error form (where it has one), then closes."""
        reason = f"Unexpected Kafka request of type {_api_name(peeked.api_key)} during SASL authentication."
        failures.log("sasl-state", logging.WARNING, "conn %d from %s: closing: %s", conn.conn_id,
                     f"{conn.peer_host}:{conn.peer_port}", reason)
        try:
            decoded = codec.decode_request(frame)
            response = generic_error_response(decoded.response_class, ErrorCode.illegal_sasl_state, reason)
        except CloseConnection:
            response = None
        if response is None:
            return CloseAfterResponse(reason, None)
        return CloseAfterResponse(reason, codec.encode_response(response, decoded.correlation_id))

    # -- SaslHandshake ----------------------------------------------------------------------------
    def _handshake(self, session: _Session, frame: bytes, *, reauth: bool = False) -> bytes:
        decoded = _decode(frame, SASL_HANDSHAKE, HANDSHAKE_VERSIONS)
        mechanism = decoded.body.mechanism
        if mechanism not in self.mechanisms:
            response = convert({"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": self.mechanisms},
                               decoded.response_class)
            raise CloseAfterResponse(f"Unsupported SASL mechanism {mechanism}",
                                     codec.encode_response(response, decoded.correlation_id))
        assert self.authenticator is not None
        session.exchange = Exchange(mechanism, self.authenticator)
        session.state = _State.AUTHENTICATE if decoded.api_version >= 1 else _State.AUTHENTICATE_RAW
        session.reauthenticating = reauth
        session.bad_mechanism = None
        if reauth and mechanism != session.mechanism:
            session.bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                     f"re-authentication of mechanism '{session.mechanism}'")
        response = convert({"error_code": ErrorCode.none, "mechanisms": self.mechanisms}, decoded.response_class)
        return codec.encode_response(response, decoded.correlation_id)

    # -- SaslAuthenticate -------------------------------------------------------------------------
    async def _sasl_authenticate(self, conn: ConnectionHandle, session: _Session, frame: bytes) -> bytes:
        decoded = _decode(frame, SASL_AUTHENTICATE, AUTHENTICATE_VERSIONS)

        def answer(code: ErrorCode, message: str | None, token: bytes, lifetime_ms: int = 0) -> bytes:
            body = convert({"error_code": code, "error_message": message, "auth_bytes": token,
                            "session_lifetime": lifetime_ms}, decoded.response_class)
            return codec.encode_response(body, decoded.correlation_id)

        token, done = await self._authenticate(conn, session, bytes(decoded.body.auth_bytes), answer)
        return answer(ErrorCode.none, None, token, session.lifetime_ms if done else 0)

    async def _authenticate(self, conn: ConnectionHandle, session: _Session, token: bytes,
                            answer: Callable[[ErrorCode, str | None, bytes], bytes] | None) -> tuple[bytes, bool]:
        exchange = session.exchange
        assert exchange is not None
        try:
            if session.bad_mechanism:
                raise AuthFailed(session.bad_mechanism, session.bad_mechanism)
            reply, done = await exchange.step(token)
            principal = exchange.principal or f"User:{exchange.username}"
            if done and session.reauthenticating and principal != session.principal:
                before, after = (session.principal or "").replace(":", ".", 1), principal.replace(":", ".", 1)
                message = f"Cannot change principals during re-authentication from {before}: {after}"
                raise AuthFailed(message, message)
        except AuthFailed as exc:
            _count(STATS.authentication_failures, self.listener)
            peer = f"{conn.peer_host}:{conn.peer_port}"
            failures.log("sasl-failed", logging.WARNING, "conn %d from %s: failed authentication on listener %s "
                         "with SASL mechanism %s: %s", conn.conn_id, peer, self.listener, exchange.mechanism,
                         exc.reason)
            log.debug("conn %d from %s: failed authentication as user %r", conn.conn_id, peer, exchange.username)
            response = answer(ErrorCode.sasl_authentication_failed, exc.message, b"") if answer else None
            if self.failure_delay_s > 0:
                await asyncio.sleep(self.failure_delay_s)
            raise CloseAfterResponse(f"SASL authentication failed: {exc.message}", response) from None
        if done:
            _count(STATS.authentications, self.listener)
            _set_principal(conn, principal)
            if self.keep_plain_credentials:
                keep = (exchange.username, exchange.password) if exchange.password is not None else None
                try:
                    conn.backend_credentials = keep  # type: ignore[attr-defined]
                except AttributeError:
                    pass
            lift = getattr(conn, "lift_frame_limit", None)
            if lift is not None:  # sasl.server.max.receive.size applied until now
                lift()
            session.state, session.exchange = _State.COMPLETE, None
            session.mechanism, session.principal = exchange.mechanism, principal
            # connections.max.reauth.ms, or sooner a relayed delegation token's expiry (as Kafka)
            lifetime = min(x for x in (self.reauth_ms, exchange.lifetime_ms, 2**62) if x > 0)
            session.lifetime_ms = 0 if lifetime == 2**62 else lifetime
            if session.lifetime_ms > 0:
                session.expires_at = asyncio.get_running_loop().time() + session.lifetime_ms / 1000
            log.debug("conn %d from %s: %s as %s with %s on listener %s", conn.conn_id,
                      f"{conn.peer_host}:{conn.peer_port}",
                      "re-authenticated" if session.reauthenticating else "authenticated", principal,
                      exchange.mechanism, self.listener)
            session.reauthenticating = False
        return reply, done


def _count(counts: dict[str, int], listener: str) -> None:
    counts[listener] = counts.get(listener, 0) + 1


def _set_principal(conn: Any, principal: str) -> None:
    try:
        conn.principal = principal
    except AttributeError:  # a connection object without the attribute (tests)
        pass


def _decode(frame: bytes, api_key: int, versions: tuple[int, int]) -> codec.DecodedRequest:
    peeked = codec.peek(frame)
    if not versions[0] <= peeked.api_version <= versions[1]:
        raise CloseConnection(f"api key {api_key} version {peeked.api_version} is not served")
    decoded = codec.decode_request(frame)
    if decoded.null_fields:
        raise MalformedFrame(f"api key {api_key}: null in non-nullable {', '.join(decoded.null_fields)}")
    return decoded


def _api_name(api_key: int) -> str:
    try:
        return codec.request_class(api_key, 0).__name__.removesuffix("Request")
    except Exception:
        return str(api_key)


# -- the entries in the registry (after authentication, and on non-SASL listeners) -------------
async def _handshake_after_auth(ctx: Any, header: Any, request: Any) -> Any:
    return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()}


async def _authenticate_after_auth(ctx: Any, header: Any, request: Any) -> Any:
    return {"error_code": ErrorCode.illegal_sasl_state,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"", "session_lifetime": 0}


def register(registry: ApiRegistry) -> None:
    """Advertise 17 and 36 (Kafka does on every listener); what reaches the registry is answered
    ILLEGAL_SASL_STATE, as KafkaApis answers — the exchange itself happens in ListenerHandler."""
    registry.register(SASL_HANDSHAKE, *HANDSHAKE_VERSIONS, _handshake_after_auth)
    registry.register(SASL_AUTHENTICATE, *AUTHENTICATE_VERSIONS, _authenticate_after_auth)


__all__ = ["ANONYMOUS", "AuthFailed", "Exchange", "ListenerHandler", "register"]
