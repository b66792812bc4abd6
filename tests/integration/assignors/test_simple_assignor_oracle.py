"""The built-in ``simple`` assignor against Kafka 4.3.1's own ``SimpleAssignor``.

Kafka's class runs in a JVM (``java/SimpleAssignorOracle.java``, compiled against the Kafka 4.3.1
jars the harness downloads) on the same inputs: member ids, subscribed topic names (unknown
topics included), topic ids and partition counts, and current assignments. The outputs must be
identical member by member — which partitions, not only how many — because which partition an
overfilled member gives up follows Java's hash iteration order (see assignors/javaorder.py).
"""

from __future__ import annotations

import random
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kshare_sidecar.assignors.model import AssignmentSpec, MemberSpec, TopicMetadata
from kshare_sidecar.assignors.simple import SimpleAssignor
from kshare_sidecar.testing.maven import kafka_libs

ORACLE = Path(__file__).with_name("java") / "SimpleAssignorOracle.java"
NAMES = ["orders", "events", "t2", "missing"]  # "missing" never exists


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    javac = shutil.which("javac")
    if javac is None:
        pytest.fail("javac not found: install a Java 17+ JDK")
    libs = kafka_libs("4.3.1")
    out = tmp_path_factory.mktemp("oracle")
    subprocess.run([javac, "-cp", f"{libs}/*", "-d", str(out), str(ORACLE)], check=True)

    def run(cases: list[AssignmentSpec]) -> list[dict[str, dict[str, set[int]]]]:
        lines = []
        for spec in cases:
            for tid, meta in spec.topics.items():
                lines.append(f"T {meta.name} {uuid.UUID(tid).hex} {meta.partition_count}")
            for mid, m in spec.members.items():
                subs = ",".join(sorted(m.subscribed_topic_names or ())) or "-"
                assigned = ";".join(f"{uuid.UUID(t).hex}:{'.'.join(map(str, sorted(ps)))}"
                                    for t, ps in sorted(m.assigned.items())) or "-"
                lines.append(f"M {mid} {subs} {assigned}")
            if any(meta.assignable is not None for meta in spec.topics.values()):
                for tid, meta in spec.topics.items():
                    if meta.assignable is not None:
                        lines.append(f"A {uuid.UUID(tid).hex} {'.'.join(map(str, sorted(meta.assignable))) or '-'}")
            lines.append("END")
        done = subprocess.run(["java", "-cp", f"{out}:{libs}/*", "SimpleAssignorOracle"], input="\n".join(lines) + "\n",
                              capture_output=True, text=True, check=True, timeout=120)
        results, current = [], {}
        for line in done.stdout.splitlines():
            if line == "END":
                results.append(current)
                current = {}
                continue
            _, mid, topics = line.split(" ")
            current[mid] = {} if topics == "-" else {
                str(uuid.UUID(t.split(":")[0])): {int(p) for p in t.split(":")[1].split(".") if p}
                for t in topics.split(";")}
        return results

    return run


member_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=36)


@st.composite
def cases(draw) -> AssignmentSpec:
    n_topics = draw(st.integers(1, 3))
    topics = {}
    for name in NAMES[:n_topics]:
        topics[str(draw(st.uuids()))] = TopicMetadata(name=name, partition_count=draw(st.integers(1, 7)))
    by_name = {m.name: t for t, m in topics.items()}
    members = {}
    for mid in draw(st.lists(member_ids, min_size=1, max_size=6, unique=True)):
        names = draw(st.sets(st.sampled_from(NAMES[:n_topics] + ["missing"]), min_size=1, max_size=3))
        assigned = {}
        for name in draw(st.sets(st.sampled_from(NAMES[:n_topics]), max_size=n_topics)):
            t = by_name[name]
            assigned[t] = frozenset(draw(st.sets(st.integers(0, topics[t].partition_count - 1), max_size=4)))
        members[mid] = MemberSpec(frozenset(by_name[n] for n in names if n in by_name), assigned=assigned,
                                  subscribed_topic_names=frozenset(names))
    return AssignmentSpec(members=members, topics=topics)


def random_case(rng: random.Random) -> AssignmentSpec:
    """The same shape as ``cases()``, drawn fast for the bulk comparison."""
    n_topics = rng.randint(1, 3)
    topics = {str(uuid.UUID(int=rng.getrandbits(128))): TopicMetadata(name, rng.randint(1, 7))
              for name in NAMES[:n_topics]}
    by_name = {m.name: t for t, m in topics.items()}
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-_"
    ids = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 36))) for _ in range(rng.randint(1, 6))}
    members = {}
    for mid in ids:
        names = set(rng.sample(NAMES[:n_topics] + ["missing"], rng.randint(1, min(3, n_topics + 1))))
        if rng.random() < 0.6:  # most groups subscribe alike (homogeneous)
            names = set(NAMES[:n_topics])
        assigned = {}
        for name in rng.sample(NAMES[:n_topics], rng.randint(0, n_topics)):
            t = by_name[name]
            assigned[t] = frozenset(rng.sample(range(topics[t].partition_count), rng.randint(0, topics[t].partition_count)))
        members[mid] = MemberSpec(frozenset(by_name[n] for n in names if n in by_name), assigned=assigned,
                                  subscribed_topic_names=frozenset(names))
    return AssignmentSpec(members=members, topics=topics)


def churn(rng: random.Random, spec: AssignmentSpec) -> list[AssignmentSpec]:
    """A group's life: members join and leave, each step starting from the previous result."""
    steps, current = [], spec
    for _ in range(6):
        steps.append(current)
        result = SimpleAssignor().assign(current).frozen()
        members = {m: MemberSpec(s.subscribed_topic_ids, assigned=result.get(m, {}),
                                 subscribed_topic_names=s.subscribed_topic_names) for m, s in current.members.items()}
        if len(members) > 1 and rng.random() < 0.4:
            members.pop(rng.choice(sorted(members)))
        else:
            names = next(iter(current.members.values())).subscribed_topic_names
            members[f"m{rng.getrandbits(40):x}"] = MemberSpec(frozenset(t for t, meta in current.topics.items()
                                                                       if meta.name in names),
                                                             subscribed_topic_names=names)
        current = AssignmentSpec(members=members, topics=current.topics)
    return steps


def compare(oracle, batch: list[AssignmentSpec]) -> None:
    expected = oracle(batch)
    for spec, want in zip(batch, expected, strict=True):
        got = {m: {t: set(ps) for t, ps in topics.items()} for m, topics in SimpleAssignor().assign(spec).members.items()}
        assert got == want, f"spec {spec!r}"


def test_same_assignment_as_kafkas_simple_assignor(oracle):
    """1,000 random groups and 100 churn histories (600 steps), one JVM run."""
    rng = random.Random(2026)
    batch = [random_case(rng) for _ in range(1000)]
    for _ in range(100):
        batch += churn(rng, random_case(rng))
    compare(oracle, batch)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                               HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(cases(), min_size=10, max_size=10))
def test_same_assignment_as_kafka_on_generated_groups(oracle, batch):
    compare(oracle, batch)


def with_uninitialized(rng: random.Random, spec: AssignmentSpec) -> AssignmentSpec:
    """The same group where only some share-partitions are initialized (assignable): none of a
    topic, some, or all — as during a join, a topic's growth or after an offsets reset."""
    topics = {}
    for tid, meta in spec.topics.items():
        n = meta.partition_count
        assignable = rng.choice([frozenset(), frozenset(range(n)),
                                 frozenset(rng.sample(range(n), rng.randint(0, n)))])
        topics[tid] = TopicMetadata(meta.name, n, assignable=assignable)
    # A current assignment only ever holds assignable partitions (targets are computed over them;
    # Kafka's own class fails on other inputs).
    members = {m: MemberSpec(ms.subscribed_topic_ids, assigned={t: ps & topics[t].assignable for t, ps in ms.assigned.items()},
                             subscribed_topic_names=ms.subscribed_topic_names)
               for m, ms in spec.members.items()}
    return AssignmentSpec(members=members, topics=topics)


def test_same_assignment_as_kafka_when_only_initialized_partitions_are_assignable(oracle):
    """Kafka assigns only share-partitions whose state is initialized (GroupSpec.isPartitionAssignable):
    the pool, the desired sharing and counts are over those (the epochs of a join)."""
    rng = random.Random(4322)
    compare(oracle, [with_uninitialized(rng, random_case(rng)) for _ in range(600)])


def test_a_member_joining_a_settled_one_takes_what_kafka_gives_it(oracle):
    """The case the differential harness found: a holds all 4 partitions, b joins."""
    pa, pb = "0123456789abcdef0123456789abcdef", "fedcba98-7654-3210-fedc-ba9876543210"
    pa, pb = str(uuid.UUID(pa)), str(uuid.UUID(pb))
    topics = {pa: TopicMetadata("pa", 3), pb: TopicMetadata("pb", 1)}
    names = frozenset({"pa", "pb"})
    spec = AssignmentSpec(members={
        "a": MemberSpec(frozenset({pa, pb}), assigned={pa: frozenset({0, 1, 2}), pb: frozenset({0})},
                        subscribed_topic_names=names),
        "b": MemberSpec(frozenset({pa, pb}), subscribed_topic_names=names)}, topics=topics)
    (want,) = oracle([spec])
    got = SimpleAssignor().assign(spec).members
    assert got == want == {"a": {pa: {1, 2}, pb: set()}, "b": {pa: {0}, pb: {0}}}
