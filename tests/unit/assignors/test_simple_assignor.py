"""SimpleAssignor: the KIP-932 example table, reproduced step by step with an injected hash."""

from __future__ import annotations

from kshare_sidecar.assignors import (
    AssignmentSpec,
    GroupAssignment,
    MemberSpec,
    SimpleAssignor,
    TopicMetadata,
    next_spec,
)

T1, T2 = "t1-id", "t2-id"


def kip_hash(member_id: str) -> int:
    """The table's "hash i" for member Mi: Mi lands on partition (i - 1) mod count."""
    return int(member_id[1:]) - 1


def step(previous: GroupAssignment | None, subs: dict[str, set[str]], topics: dict[str, int]) -> GroupAssignment:
    frozen = previous.frozen() if previous else {}
    spec = AssignmentSpec(
        members={m: MemberSpec(frozenset(t), assigned=frozen.get(m, {})) for m, t in subs.items()},
        topics={t: TopicMetadata(name=t, partition_count=n) for t, n in topics.items()},
    )
    return SimpleAssignor(hash_fn=kip_hash).assign(spec)


def table(a: GroupAssignment) -> dict[str, set[str]]:
    names = {T1: "T1", T2: "T2"}
    return {m: {f"{names[t]}:{p}" for t, ps in tp.items() for p in ps} for m, tp in a.members.items()}


def test_kip932_example_table():
    a = step(None, {"M1": {T1}}, {T1: 1})
    assert table(a) == {"M1": {"T1:0"}}

    a = step(a, {"M1": {T1}, "M2": {T1}}, {T1: 1})
    assert table(a) == {"M1": {"T1:0"}, "M2": {"T1:0"}}

    # Add 3 partitions to T1: M2 moves to T1:1 (hash), T1:2 -> M1 and T1:3 -> M2 round-robin.
    a = step(a, {"M1": {T1}, "M2": {T1}}, {T1: 4})
    assert table(a) == {"M1": {"T1:0", "T1:2"}, "M2": {"T1:1", "T1:3"}}

    # M3 joins: hashes onto T1:2, so M1's round-robin T1:2 is revoked; T1:3 stays with M2.
    a = step(a, {"M1": {T1}, "M2": {T1}, "M3": {T1}}, {T1: 4})
    assert table(a) == {"M1": {"T1:0"}, "M2": {"T1:1", "T1:3"}, "M3": {"T1:2"}}

    a = step(a, {f"M{i}": {T1} for i in range(1, 5)}, {T1: 4})
    assert table(a) == {"M1": {"T1:0"}, "M2": {"T1:1"}, "M3": {"T1:2"}, "M4": {"T1:3"}}

    a = step(a, {f"M{i}": {T1} for i in range(1, 9)}, {T1: 4})
    assert table(a) == {f"M{i}": {f"T1:{(i - 1) % 4}"} for i in range(1, 9)}

    subs = {f"M{i}": {T1} for i in range(1, 9)}
    subs["M1"] = {T1, T2}
    a = step(a, subs, {T1: 4, T2: 2})
    expected = {f"M{i}": {f"T1:{(i - 1) % 4}"} for i in range(1, 9)}
    expected["M1"] = {"T1:0", "T2:0", "T2:1"}
    assert table(a) == expected

    a = step(a, {"M2": {T1}}, {T1: 4, T2: 2})
    assert table(a) == {"M2": {"T1:0", "T1:1", "T1:2", "T1:3"}}


def test_recomputation_is_stable():
    spec = AssignmentSpec(
        members={f"member-{i}": MemberSpec(frozenset({T1, T2})) for i in range(5)},
        topics={T1: TopicMetadata("a", 12), T2: TopicMetadata("b", 3)},
    )
    first = SimpleAssignor().assign(spec)
    again = SimpleAssignor().assign(next_spec(spec, first))
    assert again.members == first.members
    assert SimpleAssignor().assign(next_spec(spec, again)).members == first.members


def test_default_hash_is_process_independent():
    from kshare_sidecar.assignors import stable_member_hash

    # A fixed value: Python's salted hash() would differ between runs.
    assert stable_member_hash("member-1") == stable_member_hash("member-1")
    assert stable_member_hash("member-1") == int.from_bytes(
        __import__("hashlib").blake2b(b"member-1", digest_size=8).digest(), "big")


def test_unknown_topics_and_empty_groups():
    spec = AssignmentSpec(members={"a": MemberSpec(frozenset({"missing"}))}, topics={T1: TopicMetadata("x", 2)})
    assert SimpleAssignor().assign(spec).members == {"a": {}}
    assert SimpleAssignor().assign(AssignmentSpec(members={}, topics={T1: TopicMetadata("x", 2)})).members == {}
