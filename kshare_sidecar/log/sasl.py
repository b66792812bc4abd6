"""SASL on a raw backend connection: SaslHandshake v1, then SaslAuthenticate v2 rounds (KIP-152).

The mechanisms themselves (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) are aiokafka's authenticators;
this module only carries their tokens in kio-encoded requests. A broker that refuses the
credentials answers SASL_AUTHENTICATION_FAILED with a message, which becomes :class:`SaslError`
(the message is the broker's; it never contains the secret).

KIP-368: :func:`sasl_authenticate` returns the broker's ``session_lifetime_ms`` (0 = the session
never ends); :class:`~kshare_sidecar.log.brokerconn.BrokerConn` runs the same exchange again on
the open connection before that lifetime ends, because a broker with
``connections.max.reauth.ms`` closes a connection whose session expired at its next request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.static.protocol import RequestPayload, ResponsePayload

from ..protocol.requests import decode_response, request_payload

if TYPE_CHECKING:
    from .security import BackendSecurity


class RawRequester(Protocol):
    """What the exchange needs of a connection (brokerconn.BrokerConn is one; it imports this
    module, so naming it here would be an import circle)."""

    async def request(self, payload: bytes, *, timeout_s: float | None = None, _raw: bool = False) -> bytes: ...


class SaslError(Exception):
    """The broker refused the mechanism or the credentials (``code``: its error code, if any)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


_Response = TypeVar("_Response", bound=ResponsePayload)


def _payload(request: RequestPayload) -> bytes:
    return request_payload(request, 0, "kshare")  # BrokerConn sets the correlation id


def _answer(cls: type[_Response], payload: bytes) -> _Response:
    body: _Response = decode_response(payload, cls)[1]
    return body


async def sasl_authenticate(conn: RawRequester, security: BackendSecurity) -> float:
    """Authenticate ``conn`` (just connected, or re-authenticating with nothing else in flight) as
    ``security`` says; returns the session lifetime in seconds the broker granted (0: unlimited)."""
    mechanism = security.mechanism or "PLAIN"
    handshake = _answer(SaslHandshakeResponse,
                        await conn.request(_payload(SaslHandshakeRequest(mechanism=mechanism)), _raw=True))
    if handshake.error_code != ErrorCode.none:
        offered = ", ".join(handshake.mechanisms) or "none"
        raise SaslError(f"the broker does not offer SASL mechanism {mechanism} (it offers: {offered})")
    authenticator = security.sasl_authenticator()
    server_token: bytes | None = None
    lifetime = 0.0
    while True:
        step = await authenticator.step(server_token)
        if step is None:
            return lifetime
        token, expects_answer = step
        answer = _answer(SaslAuthenticateResponse,
                         await conn.request(_payload(SaslAuthenticateRequest(auth_bytes=token)), _raw=True))
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
            final = _answer(SaslAuthenticateResponse,
                            await conn.request(_payload(SaslAuthenticateRequest(auth_bytes=b"\x01")), _raw=True))
            status = bytes(answer.auth_bytes).decode("utf-8", "replace")  # e.g. {"status":"invalid_token"}
            raise SaslError(f"SASL_AUTHENTICATION_FAILED: OAUTHBEARER token refused: {final.error_message or status}",
                            58)
        server_token = answer.auth_bytes
