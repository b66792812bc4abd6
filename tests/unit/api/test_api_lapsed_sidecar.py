"""A cluster member whose lease lapsed (cluster/lease.py) stops claiming leadership at once:
Metadata names another sidecar as leader of what it owned (still listing every sidecar), and
FindCoordinator another sidecar as coordinator of its groups, both without asking the backend;
alone, it names none (LEADER_NOT_AVAILABLE, COORDINATOR_NOT_AVAILABLE); and a Metadata error
answer still lists every sidecar (a client told of one broker forgets the others)."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from kshare_sidecar.api import Dispatcher, KafkaError, build_registry
from kshare_sidecar.api import coordinator as coordinator_api
from kshare_sidecar.api import metadata as metadata_api
from kshare_sidecar.cluster.assign import ClusterMap
from kshare_sidecar.cluster.view import ClusterView
from kshare_sidecar.persist.ownership import group_home, share_partition_home

from .conftest import NODE, ORDERS, FakeConnection, request_frame
from .test_api_coordinator import find
from .test_api_metadata import by_name, metadata_request

PARTS = 8


class StuckBackend:
    """The pass-through pool of a sidecar cut off from its backend: every lookup hangs."""

    calls = 0

    async def metadata(self, *args, **kwargs):
        StuckBackend.calls += 1
        await asyncio.sleep(3600)

    async def check(self, key_type, key):
        StuckBackend.calls += 1
        await asyncio.sleep(3600)


def cluster_dispatcher(catalog, view: ClusterView) -> Dispatcher:
    registry = build_registry(catalog)
    backend = StuckBackend()
    metadata_api.register(registry, catalog, backend=backend, cluster=view)
    coordinator_api.register(registry, check=backend.check, cluster=view)
    return Dispatcher(registry, NODE)


def two_node_view() -> ClusterView:
    view = ClusterView(NODE.node_id, {"PLAINTEXT": (NODE.host, NODE.port)}, PARTS)
    mine = {share_partition_home(str(ORDERS.topic_id), p, PARTS) for p in (0, 1)}
    theirs = {share_partition_home(str(ORDERS.topic_id), 2, PARTS)} - mine
    owners = {p: NODE.node_id for p in mine} | {p: 9 for p in theirs} | {group_home("g", PARTS): NODE.node_id}
    view.update(ClusterMap(3, {9: {"PLAINTEXT": ("other", 9092)}}, owners))
    return view


async def handle(dispatcher: Dispatcher, request):
    from kio.index import load_response_from_request

    from kshare_sidecar.wire import codec

    out = await asyncio.wait_for(dispatcher.handle(request_frame(request), FakeConnection()), 5)
    return codec.decode_response(out[4:], load_response_from_request(type(request)))[1]


async def test_a_lapsed_sidecar_sends_clients_elsewhere_and_asks_no_backend(catalog):
    """Not to itself, and not to nobody: librdkafka asks its most recently used connection for
    metadata, which for a client whose partitions were all here is this sidecar again — naming no
    leader kept such a client asking here for good."""
    view = two_node_view()
    view.lapsed = True
    StuckBackend.calls = 0
    body = await handle(cluster_dispatcher(catalog, view), metadata_request(12, by_name("orders")))
    (topic,) = body.topics
    leaders = {p.partition_index: (p.leader_id, p.error_code) for p in topic.partitions}
    assert leaders[0] == (9, ErrorCode.none)  # owned here: the other sidecar is named
    assert leaders[2] == (9, ErrorCode.none)  # another sidecar's: still named
    assert sorted(b.node_id for b in body.brokers) == [NODE.node_id, 9]
    assert StuckBackend.calls == 0

    found = await handle(cluster_dispatcher(catalog, view), find(2, ["g"]))
    assert (found.error_code, found.node_id) == (ErrorCode.none, 9) and StuckBackend.calls == 0


async def test_a_lapsed_sidecar_alone_names_no_leader_and_no_coordinator(catalog):
    view = ClusterView(NODE.node_id, {"PLAINTEXT": (NODE.host, NODE.port)}, PARTS)
    mine = {share_partition_home(str(ORDERS.topic_id), p, PARTS) for p in range(3)}
    view.update(ClusterMap(3, {}, {p: NODE.node_id for p in mine} | {group_home("g", PARTS): NODE.node_id}))
    view.lapsed = True
    StuckBackend.calls = 0
    body = await handle(cluster_dispatcher(catalog, view), metadata_request(12, by_name("orders")))
    (topic,) = body.topics
    assert {(p.leader_id, p.error_code) for p in topic.partitions} == {(-1, ErrorCode.leader_not_available)}
    found = await handle(cluster_dispatcher(catalog, view), find(2, ["g"]))
    assert found.error_code == ErrorCode.coordinator_not_available and StuckBackend.calls == 0


async def test_a_metadata_error_still_lists_every_sidecar(catalog, monkeypatch):
    view = two_node_view()

    async def broken(names):
        raise KafkaError(ErrorCode.leader_not_available, "backend down")

    monkeypatch.setattr(catalog, "describe_topics", broken)
    body = await handle(cluster_dispatcher(catalog, view), metadata_request(12, by_name("orders")))
    assert [(t.name, t.error_code) for t in body.topics] == [("orders", ErrorCode.leader_not_available)]
    assert sorted(b.node_id for b in body.brokers) == [NODE.node_id, 9]


async def test_metadata_answers_without_the_backends_epochs_when_it_is_slow(catalog, monkeypatch):
    monkeypatch.setattr(metadata_api, "BACKEND_WAIT_S", 0.05)
    body = await handle(cluster_dispatcher(catalog, two_node_view()), metadata_request(12, by_name("orders")))
    (topic,) = body.topics
    assert topic.error_code == ErrorCode.none and len(topic.partitions) == ORDERS.partitions


async def test_a_lapsed_sidecar_names_the_peer_its_probe_reached(catalog):
    """cluster/peers.py: Metadata waits for the probe's first round after the lapse, then names
    the peer that answered — for what it owned and for what its map gave the one that did not
    (the nemesis' seed 1381822026: a consumer sent to an unreachable peer stalled 60 s)."""
    from kshare_sidecar.cluster.peers import PeerProbe

    view = two_node_view()
    view.update(ClusterMap(4, {9: {"PLAINTEXT": ("other", 9092)}, 5: {"PLAINTEXT": ("cut-off", 9092)}},
                           {p: 5 if o == 9 else o for p, o in view.map.owners.items()}))

    async def connect(host, port, timeout_s):
        await asyncio.sleep(0.05)
        return host == "other"

    probe = PeerProbe(view, interval_s=60, timeout_s=1, connect=connect)
    view.lapsed = True
    probe.start()
    try:
        body = await handle(cluster_dispatcher(catalog, view), metadata_request(12, by_name("orders")))
    finally:
        probe.stop()
    (topic,) = body.topics
    assert {p.leader_id for p in topic.partitions} == {9}  # never node 5, owner of partition 2 in its map
    assert sorted(b.node_id for b in body.brokers) == [5, NODE.node_id, 9]  # still every sidecar listed
