"""A single sidecar's lease (cluster/lease.py) is its backend answering the health probe. When it
lapses, and again when the backend answers after a lapse, every backend connection is closed — the
backend client's, the raw Fetch connections and the state writers' (``lease_droppers``).

Why: a connection whose packets a cut link dropped resumes only at TCP's next retransmission, which
has backed off to tens of seconds by the end of a 30 s cut. Left open, state writes and reads on
such connections held seven partitions of a single sidecar still for 25 s after the heal (the
nemesis, "a single sidecar cut from its backend"); fresh connections are used at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from kshare_sidecar.backend.backend import Backend
from kshare_sidecar.cluster.lease import Lease


class Conn:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class Client:
    def __init__(self) -> None:
        self._conns = {("n", 1): Conn()}


class FetchConns:
    def __init__(self) -> None:
        self.dropped: list[str] = []

    def drop_all(self, reason: str) -> None:
        self.dropped.append(reason)


async def test_a_lapse_and_the_renewal_after_it_close_every_backend_connection():
    backend = Backend("x:1")
    backend.lease = Lease(150, time.monotonic)
    backend.lease.renew(time.monotonic())
    client, fetch_conns, persister = Client(), FetchConns(), []
    backend._client = client  # type: ignore[assignment]
    backend._fetch_conns = fetch_conns  # type: ignore[assignment]
    backend.lease_droppers.append(lambda: persister.append("dropped") or 2)
    down = asyncio.Event()

    async def metadata(names):
        if down.is_set():
            raise OSError("no route to host")
        await asyncio.sleep(0.01)

    backend._metadata = metadata
    task = asyncio.create_task(backend._watch_health(up_every_s=0.01, down_every_s=0.01))
    try:
        await asyncio.sleep(0.05)
        assert fetch_conns.dropped == [] and persister == []  # a healthy backend keeps its connections
        down.set()
        await asyncio.wait_for(_until(lambda: backend.lease.lapsed and len(fetch_conns.dropped) == 1), 5)
        assert "lapsed" in fetch_conns.dropped[0] and persister == ["dropped"]
        assert client._conns[("n", 1)].closed == 1
        down.clear()
        await asyncio.wait_for(_until(lambda: len(fetch_conns.dropped) == 2), 5)
        assert not backend.lease.lapsed
        assert "answers again" in fetch_conns.dropped[1] and persister == ["dropped", "dropped"]
        assert client._conns[("n", 1)].closed == 2
        await asyncio.sleep(0.05)
        assert len(fetch_conns.dropped) == 2  # once per lapse and once per renewal, not per probe
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.005)
