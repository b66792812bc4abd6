"""Share-group coordinator: epochs, joins, leaves, fencing, limits, expiry (KIP-848/932 rules)."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.group.coordinator import GroupState, ShareGroupCoordinator
from kshare_sidecar.backend.types import TopicInfo

T1 = TopicInfo("t1", uuid.UUID(int=1), 3)
T2 = TopicInfo("t2", uuid.UUID(int=2), 1)
TOPICS = {"t1": T1, "t2": T2}


def everyone_gets_everything(members, partitions, racks, current, **_names):
    return {m: {t: frozenset(range(partitions[t])) for t in subs} for m, subs in members.items()}


class Clock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


def initialized(coord, group="g", topics=TOPICS):
    """A group whose share-partitions are initialized already: members are assigned as they join."""
    coord.ensure_group(group).share_state.add_initialized(
        {t.topic_id: range(t.partitions) for t in topics.values()})
    return coord


@pytest.fixture
def coord():
    return initialized(ShareGroupCoordinator(assign=everyone_gets_everything, clock=Clock(), max_size=3,
                                             session_timeout_ms=45000, heartbeat_interval_ms=5000))


def hb(coord, member, epoch, topics=("t1",), group="g", meta=TOPICS):
    """A heartbeat, then the initialization it asks for, done at once (as GroupService does)."""
    r = coord.heartbeat(group, member, epoch, rack_id=None, topics=meta,
                        subscribed_topic_names=list(topics) if topics is not None else None)
    coord.initialized(group, r.initialize)
    return r


def test_join_gets_assignment_and_epoch(coord):
    r = hb(coord, "m1", 0)
    assert r.error == ErrorCode.none and r.member_id == "m1"
    assert r.member_epoch == coord.groups["g"].group_epoch == coord.groups["g"].assignment_epoch
    assert r.assignment == {T1.topic_id: frozenset({0, 1, 2})}
    assert r.heartbeat_interval_ms == 5000
    assert coord.groups["g"].state is GroupState.STABLE


def test_unchanged_assignment_is_not_resent(coord):
    r = hb(coord, "m1", 0)
    r2 = hb(coord, "m1", r.member_epoch, topics=None)
    assert r2.error == ErrorCode.none and r2.assignment is None and r2.member_epoch == r.member_epoch


def test_second_member_bumps_epochs_and_first_member_catches_up(coord):
    r1 = hb(coord, "m1", 0)
    r2 = hb(coord, "m2", 0, topics=("t1", "t2"))
    assert r2.member_epoch > r1.member_epoch
    r1b = hb(coord, "m1", r1.member_epoch, topics=None)
    assert r1b.member_epoch == r2.member_epoch
    # m1's assignment did not change, so it is not re-sent even though its epoch moved
    assert r1b.assignment is None
    assert r2.assignment == {T1.topic_id: frozenset({0, 1, 2}), T2.topic_id: frozenset({0})}


def test_fenced_epoch_and_unknown_member(coord):
    r = hb(coord, "m1", 0)
    assert hb(coord, "m1", r.member_epoch + 5, topics=None).error == ErrorCode.fenced_member_epoch
    assert hb(coord, "ghost", 3, topics=None).error == ErrorCode.unknown_member_id
    # Kafka: a heartbeat (not a join) to a group that does not exist
    assert hb(coord, "m1", 7, topics=None, group="other").error == ErrorCode.group_id_not_found


def test_previous_epoch_is_accepted(coord):
    r1 = hb(coord, "m1", 0)
    hb(coord, "m2", 0)
    caught_up = hb(coord, "m1", r1.member_epoch, topics=None)
    # a heartbeat with the previous epoch (response lost) is still accepted
    again = hb(coord, "m1", r1.member_epoch, topics=None)
    assert caught_up.error == again.error == ErrorCode.none


@pytest.mark.parametrize("member,epoch,topics", [("", 0, ("t1",)), ("x" * 37, 0, ("t1",)), ("m", 0, ()),
                                                 ("m", 0, None), ("m", -2, ("t1",))])
def test_invalid_requests(coord, member, epoch, topics):
    assert hb(coord, member, epoch, topics=topics).error == ErrorCode.invalid_request


def test_leave_and_empty_state(coord):
    r = hb(coord, "m1", 0)
    left = hb(coord, "m1", -1, topics=None)
    assert left.error == ErrorCode.none and left.member_epoch == -1
    assert coord.groups["g"].state is GroupState.EMPTY
    assert hb(coord, "m1", r.member_epoch, topics=None).error == ErrorCode.unknown_member_id


def test_rejoin_with_same_id_keeps_the_member_as_kafka_does(coord):
    """Kafka 4.3: epoch 0 from a known member updates it in place; the group epoch moves only if
    the subscription changed (kshare used to start the member over; the differential harness
    saw the previous-epoch rule then fence a third member)."""
    r = hb(coord, "m1", 0)
    epoch = coord.groups["g"].group_epoch
    again = hb(coord, "m1", 0)
    assert again.error == ErrorCode.none and again.member_epoch == r.member_epoch
    assert coord.groups["g"].group_epoch == epoch and again.assignment == r.assignment
    assert len(coord.groups["g"].members) == 1


def test_group_max_size(coord):
    for m in ("a", "b", "c"):
        assert hb(coord, m, 0).error == ErrorCode.none
    assert hb(coord, "d", 0).error == ErrorCode.group_max_size_reached
    assert "d" not in coord.groups["g"].members


def test_session_timeout_expires_members(coord):
    hb(coord, "m1", 0)
    coord.clock.now = 30000
    r2 = hb(coord, "m2", 0)
    coord.clock.now = 45000
    assert coord.expire_members() == [("g", "m1")]
    assert set(coord.groups["g"].members) == {"m2"}
    assert coord.next_deadline_ms() == 30000 + 45000
    assert coord.groups["g"].group_epoch > r2.member_epoch


def test_topic_growth_bumps_epoch_and_reassigns_once_the_new_partitions_are_initialized(coord):
    r = hb(coord, "m1", 0)
    grown = {"t1": TopicInfo("t1", T1.topic_id, 5), "t2": T2}
    r2 = coord.heartbeat("g", "m1", r.member_epoch, rack_id=None, topics=grown, subscribed_topic_names=None)
    assert r2.member_epoch == r.member_epoch + 1 and r2.assignment is None  # the old 3 only
    assert r2.initialize == {T1.topic_id: frozenset({3, 4})}
    coord.initialized("g", r2.initialize)
    r3 = hb(coord, "m1", r2.member_epoch, topics=None, meta=grown)
    assert r3.member_epoch == r2.member_epoch + 1
    assert r3.assignment == {T1.topic_id: frozenset(range(5))}


def test_unknown_topic_is_assigned_when_created(coord):
    r = hb(coord, "m1", 0, topics=("later",))
    assert r.assignment == {}
    later = TopicInfo("later", uuid.UUID(int=9), 2)
    r2 = hb(coord, "m1", r.member_epoch, topics=None, meta={**TOPICS, "later": later})
    assert r2.assignment is None and r2.member_epoch == r.member_epoch + 1  # initialized, not assigned yet
    r3 = hb(coord, "m1", r2.member_epoch, topics=None, meta={**TOPICS, "later": later})
    assert r3.assignment == {later.topic_id: frozenset({0, 1})} and r3.member_epoch == r2.member_epoch + 1


def test_assignment_interval_batches_recomputation():
    clock = Clock()
    coord = initialized(ShareGroupCoordinator(assign=everyone_gets_everything, clock=clock,
                                              assignment_interval_ms=1000))
    r1 = hb(coord, "m1", 0)
    r2 = hb(coord, "m2", 0)  # within the interval: m2 waits for the next recomputation
    assert r2.assignment == {} and r2.member_epoch == r1.member_epoch
    clock.now = 1000
    r2b = hb(coord, "m2", r2.member_epoch, topics=None)
    assert r2b.assignment == {T1.topic_id: frozenset({0, 1, 2})}


def test_delete_group_rules(coord):
    assert coord.delete_group("nope") == ErrorCode.group_id_not_found
    hb(coord, "m1", 0)
    assert coord.delete_group("g") == ErrorCode.non_empty_group
    hb(coord, "m1", -1, topics=None)
    assert coord.delete_group("g") == ErrorCode.none and "g" not in coord.groups


def test_simple_assignor_plugin_through_adapter():
    from kshare_sidecar.assignors.simple import SimpleAssignor
    from kshare_sidecar.group.assign import assign_with

    coord = initialized(ShareGroupCoordinator(assign=assign_with(SimpleAssignor()), clock=Clock()))
    results = {m: hb(coord, m, 0, topics=("t1", "t2")) for m in ("a", "b", "c", "d")}
    final = {m: hb(coord, m, results[m].member_epoch, topics=None) for m in results}
    target = coord.groups["g"].target
    covered = {(t, p) for a in target.values() for t, ps in a.items() for p in ps}
    assert covered == {(T1.topic_id, p) for p in range(3)} | {(T2.topic_id, 0)}
    assert all(r.error == ErrorCode.none for r in final.values())


def test_a_member_that_drops_a_topic_nobody_else_subscribes_to_stops_getting_it():
    """Found by the parity harness: Kafka's SimpleAssignor leaves such a topic in the member's
    target; the coordinator filters the member's assignment by its subscription, as Kafka's
    ShareGroupAssignmentBuilder does."""
    from kshare_sidecar.assignors.simple import SimpleAssignor
    from kshare_sidecar.group.assign import assign_with

    coord = initialized(ShareGroupCoordinator(assign=assign_with(SimpleAssignor()), clock=Clock(), max_size=5,
                                              session_timeout_ms=45000, heartbeat_interval_ms=5000))
    hb(coord, "c", 0, topics=("t2",))
    ra = hb(coord, "a", 0, topics=("t1",))
    hb(coord, "b", 0, topics=("t2", "missing"))
    assert ra.assignment == {T1.topic_id: frozenset({0, 1, 2})}
    ra = hb(coord, "a", 0, topics=("t2",))
    assert ra.assignment == {T2.topic_id: frozenset({0})}
    assert coord.groups["g"].members["a"].assignment == {T2.topic_id: frozenset({0})}
