"""backend/sasl.py's OAUTHBEARER exchange against a scripted broker: a refused token (RFC 7628's error
answer) must fail authentication with the broker's reason — aiokafka's authenticator alone takes
the error answer for success and goes on unauthenticated (found by the backend OAUTHBEARER e2e)."""

from __future__ import annotations

import asyncio
import datetime
import io

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.serial import entity_writer

from kshare_sidecar.backend.sasl import SaslError, sasl_authenticate
from kshare_sidecar.backend.security import BackendSecurity


def _frame(response) -> bytes:
    buf = io.BytesIO()
    header = type(response).__header_schema__
    entity_writer(header)(buf, header(correlation_id=0))
    entity_writer(type(response))(buf, response)
    return buf.getvalue()


def _auth(code: ErrorCode, auth_bytes: bytes, message: str | None = None) -> bytes:
    return _frame(SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=auth_bytes,
                                           session_lifetime=datetime.timedelta(0)))


class ScriptedBroker:
    def __init__(self, answers: list[bytes]) -> None:
        self.answers, self.sent = list(answers), []

    async def request(self, payload: bytes, *, _raw: bool = False, timeout_s=None) -> bytes:
        self.sent.append(bytes(payload))
        return self.answers.pop(0)


class Token:
    async def token(self) -> str:
        return "h.p."


def _security() -> BackendSecurity:
    return BackendSecurity(protocol="SASL_PLAINTEXT", mechanism="OAUTHBEARER", token_provider=Token())


HANDSHAKE_OK = _frame(SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=("OAUTHBEARER",)))


def test_a_refused_token_fails_with_the_brokers_reason():
    broker = ScriptedBroker([HANDSHAKE_OK, _auth(ErrorCode.none, b'{"status":"invalid_token"}'),
                             _auth(ErrorCode.sasl_authentication_failed, b"", '{"status":"invalid_token"}')])
    with pytest.raises(SaslError) as err:
        asyncio.run(sasl_authenticate(broker, _security()))
    assert err.value.code == 58 and "invalid_token" in str(err.value) and "h.p." not in str(err.value)
    assert broker.sent[-1].endswith(b"\x02\x01\x00"), "the client must answer the error with kvsep 0x01 (RFC 7628 3.2.2; compact bytes: length 1+1, tag 0)"


def test_an_accepted_token_authenticates_in_one_round():
    broker = ScriptedBroker([HANDSHAKE_OK, _auth(ErrorCode.none, b"")])
    asyncio.run(sasl_authenticate(broker, _security()))
    assert len(broker.sent) == 2 and b"auth=Bearer h.p." in broker.sent[1]
