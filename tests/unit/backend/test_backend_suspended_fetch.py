"""Reads go over the backend's raw Fetch connections (backend/fetchconn.py); a suspension (a cluster
member's lapsed lease) ends a read waiting on a cut backend at once and refuses new ones, as it does
every other backend request. Left waiting, one read held every share fetch of the sidecar for a
minute after the lapse, past librdkafka's socket timeout (the nemesis, "cut for good")."""

from __future__ import annotations

import asyncio

from kshare_sidecar.backend.backend import Backend
from kshare_sidecar.backend.errors import NETWORK_EXCEPTION
from kshare_sidecar.backend.reads import PartitionRead


class HangingConns:
    """Fetch connections to a backend that no longer answers."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.calls = 0
        self.dropped: list[str] = []

    async def fetch(self, node, reads, *, max_wait_ms, isolation_level, max_bytes):
        self.calls += 1
        self.started.set()
        await asyncio.sleep(3600)

    def drop_all(self, reason: str) -> None:
        self.dropped.append(reason)


READS = [PartitionRead("t", 0, 5, 1 << 20)]


async def test_a_suspension_ends_a_read_in_flight_and_refuses_new_ones():
    backend = Backend("x:1")
    conns = HangingConns()
    backend._fetch_conns = conns  # type: ignore[assignment]
    read = asyncio.create_task(backend._fetch_raw(conns, 1, list(READS), 500, 0, None))  # type: ignore[arg-type]
    await conns.started.wait()
    backend.suspend("this sidecar's cluster lease lapsed")
    out = await asyncio.wait_for(read, 1)
    assert out[("t", 0)].error_code == NETWORK_EXCEPTION
    assert conns.dropped == ["this sidecar's cluster lease lapsed"]  # its connections go too
    again = await asyncio.wait_for(backend._fetch_raw(conns, 1, list(READS), 500, 0, None), 1)  # type: ignore[arg-type]
    assert again[("t", 0)].error_code == NETWORK_EXCEPTION and conns.calls == 1
