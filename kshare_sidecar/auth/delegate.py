"""The ``delegate`` authenticator: the backend checks a client's credentials (PLAIN and SCRAM).

The sidecar keeps no user database.

- **PLAIN**: it opens a connection to a backend broker and authenticates *as the client* (the
  backend's SASL mechanism from ``backend.sasl.mechanism`` — PLAIN or SCRAM — with the client's
  user name and password, over ``backend.security.protocol`` and its TLS settings). Run such a
  listener as SASL_SSL: the password travels to the sidecar in the clear.
- **SCRAM-SHA-256/512**: the sidecar never sees the password, but Kafka's SCRAM has no channel
  binding (gs2 header ``n``, RFC 5802), so the exchange can be *relayed*: the client's first
  message goes to a backend broker (a fresh connection, the backend's TLS settings, SaslHandshake
  with the client's own mechanism), the broker's server-first (salt, iterations, the combined
  nonce) back to the client, the client's proof to the broker, and the broker's server-final
  (its signature, which the client checks) back to the client. The broker verifies the proof
  against its own stored keys: same user, same mechanism, no copy of the keys here. The messages
  pass through unchanged, so the nonces and the auth message both ends compute agree.

Either way the backend's SASL_AUTHENTICATION_FAILED (with its message) is the client's; a backend
that cannot be reached means "could not verify". Each authentication costs one backend connection,
closed when it ends (no cache: a password changed at the backend applies to the next connection).
Those connections are made by the one ``BackendClients`` (``broker_as``): never with the
sidecar's own credentials, only with the backend's TLS settings and the client's.

A client authenticating with a delegation token (Kafka's ``tokenauth=true`` extension: user name
= token id, password = HMAC) is relayed the same way; the backend's principal for it is the
token's *owner*, which the exchange does not show. The relay asks the backend on the same,
now token-authenticated connection: a CreateDelegationToken there is always refused
(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED — KafkaApis refuses token requests from token-authenticated
principals before anything else), and Kafka's refusal names the request's principal as the
would-be owner. That principal becomes the client's, and the session the backend granted (it
ends at the token's expiry) bounds the client's session with the sidecar, as a broker's would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.create_delegation_token.v2.request import CreateDelegationTokenRequest
from kio.schema.create_delegation_token.v2.response import CreateDelegationTokenResponse
from kio.schema.errors import ErrorCode
from kio.serial.readers import read_compact_string
from kio.static.primitive import i64Timedelta

from ..config import ConfigError
from ..backend.brokerconn import BrokerAuthError, BrokerConn, BrokerConnError
from ..backend.errors import SaslError
from ..backend.sasl import sasl_handshake, sasl_token
from ..protocol.constants import SCRAM_MECHANISMS
from ..protocol.requests import leading_error_code, request_payload
from .authenticators import CredentialsUnavailable, RelayRefused
from .scram import HASHES, ScramCredential, ScramInvalid, ScramRefused, ScramServer

if TYPE_CHECKING:
    from ..backend.clients import BackendClients

log = logging.getLogger("kshare.auth")

#: a relayed exchange whose client does not send its proof within this is dropped
RELAY_TIMEOUT_S = 30.0


class DelegateAuthenticator:
    mechanisms = frozenset({"PLAIN", *HASHES})

    def __init__(self, clients: BackendClients, *, timeout_s: float = 10.0) -> None:
        security = clients.security
        if not security.sasl:
            raise ConfigError(f"sasl.authenticator = 'delegate' needs a SASL backend: backend.security.protocol is "
                              f"{security.protocol}, allowed values SASL_PLAINTEXT, SASL_SSL")
        mechanism = security.mechanism if security.mechanism in ("PLAIN", *SCRAM_MECHANISMS) else "PLAIN"
        self._template = dataclasses.replace(security, mechanism=mechanism, username=None, password=None,
                                             token_file=None, token_provider=None)
        #: the relay's connections: the backend's TLS settings, no SASL of their own
        self._transport = dataclasses.replace(self._template, protocol="SSL" if security.tls else "PLAINTEXT",
                                              mechanism=None)
        self._clients = clients
        self._servers = clients.bootstrap
        self._timeout = timeout_s

    def __repr__(self) -> str:
        return f"DelegateAuthenticator({self._template.protocol} {self._template.mechanism})"

    async def start(self, mechanisms: tuple[str, ...]) -> None:
        """The backend must offer every SCRAM mechanism the listeners relay: one SaslHandshake per
        mechanism on a fresh connection (ConfigError naming what it offers). A backend that cannot
        be reached is left to the rest of start-up to report."""
        for mechanism in (m for m in mechanisms if m in HASHES):
            conn = await self._connect()
            try:
                await sasl_handshake(conn, mechanism)
            except SaslError as exc:
                raise ConfigError(f"sasl.enabled.mechanisms names {mechanism}, which sasl.authenticator = "
                                  f"'delegate' relays to the backend, but {exc}") from None
            except (BrokerConnError, TimeoutError):
                return
            finally:
                await conn.close()

    async def _connect(self) -> BrokerConn:
        """A connected (TLS if the backend's) connection to the first broker that answers."""
        problems = []
        for host, port in self._servers:
            conn = self._clients.broker_as(self._transport, host, port, connect_timeout_s=self._timeout)
            try:
                await conn.connect()
                return conn
            except BrokerConnError as exc:
                problems.append(str(exc))
                await conn.close()
        raise CredentialsUnavailable("no backend broker could check the credentials: " + "; ".join(problems))

    async def verify_plain(self, username: str, password: str) -> bool:
        security = dataclasses.replace(self._template, username=username, password=password)
        problems = []
        for host, port in self._servers:
            conn = self._clients.broker_as(security, host, port, connect_timeout_s=self._timeout)
            try:
                await conn.connect()
                return True
            except BrokerAuthError:
                return False
            except BrokerConnError as exc:
                problems.append(str(exc))
            finally:
                await conn.close()
        raise CredentialsUnavailable("no backend broker could check the credentials: " + "; ".join(problems))

    async def scram_credential(self, mechanism: str, username: str) -> ScramCredential | None:
        return None  # SCRAM is relayed (scram_relay), never answered from stored keys here

    def scram_relay(self, mechanism: str) -> ScramRelay:
        return ScramRelay(self, mechanism)

    async def close(self) -> None:
        return None


class ScramRelay:
    """One client's SCRAM exchange relayed to a backend broker (see module docstring):
    ``await step(token)`` → ``(reply, done)``; raises :class:`RelayRefused` (the backend's
    refusal, its message for the client) or :class:`CredentialsUnavailable`."""

    def __init__(self, owner: DelegateAuthenticator, mechanism: str) -> None:
        self._owner = owner
        self.mechanism = mechanism
        self.username: str | None = None
        #: set on success when the backend's principal is not ``User:<username>`` (a token's owner)
        self.principal: str | None = None
        #: the session the backend granted a token-authenticated client (ms; 0: not bounded)
        self.lifetime_ms = 0
        self.token_auth = False
        self._conn: BrokerConn | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._generic = (f"Authentication failed during authentication due to invalid credentials with SASL "
                         f"mechanism {mechanism}")

    async def step(self, token: bytes) -> tuple[bytes, bool]:
        if self.username is None:
            return await self._first(token), False
        return await self._relay(token), True

    async def _first(self, token: bytes) -> bytes:
        parser = ScramServer(self.mechanism)  # Kafka's grammar: malformed messages stop here
        try:
            self.username = parser.client_first(token)
        except ScramRefused as exc:
            raise RelayRefused(str(exc), str(exc)) from None
        except ScramInvalid as exc:
            raise RelayRefused(self._generic, str(exc)) from None
        self.token_auth = _token_auth(token)
        self._conn = await self._owner._connect()
        self._timer = asyncio.get_running_loop().call_later(RELAY_TIMEOUT_S, self.close)
        try:
            await sasl_handshake(self._conn, self.mechanism)
        except SaslError as exc:
            self.close()
            raise CredentialsUnavailable(f"the backend cannot check {self.mechanism}: {exc}") from None
        except (BrokerConnError, TimeoutError) as exc:
            self.close()
            raise CredentialsUnavailable(f"the backend broker went away: {exc}") from None
        return await self._relay(token, last=False)

    async def _relay(self, token: bytes, *, last: bool = True) -> bytes:
        conn = self._conn
        if conn is None:
            raise CredentialsUnavailable("the backend connection of this exchange is gone")
        try:
            answer = await asyncio.wait_for(sasl_token(conn, token), self._owner._timeout)
        except (BrokerConnError, TimeoutError) as exc:
            self.close()
            raise CredentialsUnavailable(f"the backend broker went away during the exchange: {exc}") from None
        if answer.error_code != ErrorCode.none:
            self.close()
            message = answer.error_message or self._generic
            raise RelayRefused(message, f"the backend refused: {ErrorCode(answer.error_code).name.upper()}: {message}")
        if last:
            try:
                if self.token_auth:
                    self.lifetime_ms = int(answer.session_lifetime.total_seconds() * 1000)
                    self.principal = await self._token_owner(conn)
            finally:
                self.close()
        return bytes(answer.auth_bytes)

    async def _token_owner(self, conn: BrokerConn) -> str:
        """The principal of a token-authenticated connection: the owner Kafka names in its refusal
        of a CreateDelegationToken on it (see module docstring)."""
        request = CreateDelegationTokenRequest(  # v2: Kafka 2.4 up to 4.x; its answer names the owner
            renewers=(), max_lifetime=i64Timedelta.parse(datetime.timedelta(milliseconds=-1)))
        try:
            payload = await conn.request(request_payload(request, 0, "kshare"), timeout_s=self._owner._timeout)
        except (BrokerConnError, TimeoutError) as exc:
            raise CredentialsUnavailable(f"the backend broker went away asking for the token's owner: {exc}") from None
        code, offset = leading_error_code(payload, CreateDelegationTokenResponse)
        if code != ErrorCode.delegation_token_request_not_allowed:  # never for a token-authenticated connection
            raise CredentialsUnavailable(f"the token's owner is unknown: CreateDelegationToken answered "
                                         f"{ErrorCode(code).name.upper()} on a token-authenticated connection")
        kind, size = read_compact_string(payload, offset)  # kio's readers return (value, size read)
        name, _ = read_compact_string(payload, offset + size)
        return f"{kind}:{name}"

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if conn is not None:
            conn.drop("relayed SCRAM exchange over")


def _token_auth(client_first: bytes) -> bool:
    """Kafka's ScramExtensions: ``tokenauth`` parsed as a Java boolean (``true``, any case)."""
    bare = client_first.decode("utf-8", "replace").split(",")[2:]
    return any(a.partition("=")[0] == "tokenauth" and a.partition("=")[2].lower() == "true" for a in bare)


def delegate_authenticator(*, backend_clients: BackendClients, **_: Any) -> DelegateAuthenticator:
    return DelegateAuthenticator(backend_clients)
