"""Two reads asking for the same broker's Fetch connection at once (backend/fetchconn.py): the
second must wait until the first has learnt the connection's Fetch version. It used to take the
connection as soon as it was connected and fail on the unknown version (KeyError: a ShareFetch
answered with an internal error, seen at the start of every nemesis run). And the long polls'
connections: one poll in flight on each while there are enough of them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

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
    first = asyncio.create_task(conns._conn(1, 0))
    await asked.wait()
    b = await conns._conn(1, 0)
    assert conns._versions.get(b) == 16  # fetch() reads it right away
    assert await first is b


def test_long_polls_take_a_connection_nothing_waits_on_and_reads_keep_their_own():
    """A broker answers one request per connection at a time: a long poll for a partition without
    new data must not hold another partition's poll behind it (nor a read)."""
    conns = FetchConns(lambda node: ("kafka-1", 9092))
    busy = SimpleNamespace(in_flight=1)  # e.g. a poll whose ShareFetch gave up: the broker still holds it
    conns._conns[(1, 1)] = busy  # type: ignore[assignment]
    assert conns._poll_lane(1) == 2
    conns._lane_users[(1, 2)] = 1  # chosen by a poll whose connection is still being opened
    assert conns._poll_lane(1) == 3
    assert conns._poll_lane(2) == 1  # lanes are per broker
    for lane in range(1, fetchconn.LONG_POLL_CONNS + 1):
        conns._lane_users[(1, lane)] = 3
    conns._lane_users[(1, 5)] = 2
    assert conns._poll_lane(1) == 5  # all in use: the least busy
