"""Per-group assignors in the coordinator (kshare's ``share.assignor`` group config).

Two recognisable fake assignors make it obvious which one computed a target: ``first`` gives
every partition to the lowest member id, ``all`` gives every partition to every member.
"""

from __future__ import annotations

import uuid

from kshare_sidecar.assignors import SimpleAssignor, UniformAssignor
from kshare_sidecar.group.assign import assign_with
from kshare_sidecar.group.coordinator import ShareGroupCoordinator
from kshare_sidecar.backend.types import TopicInfo

T = TopicInfo("t", uuid.UUID(int=1), 2)
TOPICS = {"t": T}


def everything_to_first(members, partitions, racks, current, **_names):
    first = min(members)
    return {m: ({t: frozenset(range(partitions[t])) for t in subs} if m == first else {})
            for m, subs in members.items()}


def everything_to_all(members, partitions, racks, current, **_names):
    return {m: {t: frozenset(range(partitions[t])) for t in subs} for m, subs in members.items()}


def coordinator(default: str = "first", interval_ms: int = 0) -> ShareGroupCoordinator:
    fns = {"first": everything_to_first, "all": everything_to_all}
    return ShareGroupCoordinator(assign=fns[default], assignors=fns, default_assignor=default, clock=lambda: 0,
                                 assignment_interval_ms=interval_ms)


def hb(coord, group, member, epoch):
    """A heartbeat, then the initialization it asks for, done at once (as GroupService does)."""
    r = coord.heartbeat(group, member, epoch, rack_id=None, topics=TOPICS,
                        subscribed_topic_names=["t"] if epoch == 0 else None)
    coord.initialized(group, r.initialize)
    return r


def initialized(coord, *groups):
    """Groups whose share-partitions are initialized already (so joins are assigned at once)."""
    for group in groups:
        coord.ensure_group(group).share_state.add_initialized({T.topic_id: range(T.partitions)})


def test_groups_on_one_coordinator_use_their_own_assignor():
    coord = coordinator()
    coord.ensure_group("g-all").configs["share.assignor"] = "all"
    initialized(coord, "g-default", "g-all")
    for group in ("g-default", "g-all"):
        hb(coord, group, "a", 0)
        hb(coord, group, "b", 0)
    default, chosen = coord.groups["g-default"], coord.groups["g-all"]
    assert default.target == {"a": {T.topic_id: frozenset({0, 1})}, "b": {}}
    assert chosen.target == {"a": {T.topic_id: frozenset({0, 1})}, "b": {T.topic_id: frozenset({0, 1})}}
    assert (coord.assignor_name(default), coord.assignor_name(chosen)) == ("first", "all")


def test_a_change_bumps_the_epoch_at_the_next_heartbeat_and_recomputes_the_target():
    coord = coordinator()
    initialized(coord, "g")
    hb(coord, "g", "a", 0)
    b = hb(coord, "g", "b", 0)
    group = coord.groups["g"]
    epoch = group.group_epoch
    assert group.target["b"] == {}
    group.configs["share.assignor"] = "all"  # what AdminService.alter_configs does
    assert coord.assignor_name(group) == "first"  # the current target is still the old one's
    again = hb(coord, "g", "b", b.member_epoch)
    assert group.group_epoch == epoch + 1 == group.assignment_epoch
    assert again.assignment == {T.topic_id: frozenset({0, 1})} and again.member_epoch == epoch + 1
    assert coord.assignor_name(group) == "all"
    hb(coord, "g", "b", again.member_epoch)  # no further bump once the target is the new one's
    assert group.group_epoch == epoch + 1
    del group.configs["share.assignor"]  # back to the sidecar default
    hb(coord, "g", "b", again.member_epoch)
    assert group.group_epoch == epoch + 2 and group.target["b"] == {} and coord.assignor_name(group) == "first"


def test_a_pending_recomputation_is_not_bumped_twice():
    coord = coordinator(interval_ms=10_000)  # the second join waits for share.assignment.interval.ms
    coord.clock = lambda: 20_000
    hb(coord, "g", "a", 0)
    hb(coord, "g", "b", 0)
    group = coord.groups["g"]
    assert group.group_epoch > group.assignment_epoch
    pending = group.group_epoch
    group.configs["share.assignor"] = "all"
    hb(coord, "g", "a", group.members["a"].member_epoch)
    assert group.group_epoch == pending  # the pending recomputation will use "all" anyway


def test_an_unknown_or_unset_choice_uses_the_sidecar_default():
    coord = coordinator(default="all")
    group = coord.ensure_group("g")
    assert coord.assignor_for(group) == "all"
    group.configs["share.assignor"] = "gone"  # persisted, but its plugin is no longer loaded
    assert coord.assignor_for(group) == "all"
    initialized(coord, "g")
    hb(coord, "g", "a", 0)
    hb(coord, "g", "b", 0)
    assert all(group.target[m] == {T.topic_id: frozenset({0, 1})} for m in "ab")


def test_restored_group_does_not_rebalance_spuriously():
    coord = coordinator()
    coord.restore_group("g", 7, {"share.assignor": "all"})
    coord.restore_group("plain", 7, {})
    group = coord.groups["g"]
    assert group.assignor is None and coord.assignor_name(group) == "all"
    hb(coord, "g", "a", 0)  # the rejoin moves the epoch as it does for a group without a choice
    hb(coord, "plain", "a", 0)
    assert group.group_epoch == group.assignment_epoch == coord.groups["plain"].group_epoch
    assert group.assignor == "all"


def test_real_assignors_side_by_side_keep_their_shapes():
    """Three members on two partitions: Kafka's SimpleAssignor shares each partition between
    ceil(3/2) = 2 members; uniform gives every member exactly one partition."""
    fns = {"simple": assign_with(SimpleAssignor()), "uniform": assign_with(UniformAssignor())}
    coord = ShareGroupCoordinator(assign=fns["simple"], assignors=fns, default_assignor="simple", clock=lambda: 0)
    coord.ensure_group("u").configs["share.assignor"] = "uniform"
    initialized(coord, "s", "u")
    for group in ("s", "u"):
        for m in ("a", "b", "c"):
            hb(coord, group, m, 0)
    shape = {}
    for group in ("s", "u"):
        target = coord.groups[group].target
        per_member = sorted(len(a.get(T.topic_id, ())) for a in target.values())
        per_partition = sorted(sum(p in a.get(T.topic_id, ()) for a in target.values()) for p in range(2))
        shape[group] = (per_member, per_partition)
    assert shape == {"s": ([1, 1, 2], [2, 2]), "u": ([1, 1, 1], [1, 2])}
