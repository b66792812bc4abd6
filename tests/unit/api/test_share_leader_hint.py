"""The leader a ShareFetch or ShareAcknowledge answer names (KIP-951's CurrentLeader): in a cluster
of sidecars a hint naming another sidecar carries leader epoch -1, so Kafka's Java share consumer,
which follows a hint only with a newer epoch, drops its cached leader and asks Metadata instead of
fetching from the old leader for good; a hint naming this sidecar keeps epoch 0."""

from __future__ import annotations

from types import SimpleNamespace

from kio.schema.share_acknowledge.v2 import response as a2

from kshare_sidecar.api.shares import _leader, _leader_of
from kshare_sidecar.cluster.assign import ClusterMap
from kshare_sidecar.cluster.view import ClusterView
from kshare_sidecar.persist.ownership import share_partition_home

TOPIC = "8f3c5a1e-2b7d-4c6e-9a0f-1d2e3f4a5b6c"
PARTS = 4


def _cluster(me: int, owner_of_home: int) -> ClusterView:
    view = ClusterView(me, {"PLAINTEXT": ("127.0.0.1", 9000 + me)}, PARTS)
    home = share_partition_home(TOPIC, 0, PARTS)
    nodes = {n: {"PLAINTEXT": ("127.0.0.1", 9000 + n)} for n in (1, 2)}
    view.update(ClusterMap(1, nodes, {p: (owner_of_home if p == home else me) for p in range(PARTS)}))
    return view


def _ctx(me: int):
    return SimpleNamespace(node=SimpleNamespace(node_id=me))


def test_a_hint_naming_another_sidecar_has_no_epoch():
    assert _leader_of(_ctx(1), _cluster(1, owner_of_home=2))(TOPIC, 0) == (2, -1)
    hint = _leader(_ctx(1), a2, _cluster(1, owner_of_home=2), TOPIC, 0)
    assert (int(hint.leader_id), int(hint.leader_epoch)) == (2, -1)


def test_a_hint_naming_this_sidecar_keeps_epoch_0():
    assert _leader_of(_ctx(1), _cluster(1, owner_of_home=1))(TOPIC, 0) == (1, 0)


def test_a_lone_sidecar_names_itself():
    assert _leader_of(_ctx(5), None)(TOPIC, 3) == (5, 0)
    hint = _leader(_ctx(5), a2, None, TOPIC, 3)
    assert (int(hint.leader_id), int(hint.leader_epoch)) == (5, 0)
