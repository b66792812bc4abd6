"""KIP-368 on a raw backend connection (backend/brokerconn.py): past 85 % of the session lifetime the
broker granted, the next request first re-authenticates on the same connection — after the
answers in flight — so the broker never sees a request on an expired session."""

from __future__ import annotations

import asyncio
import datetime
import io

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.serial import entity_writer

from kshare_sidecar.backend.brokerconn import BrokerConn
from kshare_sidecar.backend.security import BackendSecurity

LIFETIME_MS = 400
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


def _response(cid: int, response) -> bytes:
    buf = io.BytesIO()
    header = type(response).__header_schema__
    entity_writer(header)(buf, header(correlation_id=cid))
    entity_writer(type(response))(buf, response)
    payload = buf.getvalue()
    return len(payload).to_bytes(4, "big") + payload


class FakeBroker:
    """Answers SASL at once (session lifetime 400 ms) and any other request after 150 ms;
    records (time, api key) of what arrives and when each answer leaves."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                api_key, cid = int.from_bytes(frame[0:2], "big"), int.from_bytes(frame[4:8], "big", signed=True)
                self.events.append(("in", api_key))
                if api_key == SASL_HANDSHAKE:
                    writer.write(_response(cid, SaslHandshakeResponse(error_code=ErrorCode.none,
                                                                      mechanisms=("PLAIN",))))
                elif api_key == SASL_AUTHENTICATE:
                    writer.write(_response(cid, SaslAuthenticateResponse(
                        error_code=ErrorCode.none, error_message=None, auth_bytes=b"",
                        session_lifetime=datetime.timedelta(milliseconds=LIFETIME_MS))))
                else:
                    await asyncio.sleep(0.15)
                    writer.write((8).to_bytes(4, "big") + cid.to_bytes(4, "big", signed=True) + b"body")
                    self.events.append(("out", api_key))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client closed, or the test ended


def _request(api_key: int) -> bytes:
    # size-less payload: api key, version, correlation id (replaced by BrokerConn), client id (null)
    return api_key.to_bytes(2, "big") + (0).to_bytes(2, "big") + (0).to_bytes(4, "big") + b"\xff\xff"


def test_reauthenticates_in_place_after_the_answers_in_flight():
    async def run():
        fake = FakeBroker()
        server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        security = BackendSecurity(protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="u", password="p")
        conn = BrokerConn("127.0.0.1", port, security=security)
        try:
            assert await conn.request(_request(18), timeout_s=5)  # connect + authenticate + one request
            first = await conn.send(_request(3))                   # in flight while the session nears its end
            await asyncio.sleep(LIFETIME_MS * 0.9 / 1000)
            second = await conn.send(_request(19))                 # past 85 %: re-authenticates first
            await asyncio.wait_for(asyncio.gather(first, second), 5)
        finally:
            await conn.close()
            server.close()
            await server.wait_closed()
        return fake, conn

    fake, conn = asyncio.run(run())
    assert fake.connections == 1 and conn.reauthentications == 1
    assert fake.events == [("in", SASL_HANDSHAKE), ("in", SASL_AUTHENTICATE), ("in", 18), ("out", 18),
                           ("in", 3), ("out", 3),                       # the answer in flight first
                           ("in", SASL_HANDSHAKE), ("in", SASL_AUTHENTICATE),  # then KIP-368
                           ("in", 19), ("out", 19)]
