"""A share group persisted and restored (group/persisted.py), pure: a coordinator move — the group
written as GroupService writes it, through the codec, and restored into a fresh coordinator — is
invisible to the members. Property: the same heartbeats against a coordinator that never moves
(the naive model) and one that moves at random points give the same errors, member epochs and
assignments; the restored members get fresh session timers (Kafka's onLoaded)."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kshare_sidecar.assignors.simple import SimpleAssignor
from kshare_sidecar.group import persisted
from kshare_sidecar.group.assign import assign_with
from kshare_sidecar.group.coordinator import ShareGroupCoordinator
from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.persist import codec
from kshare_sidecar.persist.records import GroupRecord

T1 = TopicInfo("t1", uuid.UUID(int=1), 3)
T2 = TopicInfo("t2", uuid.UUID(int=2), 2)
TOPICS = {"t1": T1, "t2": T2}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def coordinator(clock: Clock) -> ShareGroupCoordinator:
    return ShareGroupCoordinator(assign=assign_with(SimpleAssignor()), clock=clock, session_timeout_ms=45_000)


def stored(coord: ShareGroupCoordinator, group_id: str = "g") -> tuple[GroupRecord, list]:
    """The group's records as GroupService writes them, through the codec (as a replay reads them)."""
    group = coord.groups[group_id]
    record = codec.decode(*codec.encode(codec.KIND_GROUP, group_id, persisted.group_record(coord, group)))[2]
    members = [codec.decode(*codec.encode(codec.KIND_MEMBER, (group_id, m.member_id),
                                          persisted.member_record(group, m)))[2] for m in group.members.values()]
    return record, members


def moved(coord: ShareGroupCoordinator, clock: Clock) -> ShareGroupCoordinator:
    """A new coordinator of the group, restored from what the old one persisted."""
    fresh = coordinator(clock)
    for group_id in coord.groups:
        record, members = stored(coord, group_id)
        persisted.restore(fresh, record, members)
    return fresh


def heartbeat(coord, member, epoch, topics):
    r = coord.heartbeat("g", member, epoch, rack_id=None, topics=TOPICS, client_id="c", client_host="h",
                        subscribed_topic_names=topics)
    coord.initialized("g", r.initialize)  # GroupService initializes them before answering
    return r


MEMBERS = ("a", "b", "c")
steps = st.lists(st.tuples(st.sampled_from(["join", "beat", "full", "subscribe", "leave", "stale", "move"]),
                           st.sampled_from(MEMBERS), st.sampled_from([["t1"], ["t2"], ["t1", "t2"]])),
                 min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(steps=steps)
def test_a_coordinator_move_is_invisible_to_the_members(steps):
    clock = Clock()
    steady, moving = coordinator(clock), coordinator(clock)
    epochs: dict[str, int] = {}  # what each member was last told
    for op, member, topics in steps:
        if op == "move":
            moving = moved(moving, clock)
            continue
        if op == "join":
            args = (member, 0, topics)
        elif op == "leave":
            args = (member, -1, None)
        elif op == "stale":  # a retry with the epoch before the last (Kafka accepts the previous one)
            args = (member, max(epochs.get(member, 0) - 1, 0), None)
        else:
            args = (member, epochs.get(member, 0), topics if op in ("full", "subscribe") else None)
            if args[1] == 0 and args[2] is None:
                args = (member, 0, topics)
        a, b = heartbeat(steady, *args), heartbeat(moving, *args)
        assert (a.error, a.member_epoch) == (b.error, b.member_epoch), (op, member, a, b)
        if a.error == ErrorCode.none:
            epochs[member] = a.member_epoch
            if a.member_epoch == -1:
                epochs.pop(member)
        ga, gb = steady.groups.get("g"), moving.groups.get("g")
        assert (ga is None) == (gb is None)
        if ga is not None and gb is not None:
            assert (ga.group_epoch, ga.assignment_epoch, ga.target) == (gb.group_epoch, gb.assignment_epoch, gb.target)
            assert {m: (x.member_epoch, x.previous_epoch, x.assignment, x.subscribed) for m, x in ga.members.items()} \
                == {m: (x.member_epoch, x.previous_epoch, x.assignment, x.subscribed) for m, x in gb.members.items()}
        if b.assignment is not None and a.assignment is not None:
            assert a.assignment == b.assignment
        if b.error == ErrorCode.none and b.member_epoch != -1:  # resent after a move, never different
            assert moving.groups["g"].members[member].assignment == steady.groups["g"].members[member].assignment


def test_restored_members_get_a_fresh_session_timeout_and_the_next_answer_carries_the_assignment():
    clock = Clock()
    coord = coordinator(clock)
    join = heartbeat(coord, "a", 0, ["t1"])
    settled = heartbeat(coord, "a", join.member_epoch, None)
    assert settled.assignment == {T1.topic_id: frozenset({0, 1, 2})}
    assert heartbeat(coord, "a", settled.member_epoch, None).assignment is None  # unchanged: not sent
    clock.now += 40_000  # 5 s before the member's session would end at the old coordinator
    fresh = moved(coord, clock)
    assert fresh.groups["g"].members["a"].deadline_ms == clock.now + 45_000
    clock.now += 44_000
    assert fresh.expire_members() == []
    again = heartbeat(fresh, "a", settled.member_epoch, None)
    assert (again.error, again.member_epoch) == (ErrorCode.none, settled.member_epoch)
    assert again.assignment == {T1.topic_id: frozenset({0, 1, 2})}  # the client may have missed it
    clock.now += 45_001
    assert fresh.expire_members() == [("g", "a")]


def test_a_group_record_of_an_older_build_restores_the_group_without_members():
    clock = Clock()
    coord = coordinator(clock)
    old = GroupRecord("g", group_epoch=7, initialized={str(T1.topic_id): (0, 1, 2)},
                      configs={"share.session.timeout.ms": "30000"})
    persisted.restore(coord, old)
    group = coord.groups["g"]
    assert (group.group_epoch, group.assignment_epoch, group.members, group.assignor) == (7, 7, {}, None)
    assert heartbeat(coord, "a", 3, None).error == ErrorCode.unknown_member_id  # it rejoins
    join = heartbeat(coord, "a", 0, ["t1"])
    assert join.error == ErrorCode.none and not join.initialize and join.member_epoch == 8
