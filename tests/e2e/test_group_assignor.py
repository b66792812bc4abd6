"""Per-group assignors (kshare's ``share.assignor`` group config) with unmodified clients:
two share groups on one sidecar (Kafka 3.9 backend), each chose its assignor with confluent-kafka's
AdminClient, three confluent-kafka ShareConsumer processes each on a two-partition topic.

Three members on two partitions tell the built-ins apart: Kafka's SimpleAssignor shares each
partition between ceil(3/2) = 2 members (one member gets both), uniform gives every member exactly
one partition. The test reads ShareGroupDescribe (AssignorName and each member's assignment, with
kshare's kio admin client: confluent-kafka 2.16 has no describe_share_groups; Kafka's
kafka-share-groups.sh, which shows no assignor name, must agree on the assignments) and
checks each assignment has its assignor's shape and is what that assignor computes from it (a
sticky assignor's result is a fixed point). Then the groups switch (one SET to uniform, one DELETE
back to the sidecar default, simple): the next assignment is the new assignor's, computed from the
previous one.
"""

from __future__ import annotations

import itertools
import time

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kshare_sidecar.assignors import AssignmentSpec, MemberSpec, SimpleAssignor, TopicMetadata, UniformAssignor
from kshare_sidecar.cli.kclient import AdminClient as ShareAdmin
from kshare_sidecar.cli.kclient import ClientError
from kshare_sidecar.testing.tools import run_share_groups
from tests.e2e.conftest import Worker
from tests.support import create_topic, unique

pytestmark = pytest.mark.kafka

ASSIGNORS = {"simple": SimpleAssignor, "uniform": UniformAssignor}
PARTITIONS, MEMBERS = 2, 3


def _alter(bootstrap: str, group: str, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.assignor", value or "", incremental_operation=op)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer arrives
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(30)


def _settled(bootstrap: str, group: str, assignor: str, timeout: float = 30):
    """ShareGroupDescribe once the group has all its members on one computed assignment."""
    deadline, last = time.monotonic() + timeout, None
    with ShareAdmin(bootstrap) as admin:
        while time.monotonic() < deadline:
            try:
                last = admin.describe_group(group)
            except ClientError as exc:  # the backend creates __consumer_offsets at the first lookup
                last = exc
                time.sleep(0.5)
                continue
            if (last.assignor_name == assignor and len(last.members) == MEMBERS
                    and last.group_epoch == last.assignment_epoch
                    and all(m.member_epoch == last.assignment_epoch for m in last.members)):
                return last
            time.sleep(0.5)
    raise AssertionError(f"{group} did not settle on {assignor}: {last}")


def _assignment(described) -> tuple[str, dict[str, frozenset[int]]]:
    topic_ids = {tp.topic_id for m in described.members for tp in m.assignment.topic_partitions}
    assert len(topic_ids) == 1, described
    (tid,) = topic_ids
    return str(tid), {m.member_id: frozenset(p for tp in m.assignment.topic_partitions for p in tp.partitions)
                      for m in described.members}


def _computes(name: str, topic_id: str, before: dict[str, frozenset[int]],
              after: dict[str, frozenset[int]]) -> bool:
    """Whether assignor ``name``, given ``before`` as the current assignment, computes ``after``
    for some member order (SimpleAssignor's per-member quotas follow member order, which is the
    order of joins, unknown here)."""
    for order in itertools.permutations(sorted(after)):
        spec = AssignmentSpec(members={m: MemberSpec(frozenset({topic_id}),
                                                     assigned={topic_id: before.get(m, frozenset())})
                                       for m in order},
                              topics={topic_id: TopicMetadata("t", PARTITIONS)})
        again = ASSIGNORS[name]().assign(spec).frozen()
        if {m: again[m].get(topic_id, frozenset()) for m in order} == after:
            return True
    return False


SHAPES = {"simple": ([1, 1, 2], [2, 2]), "uniform": ([1, 1, 1], [1, 2])}


def _shape(assignment: dict[str, frozenset[int]]) -> tuple[list[int], list[int]]:
    """Partitions per member and members per partition, sorted."""
    return (sorted(len(ps) for ps in assignment.values()),
            sorted(sum(p in ps for ps in assignment.values()) for p in range(PARTITIONS)))


def test_two_groups_on_one_sidecar_use_their_own_assignor(sidecar, tmp_path):
    topic = unique("assignor")
    create_topic(sidecar.backend, topic, PARTITIONS)
    groups = {"simple": unique("g-simple"), "uniform": unique("g-uniform")}
    for assignor, group in groups.items():
        _alter(sidecar.bootstrap, group, assignor)
    workers = [Worker(sidecar, group, topic, tmp_path / f"{assignor}-{i}.jsonl", grace_s=120, idle_s=120, max_s=55)
               for assignor, group in groups.items() for i in range(MEMBERS)]
    try:
        described = {group: _settled(sidecar.bootstrap, group, assignor) for assignor, group in groups.items()}
        for assignor, group in groups.items():
            topic_id, assignment = _assignment(described[group])
            # Joins in any order and batching give these shapes (three members, two partitions),
            # and a sticky assignor computes its own result again from it.
            assert _shape(assignment) == SHAPES[assignor], (assignor, assignment)
            assert _computes(assignor, topic_id, assignment, assignment), (assignor, assignment)
        # Kafka's own tool (kafka-share-groups.sh) sees the same assignments; it shows no assignor name.
        tool = run_share_groups(sidecar.bootstrap, "--describe", "--members", *itertools.chain.from_iterable(
            ("--group", g) for g in groups.values()))
        assert tool.returncode == 0, tool.output
        for group in groups.values():
            seen = {row[1]: frozenset(int(p) for p in row[-1].split(":", 1)[1].split(","))
                    for row in (line.split() for line in tool.stdout.splitlines()) if row and row[0] == group}
            assert seen == _assignment(described[group])[1], tool.stdout

        # Changes take effect at each group's next assignment, computed from the current one.
        _alter(sidecar.bootstrap, groups["simple"], "uniform")
        _alter(sidecar.bootstrap, groups["uniform"], None)  # DELETE: back to the sidecar default, simple
        for group, now in ((groups["simple"], "uniform"), (groups["uniform"], "simple")):
            after = _settled(sidecar.bootstrap, group, now)
            assert after.group_epoch > described[group].group_epoch
            topic_id, before = _assignment(described[group])
            _, assignment = _assignment(after)
            assert _computes(now, topic_id, before, assignment), (now, before, assignment)
            if now == "uniform":  # uniform balances exactly: simple's shared partition is split up
                assert _shape(assignment) == SHAPES["uniform"], assignment
    finally:
        for w in workers:
            w.proc.terminate()
        for w in workers:
            w.wait(30)
