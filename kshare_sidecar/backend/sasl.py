"""SASL on a raw backend connection: SaslHandshake v1, then SaslAuthenticate v2 rounds (KIP-152).

The mechanisms themselves (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) are aiokafka's authenticators;
this module only carries their tokens in kio-encoded requests. The exception: credentials fetched
at each authentication (``BackendSecurity.credential_source`` — a delegation token owned by a
client's principal) go through kshare's own SCRAM client (``protocol/scram.py``), which can send
Kafka's ``tokenauth=true`` extension. A broker that refuses the
credentials answers SASL_AUTHENTICATION_FAILED with a message, which becomes :class:`SaslError`
(the message is the broker's; it never contains the secret).

KIP-368: :func:`sasl_authenticate` returns the broker's ``session_lifetime_ms`` (0 = the session
never ends); :class:`~kshare_sidecar.backend.brokerconn.BrokerConn` runs the same exchange again on
the open connection before that lifetime ends, because a broker with
``connections.max.reauth.ms`` closes a connection whose session expired at its next request.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.static.protocol import RequestPayload, ResponsePayload

from ..protocol.constants import SCRAM_MECHANISMS
from ..protocol.scram import ScramClient, ScramInvalid
from ..protocol.requests import decode_response, request_payload
from .errors import SaslError

if TYPE_CHECKING:
    from .security import BackendSecurity


class RawRequester(Protocol):
    """What the exchange needs of a connection (brokerconn.BrokerConn is one; it imports this
    module, so naming it here would be an import circle)."""

    async def request(self, payload: bytes, *, timeout_s: float | None = None, _raw: bool = False) -> bytes: ...


_Response = TypeVar("_Response", bound=ResponsePayload)


def _payload(request: RequestPayload) -> bytes:
    return request_payload(request, 0, "kshare")  # BrokerConn sets the correlation id


def _answer(cls: type[_Response], payload: bytes) -> _Response:
    body: _Response = decode_response(payload, cls)[1]
    return body


async def sasl_handshake(conn: RawRequester, mechanism: str) -> None:
    """SaslHandshake v1 for ``mechanism``; :class:`SaslError` naming what the broker offers."""
    handshake = _answer(SaslHandshakeResponse,
                        await conn.request(_payload(SaslHandshakeRequest(mechanism=mechanism)), _raw=True))
    if handshake.error_code != ErrorCode.none:
        offered = ", ".join(handshake.mechanisms) or "none"
        raise SaslError(f"the broker does not offer SASL mechanism {mechanism} (it offers: {offered})",
                        int(handshake.error_code))


async def sasl_token(conn: RawRequester, token: bytes) -> SaslAuthenticateResponse:
    """One SaslAuthenticate v2 round: the broker's answer as it is (errors included)."""
    return _answer(SaslAuthenticateResponse,
                   await conn.request(_payload(SaslAuthenticateRequest(auth_bytes=token)), _raw=True))


async def sasl_authenticate(conn: RawRequester, security: BackendSecurity) -> float:
    """Authenticate ``conn`` (just connected, or re-authenticating with nothing else in flight) as
    ``security`` says; returns the session lifetime in seconds the broker granted (0: unlimited)."""
    mechanism = security.mechanism or "PLAIN"
    await sasl_handshake(conn, mechanism)
    authenticator = await _fetched_credentials(security) if security.credential_source is not None \
        else security.sasl_authenticator()
    server_token: bytes | None = None
    lifetime = 0.0
    while True:
        step = await authenticator.step(server_token)
        if step is None:
            return lifetime
        token, expects_answer = step
        answer = await sasl_token(conn, token)
        if answer.error_code != ErrorCode.none:
            raise SaslError(f"{ErrorCode(answer.error_code).name}: {answer.error_message or 'authentication failed'}",
                            int(answer.error_code))
        lifetime = answer.session_lifetime.total_seconds()
        if not expects_answer:
            return lifetime
        if mechanism == "OAUTHBEARER" and answer.auth_bytes:
            # RFC 7628 3.2.2: a non-empty server answer is an error ({"status": "invalid_token"...});
            # the client sends kvsep (0x01) and the broker then fails the exchange with its reason.
            # (aiokafka's authenticator takes the error for success and goes on unauthenticated.)
            final = await sasl_token(conn, b"\x01")
            status = bytes(answer.auth_bytes).decode("utf-8", "replace")  # e.g. {"status":"invalid_token"}
            raise SaslError(f"SASL_AUTHENTICATION_FAILED: OAUTHBEARER token refused: {final.error_message or status}",
                            58)
        server_token = answer.auth_bytes


class _ScramSteps:
    """:class:`ScramClient` behind aiokafka's authenticator interface: ``await step(server
    token)`` → ``(token, expects answer)``, ``None`` when done."""

    def __init__(self, client: ScramClient) -> None:
        self._client = client
        self._stage = 0

    async def step(self, server_token: bytes | None) -> tuple[bytes, bool] | None:
        self._stage += 1
        try:
            if self._stage == 1:
                return self._client.first(), True
            if self._stage == 2:  # PBKDF2: off the event loop
                return await asyncio.to_thread(self._client.final, bytes(server_token or b"")), True
            self._client.verify(bytes(server_token or b""))
        except ScramInvalid as exc:
            raise SaslError(f"SCRAM with the backend failed: {exc}") from None
        return None


async def _fetched_credentials(security: BackendSecurity) -> Any:
    if security.mechanism not in SCRAM_MECHANISMS:
        raise SaslError(f"fetched credentials need a SCRAM mechanism, not {security.mechanism}")
    username, password = await security.credential_source.credentials()
    extensions = {"tokenauth": "true"} if security.token_auth else None
    return _ScramSteps(ScramClient(security.mechanism, username, password, extensions=extensions))
