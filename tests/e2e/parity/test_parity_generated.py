"""Generated differential sequences: hypothesis builds random, valid-by-construction
sequences of share-group operations over members a–c and two topics; each runs on native Kafka 4.4
and on kshare on 3.9, and the first differing answer fails the test with a replayable sequence.
About half of them start with dead-letter configs (dlq.py: a topic that opted in, one that did not,
one missing, a name without the prefix, a refused ``__`` name; copy on or off; a delivery count
limit of 2 or 3), so their rejects and releases past the limit dead-letter records, and end by
comparing what the dead-letter topics hold.

The default suite runs ``KSHARE_PARITY_EXAMPLES`` sequences (default 3), derandomized and without
shrinking so that it is the same short run every time; ``make test-parity`` sets
``KSHARE_PARITY_EXPLORE=1``: fresh random sequences, and a failure is shrunk to a minimal replay. The count of sequences and operations is printed at the end of the session.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from .dlq import NAMES as DLQ_NAMES
from .dlq import ReadDeadLetters
from .model import ACCEPT, GAP, REJECT, RELEASE
from .ops import (
    Acknowledge,
    AckRange,
    AlterOffsets,
    BadSession,
    CloseSession,
    DeleteOffsets,
    Describe,
    DescribeOffsets,
    Fetch,
    Heartbeat,
    Join,
    Leave,
    ListGroups,
    Produce,
    SetConfig,
    Settle,
)
from .passthrough import CreateTopic, FindCoordinators, Metadata, MetadataById
from .runner import MEMBERS, NO_TOPIC, PARTITIONS, TOPIC_A, TOPIC_B, TOPIC_NEW, run_sequence

EXAMPLES = int(os.environ.get("KSHARE_PARITY_EXAMPLES", "3"))
EXPLORE = os.environ.get("KSHARE_PARITY_EXPLORE", "") not in ("", "0")
# The long run takes hours: pytest's per-test timeout (600 s) cut the earlier ones short.
pytestmark = [pytest.mark.kafka, pytest.mark.slow, *([pytest.mark.timeout(0)] if EXPLORE else [])]
PHASES = list(Phase) if EXPLORE else [Phase.explicit, Phase.generate]

members = st.sampled_from(MEMBERS)
# Member a may take the 3-partition topic; b and c only share the 1-partition ones. Which member
# gets which of several partitions follows the clusters' own topic ids (different on each), so
# layouts where that choice exists are left to the assignor oracle test. TOPIC_NEW (the
# sequence's own) exists once a CreateTopic made it, always with one partition.
topics_of = {"a": st.sampled_from([(TOPIC_A,), (TOPIC_B,), (TOPIC_A, TOPIC_B), (TOPIC_B, NO_TOPIC), (TOPIC_A, TOPIC_NEW),
                                   (TOPIC_NEW,)]),
             "b": st.sampled_from([(TOPIC_B,), (TOPIC_B, NO_TOPIC), (TOPIC_B, TOPIC_NEW)]),
             "c": st.sampled_from([(TOPIC_B,), (TOPIC_NEW,)])}
joins = members.flatmap(lambda m: st.builds(Join, st.just(m), topics_of[m]))
ack_types = st.sampled_from([ACCEPT, ACCEPT, RELEASE, REJECT])
partitions = st.sampled_from([(t, p) for t, n in PARTITIONS.items() for p in range(n)])

membership = st.one_of(
    joins,
    st.builds(Leave, members),
    st.builds(Heartbeat, members, st.sampled_from(["stale", "ahead", "unknown-member"])),
)
consuming = st.one_of(
    st.builds(Fetch, members, st.none() | ack_types, st.sampled_from(["all", "first", "half"]),
              st.sampled_from([1, 3, 20]), st.sampled_from([1, 5, 20])),
    st.builds(Acknowledge, members, ack_types, st.sampled_from(["all", "first", "half"])),
    st.builds(Acknowledge, members, ack_types, st.just("all"), st.just(True)),
    partitions.flatmap(lambda tp: st.builds(AckRange, members, st.just(tp[0]), st.just(tp[1]), st.integers(0, 9),
                                            st.integers(0, 9), st.sampled_from([GAP, ACCEPT, RELEASE, REJECT]))),
    st.builds(BadSession, members, st.sampled_from(["ahead", "unopened"])),
    st.builds(CloseSession, members),
    partitions.flatmap(lambda tp: st.builds(Produce, st.just(tp[0]), st.just(tp[1]), st.integers(1, 4))),
    st.builds(Fetch, members),
)
# The passed-through APIs share-group applications use: the sequence's own topic created (or not,
# or badly), produced to (also where it cannot be), described; coordinators looked up.
passthrough = st.one_of(
    st.builds(CreateTopic, st.just("new"), st.just(1)),
    st.builds(CreateTopic, st.sampled_from(["new", "existing", "illegal"]), st.sampled_from([0, 1, 2]),
              st.sampled_from([1, 1, 3]), st.booleans()),
    st.builds(Produce, st.sampled_from([TOPIC_NEW, TOPIC_NEW, NO_TOPIC]), st.sampled_from([0, 0, 1]), st.integers(1, 3)),
    st.builds(Produce, st.just(TOPIC_B), st.just(3), st.just(1)),
    st.builds(Metadata, st.lists(st.sampled_from([TOPIC_A, TOPIC_B, NO_TOPIC, TOPIC_NEW]), min_size=1, max_size=4,
                                 unique=True).map(tuple)),
    st.builds(MetadataById, st.sampled_from([TOPIC_B, TOPIC_NEW, NO_TOPIC])),
    st.builds(FindCoordinators, st.sampled_from(["group-v3", "groups-v4", "transaction", "unknown-type"])),
)
admin = st.one_of(
    st.just(Describe()), st.builds(DescribeOffsets, st.none() | st.just((TOPIC_A, TOPIC_B))),
    st.builds(ListGroups, st.sampled_from([(), ("share",), ("consumer",)])),
    partitions.flatmap(lambda tp: st.builds(AlterOffsets, st.just(tp[0]), st.just(tp[1]), st.integers(0, 12))),
    st.builds(DeleteOffsets, st.sampled_from([TOPIC_A, TOPIC_B, TOPIC_NEW])),
)


def settle_after_membership(ops: list) -> list:
    """Valid by construction: a Settle follows every membership change (and topic creation), so that
    what a member is assigned or fetches never depends on when a heartbeat happened to arrive."""
    out = []
    for op in ops:
        out.append(op)
        if isinstance(op, (Join, Leave)) or (isinstance(op, CreateTopic) and op.name == "new"):
            out.append(Settle())  # a new topic changes what subscribed members are assigned
    return out


def dlq_configs(name: str, copy: str | None, limit: str) -> list:
    """A group's dead-letter configs, set before its first member joins (a change of a live
    share-partition's configs is compared elsewhere)."""
    return [SetConfig("errors.deadletterqueue.topic.name", name),
            *([SetConfig("errors.deadletterqueue.copy.record.enable", copy)] if copy is not None else []),
            SetConfig("share.delivery.count.limit", limit)]


dead_letters = st.one_of(st.just([]), st.builds(dlq_configs, st.sampled_from(DLQ_NAMES),
                                                st.sampled_from([None, "true", "false"]), st.sampled_from(["2", "3"])))

def dead_letter_tail(member: str) -> list:
    """After a sequence with dead-letter configs: the first member (if still in the group) rejects
    one record and releases the rest until the delivery count limit, then the dead-letter topics
    are compared (random sequences alone seldom reject on a group whose topic opted in)."""
    return [Fetch(member), Acknowledge(member, REJECT, "first"), Acknowledge(member, RELEASE, "all"),
            Fetch(member), Acknowledge(member, RELEASE, "all"), Fetch(member), Acknowledge(member, RELEASE, "all"),
            ReadDeadLetters()]


sequences = st.tuples(
    dead_letters,
    joins,
    st.lists(st.one_of(membership, consuming, consuming, admin, passthrough), min_size=3, max_size=14),
).map(lambda t: settle_after_membership([*t[0], t[1], *t[2], *(dead_letter_tail(t[1].member) if t[0] else [])]))


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not EXPLORE, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(ops=sequences)
def test_generated_sequences_answer_like_native(parity_targets, parity_report, ops):
    run_sequence(ops, parity_targets.native, parity_targets.kshare, report=parity_report)
