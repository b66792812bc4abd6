"""Where a sidecar whose lease lapsed sends its clients: the peers it can reach (cluster/view.py's
``reachable``) — and, once renewed, away from requests its cut left hanging (``reset_clients``).

A lapsed sidecar sends its clients to another sidecar (Metadata leaders, FindCoordinator), from a
map that may be stale: the fault that cut it off may have cut a peer off too. A client sent to a
peer it cannot reach waits for its request timeout — librdkafka's share consumer fetches from one
broker at a time, so all its partitions wait (measured: 82-105 s across two faults, the nemesis'
seed 1381822026). So while lapsed the sidecar probes every peer of its map — a TCP connection to
any of the peer's advertised listeners within ``timeout_s``, every ``interval_s`` — and names
only those it reached. Its own reachability is the best proxy it has for its clients': a client
asking a sidecar is on its side of whatever the network did.

Only while lapsed: with the lease held the map is the group's current assignment and is trusted
as it is. Metadata and FindCoordinator of a lapsed sidecar wait for the first round (``settled``,
at most ``timeout_s``) so that the first answers after a lapse — the ones clients ask for at once,
on NOT_LEADER_OR_FOLLOWER — already name a reachable peer.

At the renewal the sidecar closes every client connection (``reset_clients``). A request a client
sent while the link was cut is still in that client's TCP retransmission queue, retried at
doubling intervals: it got through 16-25 s after the heal (measured, the same seed), and librdkafka's
share consumer, fetching from one broker at a time, served none of its partitions meanwhile. The
close reaches the client at once (nothing is queued in that direction), which fails the request
and asks for metadata again. Nothing is lost by it: a lapsed sidecar owns no state partition, so
its share sessions hold no records, and clients reconnect as after any broker restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .view import ClusterView

log = logging.getLogger("kshare.cluster")

#: how a peer is reached: (host, port, timeout_s) -> whether a connection was made in time
Connect = Callable[[str, int, float], Awaitable[bool]]


async def tcp_connect(host: str, port: int, timeout_s: float) -> bool:
    """A TCP handshake with the peer's listener: both directions of the path work and something
    listens there (a SYN the network drops is retried by the kernel until the timeout)."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, TimeoutError):
        return False
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), timeout_s)
    except (OSError, TimeoutError):
        pass
    return True


class PeerProbe:
    """Probes the view's peers from :meth:`start` (the lapse) to :meth:`stop` (the renewal)."""

    def __init__(self, view: ClusterView, *, interval_s: float = 2.0, timeout_s: float = 2.0,
                 connect: Connect = tcp_connect) -> None:
        self.view = view
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.connect = connect
        self._task: asyncio.Task | None = None
        self._round = asyncio.Event()
        view.peers = self

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._round.clear()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="kshare-cluster-peer-probe")

    def stop(self) -> None:
        """Renewed: the map is trusted again; every peer counts."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.view.reachable = None
        self._round.clear()

    async def settled(self) -> None:
        """Until the first round since the lapse is done (at most about ``timeout_s``)."""
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self._round.wait(), self.timeout_s + 0.5)
        except TimeoutError:
            pass

    async def probe_once(self) -> frozenset[int]:
        """One round: every peer of the map at once; who answered."""
        peers = [n for n in sorted(self.view.map.nodes) if n != self.view.node_id]
        answered = await asyncio.gather(*(self._answers(n) for n in peers))
        reached = frozenset(n for n, ok in zip(peers, answered) if ok)
        if reached != self.view.reachable:
            log.warning("cluster: lease lapsed; peers reachable from node %d: %s (of %s): clients are sent to "
                        "those only", self.view.node_id, sorted(reached) or "none", peers)
        self.view.reachable = reached
        return reached

    async def _answers(self, node_id: int) -> bool:
        """Whether any of the peer's advertised addresses takes a connection: one listener may be
        advertised for another network (a published port for the Docker host, say) that this
        sidecar cannot use."""
        addresses = sorted(set((self.view.map.nodes.get(node_id) or {}).values()))
        results = await asyncio.gather(*(self.connect(host, port, self.timeout_s) for host, port in addresses))
        return any(results)

    async def _run(self) -> None:
        while True:
            try:
                await self.probe_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the probe must outlive a bad map or address
                log.exception("cluster: probing the peers failed")
            self._round.set()
            await asyncio.sleep(self.interval_s)


async def settle(view: ClusterView | None) -> None:
    """Metadata / FindCoordinator of a lapsed sidecar: wait for its probe's first round."""
    peers = getattr(view, "peers", None)
    if peers is not None and getattr(view, "lapsed", False):
        await peers.settled()


#: how long the renewal's close lets requests in flight be answered first (as a stopping sidecar's)
RESET_SETTLE_S = 1.0


def reset_clients(listeners) -> asyncio.Task:
    """The lease is renewed: close every client connection (see above), once what each has in
    flight is answered (at most ``RESET_SETTLE_S``: an acknowledgement answered, not cut off by
    the close, whose outcome its client could then not know)."""

    async def reset() -> int:
        await asyncio.gather(*(listener.settle(RESET_SETTLE_S) for listener in listeners))
        closed = sum(listener.close_connections("this sidecar's cluster lease was renewed: requests sent while it "
                                                "was cut off may still be in the client's TCP retransmission queue")
                     for listener in listeners)
        log.warning("cluster: lease renewed; %d client connections closed (requests sent to it during the lapse "
                    "are sent again at once, not at TCP's next retransmission)", closed)
        return closed

    task = asyncio.get_running_loop().create_task(reset(), name="kshare-cluster-reset-clients")
    _RESETS.add(task)  # a strong reference until it is done (the loop keeps only weak ones)
    task.add_done_callback(_RESETS.discard)
    return task


_RESETS: set[asyncio.Task] = set()
