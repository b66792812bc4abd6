"""Two reads asking for the same broker's Fetch connection at once (backend/fetchconn.py): the
second must wait until the first has learnt the connection's Fetch version. It used to take the
connection as soon as it was connected and fail on the unknown version (KeyError: a ShareFetch
answered with an internal error, seen at the start of every nemesis run)."""

from __future__ import annotations

import asyncio

from kshare_sidecar.backend import fetchconn
from kshare_sidecar.backend.fetchconn import FetchConns


class FakeConn:
    def __init__(self, host, port, **_kw) -> None:
        self.host, self.port, self.connected = host, port, False

    async def close(self) -> None:
        self.connected = False


async def test_a_connection_is_shared_only_once_its_fetch_version_is_known(monkeypatch):
    monkeypatch.setattr(fetchconn, "BrokerConn", FakeConn)
    conns = FetchConns(lambda node: ("kafka-1", 9092))
    asked = asyncio.Event()

    async def version(conn):
        conn.connected = True  # connected, the ApiVersions answer still to come
        asked.set()
        await asyncio.sleep(0.05)
        return 16

    conns._version = version  # type: ignore[method-assign]
    first = asyncio.create_task(conns._conn(1, False))
    await asked.wait()
    b = await conns._conn(1, False)
    assert conns._versions.get(b) == 16  # fetch() reads it right away
    assert await first is b
