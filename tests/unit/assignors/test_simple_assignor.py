"""The built-in ``simple`` assignor computes Kafka 4.3.1's share SimpleAssignor:
balance (desired sharing, per-member counts differing by at most one) before stickiness."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kshare_sidecar.assignors import AssignmentSpec, MemberSpec, SimpleAssignor, TopicMetadata, next_spec


def _spec(members: dict[str, dict[str, set[int]] | None], partitions: dict[str, int],
          subscriptions: dict[str, set[str]] | None = None) -> AssignmentSpec:
    topics = {t: TopicMetadata(t, n) for t, n in partitions.items()}
    subs = subscriptions or {m: set(partitions) for m in members}
    return AssignmentSpec(members={m: MemberSpec(frozenset(subs[m]), assigned={
        t: frozenset(ps) for t, ps in (a or {}).items()}) for m, a in members.items()}, topics=topics)


def _counts(result) -> dict[str, int]:
    return {m: sum(len(ps) for ps in topics.values()) for m, topics in result.members.items()}


def test_two_members_on_three_partitions_split_two_and_one():
    result = SimpleAssignor().assign(_spec({"a": None, "b": None}, {"t": 3}))
    assert sorted(_counts(result).values()) == [1, 2]


def test_a_new_member_beside_a_dead_one_gets_half():
    """A churn case: natively the newcomer got 2 of 4 partitions (kshare's earlier
    hash-based assignor gave it 1)."""
    spec = _spec({"dead": {"t": {0, 1, 2, 3}}, "new": None}, {"t": 4})
    result = SimpleAssignor().assign(spec)
    assert _counts(result) == {"dead": 2, "new": 2}
    assert result.members["dead"]["t"] <= {0, 1, 2, 3}  # the survivor keeps part of what it had


def test_more_members_than_partitions_share_each_partition_evenly():
    result = SimpleAssignor().assign(_spec({m: None for m in "abc"}, {"t": 2}))
    assert sorted(_counts(result).values()) == [1, 1, 2]  # sharing ceil(3/2)=2 → 4 assignments
    assert all(len(result.members_of("t", p)) == 2 for p in range(2))


def test_homogeneous_pools_partitions_across_topics():
    result = SimpleAssignor().assign(_spec({"a": None, "b": None}, {"t1": 1, "t2": 1}))
    assert _counts(result) == {"a": 1, "b": 1}


def test_heterogeneous_assigns_each_topic_to_its_subscribers():
    spec = _spec({"a": None, "b": None, "c": None}, {"t1": 2, "t2": 3},
                 {"a": {"t1"}, "b": {"t1", "t2"}, "c": {"t2"}})
    result = SimpleAssignor().assign(spec)
    assert set(result.members["a"]) <= {"t1"} and set(result.members["c"]) <= {"t2"}
    assert len(result.members["a"].get("t1", ())) >= 1
    for t, n in (("t1", 2), ("t2", 3)):
        assert all(len(result.members_of(t, p)) == 1 for p in range(n))


@st.composite
def groups(draw):
    n_parts = draw(st.integers(1, 12))
    members = sorted(draw(st.sets(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=10)))
    current = {m: {"t": set(draw(st.sets(st.integers(0, n_parts - 1), max_size=4)))} for m in members}
    return n_parts, members, current


@settings(max_examples=300, deadline=None)
@given(group=groups())
def test_balance_sharing_and_stickiness_as_kafka_defines_them(group):
    """A naive reading of Kafka's rules: at most S = ceil(M/P) members on a partition and at least
    one; member counts differ by at most one; a stable assignment is a fixed point."""
    n_parts, members, current = group
    spec = _spec(current, {"t": n_parts})
    result = SimpleAssignor().assign(spec)
    sharing = math.ceil(len(members) / n_parts)
    # Kafka's builder hands out with one cursor and stops when the only members still short of
    # their count already hold the partition, so a partition may end below S (never above, never 0)
    assert all(1 <= len(result.members_of("t", p)) <= sharing for p in range(n_parts))
    counts = _counts(result)
    assert sum(counts.values()) <= sharing * n_parts
    assert max(counts.values()) - min(counts.values()) <= 1
    # a stable assignment stays as it is
    assert SimpleAssignor().assign(next_spec(spec, result)).members == result.members


@settings(max_examples=200, deadline=None)
@given(n_parts=st.integers(2, 12), n_members=st.integers(1, 11))
def test_a_joining_member_moves_only_what_it_takes(n_parts, n_members):
    """Stickiness: when a member joins a balanced group (members ≤ partitions), every old member
    keeps as many of its partitions as its new count allows — partitions move only to the joiner."""
    members = [f"m{i:02d}" for i in range(min(n_members, n_parts - 1))]
    before = SimpleAssignor().assign(_spec({m: None for m in members}, {"t": n_parts}))
    grown = next_spec(_spec({**{m: None for m in members}, "zz-new": None}, {"t": n_parts}), before)
    after = SimpleAssignor().assign(grown)
    for m in members:
        old, new = before.members[m].get("t", set()), after.members[m].get("t", set())
        assert len(old & new) == min(len(old), len(new)), (m, old, new)
