"""Sticky assignment of state partitions to sidecars, and what the sidecars tell each other.

The sidecars of one cluster are members of one consumer group on the backend, subscribed to
the state topic; the group leader runs :func:`sticky_assign` over the members' metadata. Each
member says which state partitions it holds now (with the owner epoch it holds them at), so the
assignment keeps every partition where it is unless the balance needs it elsewhere: a joining
sidecar takes only its share, a leaving one's partitions are spread over the rest, and nothing
else moves (the point of a sticky/cooperative assignment: every move is a handover, with a
short outage of the partitions it moves).

The leader also hands every member the whole map (each live sidecar's endpoints and each state
partition's owner) in the assignment's user data, so every sidecar can answer Metadata and
FindCoordinator for the whole cluster without asking anyone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

VERSION = 1

#: listener name -> (host, port)
Endpoints = dict[str, tuple[str, int]]


class CodecError(ValueError):
    """Member metadata or assignment user data this version does not understand."""


@dataclass(frozen=True)
class MemberInfo:
    """What one sidecar tells the group leader when it joins."""

    node_id: int
    endpoints: Endpoints
    #: state partition -> the owner epoch this sidecar holds it at (the partitions it serves now)
    owned: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterMap:
    """What the leader hands back to every member: who is alive and who owns what."""

    generation: int
    nodes: dict[int, Endpoints]
    owners: dict[int, int]  # state partition -> node id
    #: state partition -> (node id, owner epoch): who of this generation's members held it when it
    #: was assigned. A partition given to another member is a planned move: its new owner waits
    #: for the holder's handover (cluster/membership.py) before fencing it. Empty from older builds.
    claims: dict[int, tuple[int, int]] = field(default_factory=dict)


def encode_member(info: MemberInfo) -> bytes:
    return orjson.dumps({"v": VERSION, "node": info.node_id,
                         "ep": {k: [h, p] for k, (h, p) in info.endpoints.items()},
                         "owned": {str(p): e for p, e in info.owned.items()}})


def decode_member(raw: bytes) -> MemberInfo:
    try:
        data = orjson.loads(raw)
        if data.get("v") != VERSION:
            raise CodecError(f"member metadata version {data.get('v')!r}, expected {VERSION}")
        return MemberInfo(int(data["node"]), {str(k): (str(h), int(p)) for k, (h, p) in data["ep"].items()},
                          {int(p): int(e) for p, e in data.get("owned", {}).items()})
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, CodecError):
            raise
        raise CodecError(f"member metadata not understood: {exc!r}") from None


def encode_map(m: ClusterMap) -> bytes:
    return orjson.dumps({"v": VERSION, "gen": m.generation,
                         "nodes": {str(n): {k: [h, p] for k, (h, p) in ep.items()} for n, ep in m.nodes.items()},
                         "owners": {str(p): n for p, n in m.owners.items()},
                         "claims": {str(p): [n, e] for p, (n, e) in m.claims.items()}})


def decode_map(raw: bytes) -> ClusterMap:
    try:
        data = orjson.loads(raw)
        if data.get("v") != VERSION:
            raise CodecError(f"assignment version {data.get('v')!r}, expected {VERSION}")
        return ClusterMap(int(data["gen"]),
                          {int(n): {str(k): (str(h), int(p)) for k, (h, p) in ep.items()}
                           for n, ep in data["nodes"].items()},
                          {int(p): int(n) for p, n in data["owners"].items()},
                          {int(p): (int(n), int(e)) for p, (n, e) in data.get("claims", {}).items()})
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, CodecError):
            raise
        raise CodecError(f"assignment not understood: {exc!r}") from None


def sticky_assign(members: Mapping[str, MemberInfo], partitions: Sequence[int]) -> dict[str, list[int]]:
    """Every partition to exactly one member, counts differing by at most one, and each member
    keeping as many of the partitions it holds as its quota allows.

    A partition claimed by two members (a stale claim: one of them lost it without noticing
    yet) stays with the claim at the higher owner epoch — the one the state topic says owns
    it; claims of partitions that do not exist are dropped. Deterministic: the same input
    always gives the same output (members sorted by id)."""
    if not members:
        return {}
    valid = set(partitions)
    order = sorted(members)
    claims: dict[int, tuple[int, str]] = {}  # partition -> (epoch, member)
    for member in order:
        for p, epoch in members[member].owned.items():
            if p in valid and (p not in claims or epoch > claims[p][0]):
                claims[p] = (epoch, member)
    held: dict[str, list[int]] = {m: [] for m in order}
    for p in sorted(claims):
        held[claims[p][1]].append(p)
    n, m = len(valid), len(order)
    base, extra = divmod(n, m)
    # the larger quotas go to the members holding the most now: fewest moves
    by_load = sorted(order, key=lambda mem: (-len(held[mem]), mem))
    quota = {mem: base + (1 if i < extra else 0) for i, mem in enumerate(by_load)}
    out: dict[str, list[int]] = {}
    pool = sorted(valid - set(claims))
    for mem in order:
        keep = held[mem][:quota[mem]]
        pool.extend(held[mem][quota[mem]:])
        out[mem] = keep
    pool.sort()
    for mem in order:
        while len(out[mem]) < quota[mem]:
            out[mem].append(pool.pop(0))
        out[mem].sort()
    return out


def cluster_map(generation: int, members: Mapping[str, MemberInfo],
                assignment: Mapping[str, Sequence[int]]) -> ClusterMap:
    """The map every member gets: live nodes' endpoints, each partition's new owner, and who holds
    it now (the highest owner epoch claimed, as :func:`sticky_assign` decides stale claims)."""
    nodes = {info.node_id: dict(info.endpoints) for info in members.values()}
    owners = {p: members[mem].node_id for mem, ps in assignment.items() for p in ps}
    claims: dict[int, tuple[int, int]] = {}
    for mem in sorted(members):
        for p, epoch in members[mem].owned.items():
            if p in owners and (p not in claims or epoch > claims[p][1]):
                claims[p] = (members[mem].node_id, epoch)
    return ClusterMap(generation, nodes, owners, claims)


def duplicate_node_ids(members: Mapping[str, MemberInfo]) -> dict[int, list[str]]:
    """Node ids claimed by more than one member (a misconfiguration: routing cannot tell them apart)."""
    seen: dict[int, list[str]] = {}
    for mem in sorted(members):
        seen.setdefault(members[mem].node_id, []).append(mem)
    return {n: ms for n, ms in seen.items() if len(ms) > 1}
