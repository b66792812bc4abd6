"""The sticky assignment of state partitions to sidecars, against a naive model:
every partition owned exactly once, balanced to within one, and nothing moves that the balance
does not need — checked over random memberships and over join / leave sequences."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kshare_sidecar.cluster.assign import (
    ClusterMap,
    CodecError,
    MemberInfo,
    cluster_map,
    decode_map,
    decode_member,
    duplicate_node_ids,
    encode_map,
    encode_member,
    sticky_assign,
)


def _member(node: int, owned: dict[int, int] | None = None) -> MemberInfo:
    return MemberInfo(node, {"PLAINTEXT": ("127.0.0.1", 9000 + node)}, dict(owned or {}))


def _check_partition_of(assignment: dict[str, list[int]], partitions: list[int]) -> None:
    flat = [p for ps in assignment.values() for p in ps]
    assert sorted(flat) == sorted(partitions), "every partition exactly once"
    counts = [len(ps) for ps in assignment.values()]
    assert max(counts) - min(counts) <= 1, "balanced to within one"


def test_first_assignment_spreads_everything():
    members = {f"m{i}": _member(i) for i in range(3)}
    out = sticky_assign(members, list(range(8)))
    _check_partition_of(out, list(range(8)))


def test_a_joining_member_takes_only_its_share():
    before = {"a": _member(1, {p: 1 for p in range(4)}), "b": _member(2, {p: 1 for p in range(4, 8)})}
    after = sticky_assign({**before, "c": _member(3)}, list(range(8)))
    _check_partition_of(after, list(range(8)))
    assert set(after["a"]) <= set(range(4)) and set(after["b"]) <= set(range(4, 8))
    assert len(after["c"]) == 2  # 8 over 3: the newcomer takes 2, each other gives 1 at most
    assert len(after["a"]) + len(after["b"]) == 6


def test_a_leaving_members_partitions_go_to_the_rest_and_nothing_else_moves():
    members = {"a": _member(1, {0: 1, 1: 1, 2: 1}), "b": _member(2, {3: 1, 4: 1, 5: 1}),
               "c": _member(3, {6: 1, 7: 1})}
    del members["b"]
    out = sticky_assign(members, list(range(8)))
    _check_partition_of(out, list(range(8)))
    assert {0, 1, 2} <= set(out["a"]) and {6, 7} <= set(out["c"])


def test_a_stale_claim_loses_to_the_higher_owner_epoch():
    # b took partition 0 over (epoch 5) while a, paused, still reports it at epoch 2
    out = sticky_assign({"a": _member(1, {0: 2, 1: 2}), "b": _member(2, {0: 5})}, [0, 1])
    assert out == {"a": [1], "b": [0]}


def test_claims_of_missing_partitions_are_dropped_and_no_members_means_nothing():
    assert sticky_assign({"a": _member(1, {9: 3})}, [0, 1]) == {"a": [0, 1]}
    assert sticky_assign({}, [0, 1]) == {}


def test_more_members_than_partitions():
    out = sticky_assign({f"m{i}": _member(i) for i in range(5)}, [0, 1])
    _check_partition_of(out, [0, 1])
    assert sum(1 for ps in out.values() if not ps) == 3


@st.composite
def memberships(draw):
    n_parts = draw(st.integers(1, 24))
    n_members = draw(st.integers(1, 8))
    members = {}
    for i in range(n_members):
        owned = draw(st.dictionaries(st.integers(0, n_parts + 2), st.integers(0, 5), max_size=n_parts))
        members[f"m{i:02d}"] = _member(i, owned)
    return members, list(range(n_parts))


@settings(max_examples=300, deadline=None)
@given(memberships())
def test_properties_against_a_naive_model(case):
    members, partitions = case
    out = sticky_assign(members, partitions)
    assert set(out) == set(members)
    _check_partition_of(out, partitions)
    assert out == sticky_assign(dict(reversed(list(members.items()))), partitions), "deterministic"
    # naive model of stickiness: the uncontested claim a member keeps is at least min(claims, floor quota)
    floor = len(partitions) // len(members)
    for member, info in members.items():
        mine = {p for p, e in info.owned.items() if p in partitions and all(
            other == member or p not in o.owned or o.owned[p] < e or (o.owned[p] == e and other > member)
            for other, o in members.items())}
        assert len(mine & set(out[member])) >= min(len(mine), floor)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 32), st.lists(st.tuples(st.booleans(), st.integers(0, 7)), min_size=1, max_size=20))
def test_join_leave_sequences_move_only_what_the_balance_needs(n_parts, steps):
    """Each rebalance after a join or leave moves exactly the partitions the new quotas force."""
    partitions = list(range(n_parts))
    live: dict[str, MemberInfo] = {"m0": _member(0)}
    held = sticky_assign(live, partitions)
    for join, idx in steps:
        name = f"m{idx}"
        if join and name not in live:
            live[name] = _member(idx)
        elif not join and name in live and len(live) > 1:
            del live[name]
        else:
            continue
        live = {m: MemberInfo(i.node_id, i.endpoints, {p: 1 for p in held.get(m, [])}) for m, i in live.items()}
        new = sticky_assign(live, partitions)
        _check_partition_of(new, partitions)
        moved = sum(1 for m, ps in new.items() for p in ps if p not in held.get(m, []))
        # the naive minimum: what leaving members held, plus what live members hold beyond their
        # quota when the larger quotas go to the most loaded
        orphaned = sum(len(ps) for m, ps in held.items() if m not in live)
        base, extra = divmod(n_parts, len(live))
        loads = sorted((len(held.get(m, [])) for m in live), reverse=True)
        excess = sum(max(0, load - (base + (1 if i < extra else 0))) for i, load in enumerate(loads))
        assert moved == orphaned + excess, (moved, orphaned, excess)
        held = new


def test_codecs_round_trip_and_reject_garbage():
    info = _member(7, {1: 3, 4: 9})
    assert decode_member(encode_member(info)) == info
    m = cluster_map(3, {"a": info, "b": _member(8)}, {"a": [1, 4], "b": [0]})
    assert m == ClusterMap(3, {7: info.endpoints, 8: _member(8).endpoints}, {1: 7, 4: 7, 0: 8},
                           claims={1: (7, 3), 4: (7, 9)})
    assert decode_map(encode_map(m)) == m
    # a map from an older build has no claims: every takeover is then immediate, as before
    older = orjson.loads(encode_map(m))
    del older["claims"]
    assert decode_map(orjson.dumps(older)).claims == {}


def test_claims_name_the_holder_at_the_highest_epoch_so_a_planned_move_waits_for_it():
    # b lost partition 2 without noticing (stale claim at epoch 4); a holds it at epoch 6
    m = cluster_map(5, {"a": _member(1, {2: 6}), "b": _member(2, {2: 4, 3: 1}), "c": _member(3)},
                    {"a": [], "b": [3], "c": [2]})
    assert m.claims == {2: (1, 6), 3: (2, 1)}
    for raw in (b"", b"[]", b'{"v": 2}', b'{"v": 1, "node": "x"}', b"\xff"):
        with pytest.raises(CodecError):
            decode_member(raw)
        with pytest.raises(CodecError):
            decode_map(raw)


def test_duplicate_node_ids_are_reported():
    assert duplicate_node_ids({"a": _member(1), "b": _member(1), "c": _member(2)}) == {1: ["a", "b"]}
