"""A pass-through upstream closed by its owner (the client went away) fails what it had in
flight with BrokerConnClosed, not a plain BrokerConnError: the forwarder must not log a healthy
backend as unavailable each time a consumer disconnects during a long-poll Fetch."""

from __future__ import annotations

import asyncio

import pytest

from kshare_sidecar.backend.brokerconn import BrokerConn, BrokerConnClosed, BrokerConnError


def _request() -> bytes:
    # Fetch v4, correlation id (replaced by BrokerConn), null client id; the fake broker never answers
    return (1).to_bytes(2, "big") + (4).to_bytes(2, "big") + (0).to_bytes(4, "big") + b"\xff\xff"


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while await reader.read(65536):
            pass
    except ConnectionError:
        pass


async def _in_flight(action) -> BaseException:
    server = await asyncio.start_server(_silent, "127.0.0.1", 0)
    conn = BrokerConn("127.0.0.1", server.sockets[0].getsockname()[1], node_id=1)
    try:
        fut = await conn.send(_request())
        await asyncio.sleep(0.05)
        await action(conn)
        with pytest.raises(BrokerConnError) as raised:
            await fut
        return raised.value
    finally:
        await conn.close()
        server.close()


def test_closed_by_its_owner_is_not_a_backend_failure():
    async def close(conn: BrokerConn) -> None:
        await conn.close()

    assert isinstance(asyncio.run(_in_flight(close)), BrokerConnClosed)


def test_a_dropped_connection_is_a_backend_failure():
    async def drop(conn: BrokerConn) -> None:
        conn.drop("broker went away")

    assert not isinstance(asyncio.run(_in_flight(drop)), BrokerConnClosed)
