"""Share groups moved between kshare and native Kafka 4.4, both ways, on real brokers (docs/migration.md).

Opt-in (``make test-migration``): each test starts its own brokers (at most two JVMs) and runs
confluent-kafka share consumers in phases (tests/e2e/migration_support.py). What is checked, from
what the consumers saw: no record is lost (every one acknowledged at least once), and the records
delivered again after having been acknowledged are exactly as many as the dry runs predicted.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient as AdminClientCK
from confluent_kafka.admin import NewTopic

from kshare_sidecar.cli.kclient import AdminClient
from kshare_sidecar.testing.kafka import KafkaBroker
from tests.e2e.conftest import SidecarProcess
from tests.e2e.migration_support import (
    Phase,
    Worker,
    delivered_again,
    drain_phase,
    kshare_state,
    plan_of,
    produce_small_batches,
    refusal_lines,
    wait_until_empty,
    window_phase,
)
from tests.support import create_topic, set_group_config

pytestmark = [pytest.mark.optin("migration"), pytest.mark.kafka]

N = 1000
#: the sidecar's locks as long as Kafka's default: a holder's records stay held through a phase
SIDECAR_ENV = {"KSHARE_GROUP_SHARE_RECORD_LOCK_DURATION_MS": "30000"}


@pytest.fixture
def kafka44():
    with KafkaBroker("4.4", heap="768m") as broker:
        yield broker


def _sidecar(backend: str, tmp_path, name: str = "sidecar") -> SidecarProcess:
    return SidecarProcess(backend, tmp_path / f"{name}.log", env=dict(SIDECAR_ENV)).start()


def _state_args(sc: SidecarProcess) -> list[str]:
    return ["-b", sc.backend, "--state-topic", sc.env["KSHARE_STATE_TOPIC"], "--sidecar", sc.bootstrap]


def _assert_nothing_lost(phases: list[Phase], partitions: int = 1) -> None:
    acked = set().union(*(p.acked for p in phases))
    every = {(p, o) for p in range(partitions) for o in range(N // partitions)}
    assert acked == every, f"never acknowledged: {sorted(every - acked)[:20]}"


def test_to_native_and_back_on_kafka_44(kafka44, tmp_path, record_property):
    """kshare over Kafka 4.4 -> native 4.4 (the same cluster: the sidecar passes the group through)
    -> kshare again, each move with records in flight."""
    sc = _sidecar(kafka44.bootstrap, tmp_path)
    try:
        topic, group, dlq = "orders", "payments", "dlq.payments"
        create_topic(kafka44.bootstrap, topic, 1)
        produce_small_batches(kafka44.bootstrap, topic, N)
        # the group's dead-letter topic (KIP-1191: Kafka 4.4 writes to a topic that opts in)
        topics_admin = AdminClientCK({"bootstrap.servers": kafka44.bootstrap})
        topics_admin.create_topics([NewTopic(dlq, 1, 1, config={"errors.deadletterqueue.group.enable": "true"})])[
            dlq].result(30)
        dlq_configs = {"errors.deadletterqueue.topic.name": dlq, "errors.deadletterqueue.copy.record.enable": "true"}
        set_group_config(sc.bootstrap, group, dlq_configs)
        args = _state_args(sc)
        refused: dict[str, str] = {}

        def connected() -> None:
            done = kshare_state("migrate-to-native", group, *args)
            assert done.returncode == 1, done.stderr
            refused["consumers connected"] = refusal_lines(done)[0]

        a = window_phase("a-kshare", sc.bootstrap, group, topic, tmp_path, accept=400, on_holding=connected)
        dry = wait_until_empty(["migrate-to-native", group, *args, "--json"])
        assert dry.returncode == 0, dry.stderr
        first = plan_of(dry)
        assert first["redelivered"] > 0 and first["partitions"][0]["start_offset"] == min(a.held)[1]
        done = kshare_state("migrate-to-native", group, *args, "--execute", "--json")
        assert done.returncode == 0, done.stderr
        moved = plan_of(done)
        assert moved["moved"] and moved["redelivered"] == first["redelivered"]
        assert moved["carried"]["share.auto.offset.reset"] == "earliest"  # the sidecar's default, kept
        assert dlq_configs.items() <= moved["carried"].items()  # the dead-letter settings went along
        with AdminClient(kafka44.bootstrap) as admin:
            native_configs = {c.name: c.value for c in admin.describe_group_configs(group).configs}
        assert dlq_configs.items() <= native_configs.items()

        again = kshare_state("migrate-to-native", group, *args)
        refused["already moved"] = refusal_lines(again)[0]
        # a group both sides have: neither direction overwrites the target
        with AdminClient(kafka44.bootstrap) as native_admin, AdminClient(sc.bootstrap) as kshare_admin:
            assert not native_admin.alter_offsets("twice", {topic: {0: 5}}).error_code
            assert not kshare_admin.alter_offsets("twice", {topic: {0: 7}}).error_code
        refused["native target has the group"] = refusal_lines(kshare_state("migrate-to-native", "twice", *args))[0]
        refused["kshare target has the group"] = refusal_lines(kshare_state("migrate-from-native", "twice", *args))[0]
        no_sidecar = [a for a in args if a not in ("--sidecar", sc.bootstrap)]
        refused["--execute without --sidecar"] = refusal_lines(
            kshare_state("migrate-from-native", group, *no_sidecar, "--execute"))[0]

        sc.stop()  # the mark is kshare state: a restarted sidecar still passes the group through
        sc.start()
        # native Kafka, through the same bootstrap: the sidecar passes the group to the backend
        b = window_phase("b-native", sc.bootstrap, group, topic, tmp_path, accept=300)
        with AdminClient(kafka44.bootstrap) as admin:
            native = admin.describe_offsets(group)
            assert native.topics[0].partitions[0].start_offset == min(b.held)[1]
        dry = wait_until_empty(["migrate-from-native", group, *args, "--json"])
        assert dry.returncode == 0, dry.stderr
        second = plan_of(dry)
        assert second["redelivered"] > 0
        done = kshare_state("migrate-from-native", group, *args, "--execute", "--json")
        assert done.returncode == 0, done.stderr
        assert plan_of(done)["moved"] and plan_of(done)["redelivered"] == second["redelivered"]
        with AdminClient(kafka44.bootstrap) as admin:
            assert admin.describe_group(group).error_code != 0  # the native group is gone
        with AdminClient(sc.bootstrap) as admin:  # kshare's again, with its dead-letter settings
            kshare_configs = {c.name: c.value for c in admin.describe_group_configs(group).configs}
        assert dlq_configs.items() <= kshare_configs.items() and "share.coordinator" not in kshare_configs

        again = kshare_state("migrate-from-native", group, *args)
        refused["native group gone"] = refusal_lines(again)[0]

        c = drain_phase("c-kshare", sc.bootstrap, group, topic, tmp_path)
        phases = [a, b, c]
        _assert_nothing_lost(phases)
        counted = delivered_again(phases)
        record_property("migration", {"predicted": [first["redelivered"], second["redelivered"]],
                                      "delivered_again": counted, "refusals": refused})
        print(f"\npredicted {first['redelivered']} + {second['redelivered']}, delivered again {counted}")
        for why, line in refused.items():
            print(f"refusal ({why}): {line}")
        assert counted == first["redelivered"] + second["redelivered"]
    finally:
        sc.stop()


def test_wait_for_drain_moves_without_redelivery(kafka44, tmp_path):
    """With the producers stopped and a consumer still running, --wait-for-drain waits until
    nothing acknowledged lies beyond the start offset and the consumers have left, then moves:
    no record is delivered twice."""
    sc = _sidecar(kafka44.bootstrap, tmp_path)
    try:
        topic, group = "drained", "reports"
        create_topic(kafka44.bootstrap, topic, 1)
        produce_small_batches(kafka44.bootstrap, topic, N)
        args = _state_args(sc)
        a = window_phase("a", sc.bootstrap, group, topic, tmp_path, accept=300, reject_every=0)
        dry = wait_until_empty(["migrate-to-native", group, *args, "--json"])
        assert plan_of(dry)["redelivered"] > 0
        # still connected when the tool starts (a consumer that stays 20 s after its last record)
        work = Worker(sc.bootstrap, group, topic, tmp_path / "drain-work.jsonl", mode="work", idle_s=20)
        done = kshare_state("migrate-to-native", group, *args, "--execute", "--wait-for-drain", "--drain-timeout",
                            "300", "--json")
        assert work.proc.wait(120) == 0
        assert done.returncode == 0, done.stderr
        assert "waiting for the window to drain" in done.stderr
        plan = plan_of(done)
        assert plan["moved"] and plan["redelivered"] == 0
        drained = Phase("drain")
        drained.add(work)
        after = drain_phase("native", sc.bootstrap, group, topic, tmp_path, idle_s=6)
        phases = [a, drained, after]
        _assert_nothing_lost(phases)
        assert delivered_again(phases) == 0
        assert after.deliveries == []  # everything was consumed before the move
    finally:
        sc.stop()


def test_kafka_39_to_another_cluster_with_native_share_groups_and_back(tmp_path):
    """kshare over Kafka 3.9 -> a Kafka 4.4 cluster beside it (the topic mirrored: the same records at
    the same offsets) -> kshare again. The consumers point at the 4.4 cluster while the group is there."""
    with KafkaBroker("3.9", heap="640m") as old, KafkaBroker("4.4", heap="640m") as new:
        sc = _sidecar(old.bootstrap, tmp_path)
        try:
            topic, group = "ledger", "auditors"
            for cluster in (old, new):  # a mirror: the same records at the same offsets on both
                create_topic(cluster.bootstrap, topic, 1)
                produce_small_batches(cluster.bootstrap, topic, N)
            args = [*_state_args(sc), "--native", new.bootstrap]
            refused = refusal_lines(kshare_state("migrate-to-native", group, *_state_args(sc)))
            assert "cannot serve share groups" in refused[0]  # the backend itself is 3.9
            a = window_phase("a-kshare39", sc.bootstrap, group, topic, tmp_path, accept=350)
            first = plan_of(wait_until_empty(["migrate-to-native", group, *args, "--json"]))
            assert first["refusal"] is None and first["redelivered"] > 0
            done = kshare_state("migrate-to-native", group, *args, "--execute", "--json")
            assert done.returncode == 0 and plan_of(done)["moved"], done.stderr
            assert any("kshare keeps its copy" in n for n in plan_of(done)["notes"])
            with AdminClient(sc.bootstrap) as admin:  # not marked: kshare's copy is left as it was
                kept = admin.describe_offsets(group).topics[0].partitions[0].start_offset
            assert kept == first["partitions"][0]["start_offset"]
            b = window_phase("b-native44", new.bootstrap, group, topic, tmp_path, accept=250)
            with AdminClient(sc.bootstrap) as admin:  # back: the copy is replaced, not merged
                assert admin.delete_groups([group])[group] == 0
            second = plan_of(wait_until_empty(["migrate-from-native", group, *args, "--json"]))
            done = kshare_state("migrate-from-native", group, *args, "--execute", "--json")
            assert done.returncode == 0 and plan_of(done)["moved"], done.stderr
            c = drain_phase("c-kshare39", sc.bootstrap, group, topic, tmp_path)
            phases = [a, b, c]
            _assert_nothing_lost(phases)
            counted = delivered_again(phases)
            print(f"\npredicted {first['redelivered']} + {second['redelivered']}, delivered again {counted}")
            assert counted == first["redelivered"] + second["redelivered"]
        finally:
            sc.stop()


def test_a_moved_group_through_the_sidecar_on_a_backend_of_two_brokers(tmp_path):
    """A two-broker Kafka 4.4: the moved group's consumers keep the sidecar as their bootstrap and
    their one share session is spread over both brokers' (passthrough/sessions.py)."""
    from kshare_sidecar.testing.multibroker import KafkaCluster

    with KafkaCluster("4.4", brokers=2) as cluster:
        sc = _sidecar(cluster.bootstrap, tmp_path)
        try:
            topic, group, partitions = "spread", "couriers", 4
            create_topic(cluster.nodes[0].bootstrap, topic, partitions)
            produce_small_batches(cluster.nodes[0].bootstrap, topic, N, partitions=partitions)
            with AdminClient(cluster.nodes[0].bootstrap) as admin:
                meta = admin.metadata([topic])
                assert len({p.leader_id for t in meta.topics for p in t.partitions}) == 2  # both brokers lead
            args = _state_args(sc)
            a = window_phase("a-kshare", sc.bootstrap, group, topic, tmp_path, accept=300)
            first = plan_of(wait_until_empty(["migrate-to-native", group, *args, "--json"]))
            done = kshare_state("migrate-to-native", group, *args, "--execute", "--json")
            assert done.returncode == 0 and plan_of(done)["moved"], done.stderr
            b = window_phase("b-native", sc.bootstrap, group, topic, tmp_path, accept=300)
            assert b.deliveries, "nothing fetched through the split session"
            second = plan_of(wait_until_empty(["migrate-from-native", group, *args, "--json"]))
            done = kshare_state("migrate-from-native", group, *args, "--execute", "--json")
            assert done.returncode == 0 and plan_of(done)["moved"], done.stderr
            c = drain_phase("c-kshare", sc.bootstrap, group, topic, tmp_path)
            phases = [a, b, c]
            _assert_nothing_lost(phases, partitions)
            counted = delivered_again(phases)
            print(f"\npredicted {first['redelivered']} + {second['redelivered']}, delivered again {counted}")
            assert counted == first["redelivered"] + second["redelivered"]
        finally:
            sc.stop()
