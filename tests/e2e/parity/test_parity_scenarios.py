"""Hand-written differential scenarios: each runs on native Kafka 4.4 (the reference) and kshare on 3.9, step by step,
and every normalised answer must be equal. Generated sequences: test_parity_generated.py."""

from __future__ import annotations

import pytest

from .model import ACCEPT, GAP, REJECT, RELEASE
from .ops import (AckRange, Acknowledge, AlterOffsets, BadSession, CloseSession, DeleteGroup, DeleteOffsets,
                  Describe, DescribeConfigs, DescribeOffsets, Fetch, Heartbeat, Join, Leave, ListGroups, Produce,
                  SetConfig, Settle)
from .passthrough import CreateTopic, FindCoordinators, Metadata, MetadataById
from .runner import NO_TOPIC, TOPIC_A, TOPIC_B, TOPIC_NEW, run_sequence

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SCENARIOS = {
    "join-fetch-accept": [
        Join("a", (TOPIC_A,)), Settle(), Describe(), Fetch("a"), Acknowledge("a", ACCEPT), DescribeOffsets(),
        Fetch("a"), Leave("a"), Describe(), ListGroups(("share",)),
    ],
    # Two members sharing one partition, one of them also alone on a second topic. (Which of two
    # members gets which of several partitions follows the topic ids' hash order, and the two
    # clusters give their topics different ids: that exactness is checked against Kafka's own
    # assignor class in tests/integration/assignors/test_simple_assignor_oracle.py.)
    "two-members-share": [
        Join("a", (TOPIC_A, TOPIC_B)), Settle(), Join("b", (TOPIC_B,)), Settle(), Describe(),
        Fetch("a"), Fetch("b"), Acknowledge("a", RELEASE), Acknowledge("b", REJECT), Fetch("a"), Fetch("b"),
        DescribeOffsets(), Leave("a"), Settle(), Describe(), Fetch("b"),
    ],
    "fetch-with-piggybacked-acks": [
        Join("a", (TOPIC_B,)), Settle(), Fetch("a", max_records=2, batch_size=2), Fetch("a", ack=ACCEPT),
        Fetch("a", ack=RELEASE, which="first"), Fetch("a", ack=ACCEPT), DescribeOffsets((TOPIC_B,)),
    ],
    # A member moves to a topic others share while its old topic keeps no subscriber (found by a
    # generated sequence: Kafka filters the member's assignment by its subscription).
    "subscription-change": [
        Join("c", (TOPIC_B,)), Settle(), Join("a", (TOPIC_A,)), Settle(), Join("b", (TOPIC_B, NO_TOPIC)), Settle(),
        Describe(), Join("a", (TOPIC_B,)), Settle(), Describe(), Fetch("a"),
    ],
    # Found by the long run: Kafka assigns a newly subscribed partition only once its share-partition
    # state is initialized, one group epoch after the join, so the joiner's epoch moves twice and a
    # heartbeat with its previous epoch is accepted after a rejoin (kshare fenced it).
    "rejoin-previous-epoch": [
        Join("c", (TOPIC_B,)), Settle(), Join("a", (TOPIC_A,)), Settle(), Join("a", (TOPIC_A,)), Settle(),
        Heartbeat("a", "stale"),
    ],
    # Found by the long run: a fetch alone (no acknowledgement yet) writes no share-partition state
    # on Kafka, so DescribeShareGroupOffsets still shows no start offset (kshare wrote it at load).
    "offsets-after-fetch-without-ack": [
        Join("a", (TOPIC_A,)), Settle(), DescribeOffsets(), Fetch("a", max_records=1, batch_size=1), DescribeOffsets(),
        Acknowledge("a", RELEASE), DescribeOffsets(),
    ],
    # Found by the long run: kshare may answer a fetch from its read cache, which ends where the log
    # ended when it was read, so one answer can acquire fewer records than Kafka's (which reads the
    # log) — the next fetch gets the rest; Fetch tops up to max_records (docs/compatibility.md).
    "fetch-from-a-cache-behind-the-log": [
        Join("a", (TOPIC_B,)), Settle(), Fetch("a", max_records=1, batch_size=1), Produce(TOPIC_B, 0, 3),
        Acknowledge("a", RELEASE), Fetch("a", max_records=100, batch_size=100), Acknowledge("a", ACCEPT),
        DescribeOffsets((TOPIC_B,)),
    ],
    # Found by the long run: an acknowledgement for a share-partition nothing was fetched from is
    # UNKNOWN_TOPIC_OR_PARTITION on Kafka (not in its SharePartitionManager's cache); kshare loaded
    # the share-partition and answered INVALID_RECORD_STATE.
    "ack-of-a-partition-never-fetched": [
        Join("a", (TOPIC_B,)), Settle(), Fetch("a"), AckRange("a", TOPIC_A, 2, 3, 5, ACCEPT),
        AckRange("a", TOPIC_A, 2, 4, 0, GAP),  # a bad batch is INVALID_REQUEST first (long run 6)
        AckRange("a", TOPIC_B, 0, 100, 101, ACCEPT), Fetch("a", ack=ACCEPT),
    ],
    "heartbeat-errors": [
        Heartbeat("a", "current"), Join("a", (TOPIC_A,)), Heartbeat("a", "stale"), Heartbeat("a", "ahead"),
        Heartbeat("a", "unknown-member"), Leave("a"), Heartbeat("a", "current"), Join("a", (NO_TOPIC,)),
        Settle(), Describe(),
    ],
    "session-errors": [
        Join("a", (TOPIC_B,)), Settle(), BadSession("a", "unopened"), Fetch("a"), BadSession("a", "ahead"),
        Fetch("a"), CloseSession("a"), CloseSession("a"), Fetch("a"),
    ],
    "acknowledge-edges": [
        Join("a", (TOPIC_B,)), Settle(), Fetch("a", max_records=1, batch_size=1),
        AckRange("a", TOPIC_B, 0, 2, 3, ACCEPT), AckRange("a", TOPIC_B, 0, 0, 0, GAP),
        AckRange("a", TOPIC_B, 0, 100, 101, ACCEPT), AckRange("a", TOPIC_B, 0, 3, 1, ACCEPT),
        AckRange("a", TOPIC_B, 0, 0, 0, 7), AckRange("a", TOPIC_B, 5, 0, 0, ACCEPT), Fetch("a"),
    ],
    "offsets-admin": [
        DescribeOffsets(), AlterOffsets(TOPIC_B, 0, 2), DescribeOffsets((TOPIC_B,)), Join("a", (TOPIC_B,)),
        AlterOffsets(TOPIC_B, 0, 1), Settle(), Fetch("a"), Leave("a"), DeleteOffsets(TOPIC_B),
        DescribeOffsets((TOPIC_B,)), DeleteOffsets(NO_TOPIC), AlterOffsets(NO_TOPIC, 0, 0),
        DeleteGroup(), DescribeOffsets(), Describe(), DeleteGroup(), ListGroups(),
    ],
    # The passed-through APIs a share-group application uses: topics created, described and
    # produced to through the target, a member waiting for a topic that does not exist yet.
    "passthrough-topics": [
        Metadata((TOPIC_A, TOPIC_B, NO_TOPIC, TOPIC_NEW)), MetadataById(TOPIC_B), MetadataById(NO_TOPIC),
        FindCoordinators("group-v3"), FindCoordinators("groups-v4"), FindCoordinators("transaction"),
        FindCoordinators("unknown-type"),
        Join("a", (TOPIC_NEW,)), Settle(), Produce(TOPIC_NEW, 0, 2), Produce(NO_TOPIC, 0, 1), Produce(TOPIC_B, 4, 1),
        CreateTopic("new", 0), CreateTopic("new", 1, 3), CreateTopic("illegal"), CreateTopic("new", 2, validate_only=True),
        CreateTopic("existing"), Metadata((TOPIC_NEW,)), CreateTopic("new", 1), CreateTopic("new", 1),
        Metadata((TOPIC_NEW, TOPIC_B)), MetadataById(TOPIC_NEW), Produce(TOPIC_NEW, 0, 3), Settle(), Describe(),
        Fetch("a"), Acknowledge("a", ACCEPT), DescribeOffsets((TOPIC_NEW,)), Produce(TOPIC_NEW, 1, 1),
    ],
    "group-configs": [
        SetConfig("share.record.lock.duration.ms", "20000"), SetConfig("share.renew.acknowledge.enable", "false"),
        SetConfig("share.delivery.count.limit", "11"), SetConfig("share.isolation.level", "bogus"),
        SetConfig("share.no.such.config", "1"), SetConfig("share.heartbeat.interval.ms", "6000", validate_only=True),
        DescribeConfigs(("share.record.lock.duration.ms", "share.renew.acknowledge.enable",
                         "share.heartbeat.interval.ms", "share.auto.offset.reset")),
        SetConfig("share.record.lock.duration.ms", None),
        DescribeConfigs(("share.record.lock.duration.ms",)), ListGroups(("share",), ("Empty",)),
    ],
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_answers_match_native(parity_targets, parity_report, name):
    run_sequence(SCENARIOS[name], parity_targets.native, parity_targets.kshare, report=parity_report)
