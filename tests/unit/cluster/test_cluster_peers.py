"""A sidecar whose lease lapsed names only peers it can reach (cluster/view.py, cluster/peers.py):
for what it owned, and for what its stale map gives to a peer it cannot reach; reaching none, it
names none for what it owned and keeps the map's owner for the rest. With the lease held the map
stands as it is. The probe runs from the lapse to the renewal, and Metadata waits for its first
round. The seed it comes from: the nemesis' 1381822026 (docs/testing.md)."""

from __future__ import annotations

import asyncio

from kshare_sidecar.cluster.assign import ClusterMap
from kshare_sidecar.cluster.peers import PeerProbe, settle, tcp_connect
from kshare_sidecar.cluster.view import ClusterView

PARTS = 8
ME, A, B = 2, 1, 3


def three_node_view() -> ClusterView:
    """Node 2's map: it owns 3-5, node 1 owns 0-2, node 3 owns 6-7."""
    view = ClusterView(ME, {"PLAINTEXT": ("s2", 9092)}, PARTS)
    owners = {p: A for p in (0, 1, 2)} | {p: ME for p in (3, 4, 5)} | {p: B for p in (6, 7)}
    view.update(ClusterMap(4, {A: {"PLAINTEXT": ("s1", 9092)}, B: {"PLAINTEXT": ("s3", 9092)}}, owners))
    return view


def test_with_the_lease_held_the_map_stands_whatever_was_probed():
    view = three_node_view()
    view.reachable = frozenset({A})  # a stale result: not consulted while the lease holds
    assert [view.owner(p) for p in range(PARTS)] == [A, A, A, ME, ME, ME, B, B]


def test_unprobed_a_lapsed_sidecar_spreads_what_it_owned_over_every_peer():
    view = three_node_view()
    view.lapsed = True
    assert view.owner(4) is None and view.owner(6) == B
    assert {view._elsewhere(p) for p in (3, 4, 5)} == {A, B}


def test_a_lapsed_sidecar_names_only_peers_it_reached():
    """Seed 1381822026: node 2 cut from the backend, node 3 split off with a client. Node 2 named
    node 3 for half of its partitions (and its map named node 3 for 6-7): a consumer on the
    majority side went there and waited for 60 s."""
    view = three_node_view()
    view.lapsed = True
    view.reachable = frozenset({A})
    assert [view.owner(p) for p in range(PARTS)] == [A, A, A, None, None, None, None, None]
    assert {view._elsewhere(p) for p in range(PARTS)} == {A}
    assert view.coordinator("any group") == A


def test_reaching_no_peer_it_names_none_for_what_it_owned_and_the_map_for_the_rest():
    """The sidecar is what the fault cut off, and most likely the clients asking it are on its
    side: a peer it names would hold them in a request to a host they cannot reach (librdkafka's
    share consumer: every partition, until its 60 s socket timeout). Naming none, they ask again,
    and learn the owners as soon as the lease is renewed."""
    view = three_node_view()
    view.lapsed = True
    view.reachable = frozenset()
    assert [view.owner(p) for p in range(PARTS)] == [A, A, A, None, None, None, B, B]
    assert {view._elsewhere(p) for p in (3, 4, 5)} == {-1}


class FakeConnect:
    def __init__(self, up: set[str]) -> None:
        self.up, self.calls = up, []

    async def __call__(self, host: str, port: int, timeout_s: float) -> bool:
        self.calls.append(host)
        await asyncio.sleep(0.01)
        return host in self.up


async def test_the_probe_runs_from_the_lapse_to_the_renewal():
    view = three_node_view()
    connect = FakeConnect({"s1"})
    probe = PeerProbe(view, interval_s=0.05, timeout_s=0.5, connect=connect)
    assert view.peers is probe
    await settle(view)  # not lapsed: nothing to wait for
    assert view.reachable is None and connect.calls == []
    view.lapsed = True
    probe.start()
    await settle(view)  # the first round: Metadata answers after it
    assert view.reachable == frozenset({A}) and sorted(connect.calls) == ["s1", "s3"]
    connect.up = {"s1", "s3"}
    await asyncio.sleep(0.2)
    assert view.reachable == frozenset({A, B})  # every interval again
    probe.stop()
    view.lapsed = False
    assert view.reachable is None
    n = len(connect.calls)
    await asyncio.sleep(0.1)
    assert len(connect.calls) == n  # stopped


async def test_a_peer_counts_as_reached_by_any_of_its_addresses():
    """An EXTERNAL listener advertised for the Docker host (localhost:9193) is not reachable from
    another container; the INTERNAL one is."""
    view = three_node_view()
    view.update(ClusterMap(4, {A: {"EXTERNAL": ("localhost", 9193), "INTERNAL": ("s1", 19192)},
                               B: {"EXTERNAL": ("localhost", 9194), "INTERNAL": ("s3", 19192)}}, view.map.owners))
    probe = PeerProbe(view, connect=FakeConnect({"s1"}))
    assert await probe.probe_once() == frozenset({A})


async def test_settled_is_bounded_when_a_probe_hangs():
    view = three_node_view()

    async def hangs(host, port, timeout_s):
        await asyncio.sleep(3600)

    probe = PeerProbe(view, interval_s=1, timeout_s=0.05, connect=hangs)
    view.lapsed = True
    probe.start()
    await asyncio.wait_for(settle(view), 2)
    assert view.reachable is None  # nothing learned: every peer still counts
    probe.stop()


async def test_tcp_connect_tells_a_listener_from_a_closed_port():
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await tcp_connect("127.0.0.1", port, 2)
    finally:
        server.close()
        await server.wait_closed()
    assert not await tcp_connect("127.0.0.1", port, 2)


async def test_a_renewed_sidecar_closes_its_client_connections_and_keeps_listening():
    """reset_clients: a request a client sent while the link was cut waits in its TCP
    retransmission queue (measured: 16-25 s after the heal); the close reaches it at once."""
    from kshare_sidecar.cluster.peers import reset_clients
    from kshare_sidecar.wire import codec
    from kshare_sidecar.wire.server import Listener

    async def parks(conn, frame, release) -> bytes:
        release()
        await asyncio.sleep(3600)  # a request that is never answered (a parked long poll, say)

    lst = Listener(parks, "127.0.0.1", 0)
    await lst.start()
    try:
        clients = [await asyncio.open_connection("127.0.0.1", lst.port) for _ in range(2)]
        for _reader, writer in clients:
            writer.write(codec.frame(bytes.fromhex("004e0000000000010000")))
        while len(lst.connections) < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert await reset_clients([lst]) == 2  # after at most a second of settling
        for reader, writer in clients:
            assert await asyncio.wait_for(reader.read(), 5) == b""  # EOF: the client fails its request now
            writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)  # still accepting
        writer.close()
    finally:
        await lst.stop()
