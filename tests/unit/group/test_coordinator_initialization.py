"""Share-partition initialization and the epochs it costs (the difference the long
differential run found). Kafka 4.3.1 assigns a share-partition only once its state is initialized
(InitializeShareGroupState), which it starts after answering the heartbeat that subscribed to it;
the next heartbeat then bumps the group epoch ("initialized partitions pending assignment"). The
expected epochs below are those a Kafka 4.3.1 broker logged for the same requests
("Bumped group epoch to …", "new assignment state: epoch=…, previousEpoch=…").
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kshare_sidecar.assignors.simple import SimpleAssignor
from kshare_sidecar.group.assign import assign_with
from kshare_sidecar.group.coordinator import ShareGroupCoordinator
from kshare_sidecar.backend.types import TopicInfo

PA = TopicInfo("pa", uuid.UUID(int=0xA), 3)
PB = TopicInfo("pb", uuid.UUID(int=0xB), 1)
TOPICS = {"pa": PA, "pb": PB}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def coordinator(interval_ms: int = 1000) -> ShareGroupCoordinator:
    return ShareGroupCoordinator(assign=assign_with(SimpleAssignor()), clock=Clock(), assignment_interval_ms=interval_ms,
                                 default_assignor="simple")


def hb(coord, member, epoch, topics=None, *, init=True, group="g", meta=TOPICS):
    """One heartbeat; with ``init`` the initialization it asks for completes at once (GroupService)."""
    r = coord.heartbeat(group, member, epoch, rack_id=None, topics=meta,
                        subscribed_topic_names=list(topics) if topics is not None else None)
    if init:
        coord.initialized(group, r.initialize)
    return r


def later(coord, ms=1000):
    coord.clock.now += ms


def test_the_long_runs_replay_gets_kafkas_epochs():
    """Join c; Join a; rejoin a; heartbeat with a's previous epoch — Kafka 4.3.1 logged
    c 0→2→3, a 0→4→5 (c 3→4→5), and accepted the heartbeat with epoch 4; kshare used to move
    a 0→3 directly and fence it."""
    coord = coordinator()
    group = lambda: coord.groups["g"]  # noqa: E731
    c = hb(coord, "c", 0, ("pb",))
    assert (c.member_epoch, c.assignment, group().group_epoch) == (2, {}, 2)  # a new group is at 1
    assert c.initialize == {PB.topic_id: frozenset({0})}
    c = hb(coord, "c", 2)  # initialized: pending assignment bumps the epoch; the interval holds it
    assert (c.member_epoch, group().group_epoch, group().assignment_epoch) == (2, 3, 2)
    later(coord)
    c = hb(coord, "c", 2)
    assert (c.member_epoch, c.assignment) == (3, {PB.topic_id: frozenset({0})})
    later(coord)
    a = hb(coord, "a", 0, ("pa",))
    assert (a.member_epoch, a.assignment, group().group_epoch) == (4, {}, 4)
    assert hb(coord, "a", 4).member_epoch == 4  # initialized now: group epoch 5, assignment waits
    assert group().group_epoch == 5
    assert hb(coord, "c", 3).member_epoch == 4
    later(coord)
    a = hb(coord, "a", 4)
    assert (a.member_epoch, a.assignment) == (5, {PA.topic_id: frozenset({0, 1, 2})})
    assert (group().members["a"].previous_epoch, hb(coord, "c", 4).member_epoch) == (4, 5)
    rejoin = hb(coord, "a", 0, ("pa",))
    assert (rejoin.member_epoch, rejoin.assignment, group().group_epoch) == (5, {PA.topic_id: frozenset({0, 1, 2})}, 5)
    stale = hb(coord, "a", 4)
    assert (stale.error, stale.member_epoch) == (ErrorCode.none, 5)
    assert hb(coord, "a", 3).error == ErrorCode.fenced_member_epoch


def test_without_an_assignment_interval_the_second_heartbeat_assigns():
    coord = coordinator(interval_ms=0)
    j = hb(coord, "m", 0, ("pa", "pb"))
    assert (j.member_epoch, j.assignment) == (2, {})
    r = hb(coord, "m", 2)
    assert (r.member_epoch, r.assignment) == (3, {PA.topic_id: frozenset({0, 1, 2}), PB.topic_id: frozenset({0})})
    assert hb(coord, "m", 3).assignment is None and coord.groups["g"].group_epoch == 3  # no more bumps


def test_partitions_being_initialized_are_not_asked_for_twice_and_a_failure_is_retried():
    coord = coordinator(interval_ms=0)
    j = hb(coord, "m", 0, ("pb",), init=False)
    assert j.initialize == {PB.topic_id: frozenset({0})}
    assert hb(coord, "n", 0, ("pb",), init=False).initialize == {}  # in flight
    coord.initialization_failed("g", j.initialize)
    again = hb(coord, "m", 2, init=False)
    assert again.initialize == {PB.topic_id: frozenset({0})} and again.assignment is None
    coord.initialized("g", again.initialize)
    assert hb(coord, "m", again.member_epoch).assignment == {PB.topic_id: frozenset({0})}


def test_partitions_initialized_by_an_offsets_reset_are_assigned_at_the_join():
    """AlterShareGroupOffsets initializes the partitions it names (Kafka: initializing, then
    initialized); a member subscribing gets those at once and the others after initialization."""
    coord = coordinator(interval_ms=0)
    coord.ensure_group("g").create()
    coord.initialized("g", {PA.topic_id: {1}})
    assert coord.groups["g"].group_epoch == 1  # a reset does not bump
    j = hb(coord, "m", 0, ("pa",))
    assert (j.member_epoch, j.assignment) == (2, {PA.topic_id: frozenset({1})})
    assert j.initialize == {PA.topic_id: frozenset({0, 2})}
    r = hb(coord, "m", 2)
    assert (r.member_epoch, r.assignment) == (3, {PA.topic_id: frozenset({0, 1, 2})})


def test_deleted_state_is_initialized_again_when_subscribed():
    coord = coordinator(interval_ms=0)
    hb(coord, "m", 0, ("pb",))
    hb(coord, "m", 2)
    assert hb(coord, "m", -1).error == ErrorCode.none
    coord.forget_initialized("g", PB.topic_id)  # DeleteShareGroupOffsets
    j = hb(coord, "m", 0, ("pb",))
    assert j.assignment == {} and j.initialize == {PB.topic_id: frozenset({0})}


def test_a_leave_bumps_once_even_when_it_unsubscribes_a_topic():
    coord = coordinator(interval_ms=0)
    hb(coord, "m", 0, ("pb",))
    hb(coord, "n", 0, ("pa",))
    hb(coord, "m", coord.groups["g"].members["m"].member_epoch)
    before = coord.groups["g"].group_epoch
    assert hb(coord, "n", -1).member_epoch == -1
    assert coord.groups["g"].group_epoch == before + 1
    r = hb(coord, "m", coord.groups["g"].members["m"].member_epoch)
    assert coord.groups["g"].group_epoch == before + 1 and r.member_epoch == before + 1


def test_a_group_that_does_not_exist_and_a_config_holder_answer_group_id_not_found():
    coord = coordinator()
    assert hb(coord, "m", 3).error == ErrorCode.group_id_not_found
    assert hb(coord, "m", -1).error == ErrorCode.group_id_not_found
    coord.ensure_group("g").configs["share.session.timeout.ms"] = "30000"  # configs set before the group
    assert hb(coord, "m", 3).error == ErrorCode.group_id_not_found
    j = hb(coord, "m", 0, ("pb",))
    assert j.member_epoch == 2 and coord.groups["g"].configs == {"share.session.timeout.ms": "30000"}


def test_a_restored_group_keeps_what_it_had_initialized():
    coord = coordinator(interval_ms=0)
    coord.restore_group("g", 7, {}, initialized={PB.topic_id: (0,)})
    j = hb(coord, "m", 0, ("pb",))
    assert (j.member_epoch, j.assignment, j.initialize) == (8, {PB.topic_id: frozenset({0})}, {})


def test_the_group_assignment_interval_config_is_honoured():
    coord = coordinator(interval_ms=0)
    coord.ensure_group("g").configs["share.assignment.interval.ms"] = "5000"
    hb(coord, "m", 0, ("pb",))
    assert hb(coord, "m", 2).member_epoch == 2  # pending, but within the group's interval
    later(coord, 5000)
    assert hb(coord, "m", 2).member_epoch == 3


ops = st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from("abc"), st.sampled_from([("pa",), ("pb",), ("pa", "pb"), ("pb", "x")])),
    st.tuples(st.just("hb"), st.sampled_from("abc"), st.sampled_from(["current", "previous"])),
    st.tuples(st.just("leave"), st.sampled_from("abc"), st.none()),
    st.tuples(st.just("init"), st.booleans(), st.none()),
    st.tuples(st.just("wait"), st.sampled_from([0, 400, 1000]), st.none()),
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(ops=ops)
def test_epoch_and_initialization_invariants(ops):
    """Whatever happens: only initialized partitions are ever assigned; a heartbeat moves the
    group epoch by at most one; a member is never ahead of the assignment epoch, which is never
    ahead of the group epoch; a member's previous epoch is below its epoch; after a heartbeat
    (not a leave) every subscribed partition is initialized or being initialized."""
    coord = coordinator()
    in_flight: list[dict] = []
    for kind, x, y in ops:
        group = coord.groups.get("g")
        before = group.group_epoch if group is not None else 1  # a new group is created at 1
        if kind == "join":
            r = hb(coord, x, 0, y, init=False)
        elif kind == "hb" and group is not None and x in group.members:
            m = group.members[x]
            previous = m.previous_epoch if m.previous_epoch > 0 else m.member_epoch  # 0 would be a join
            r = hb(coord, x, m.member_epoch if y == "current" else previous, init=False)
        elif kind == "leave" and group is not None and x in group.members:
            r = hb(coord, x, -1, init=False)
        elif kind == "init" and in_flight:
            (coord.initialized if x else coord.initialization_failed)("g", in_flight.pop(0))
            continue
        elif kind == "wait":
            later(coord, x)
            continue
        else:
            continue
        if r.initialize:
            in_flight.append(r.initialize)
        group = coord.groups["g"]
        assert group.group_epoch - before <= 1 and r.error == ErrorCode.none
        state = group.share_state
        assert group.assignment_epoch <= group.group_epoch
        for m in group.members.values():
            assert m.previous_epoch < m.member_epoch <= group.assignment_epoch
            for tid, ps in m.assignment.items():
                assert ps <= state.initialized.get(tid, frozenset())
        for target in group.target.values():
            for tid, ps in target.items():
                assert ps <= state.initialized.get(tid, frozenset())
        for name, (tid, n) in group.topics_seen.items() if kind != "leave" else ():
            covered = state.initialized.get(tid, frozenset()) | state.initializing.get(tid, frozenset())
            assert covered == frozenset(range(n))
