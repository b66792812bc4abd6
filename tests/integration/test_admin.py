"""Administration against Kafka 3.9 + the sidecar: the kshare CLI and confluent-kafka's AdminClient.

Every check compares what a tool prints with the group's real state: records produced and
acknowledged, records a fresh consumer receives after a reset.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kshare_sidecar.testing.tools import SidecarThread
from tests.support import create_topic, produce, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def sidecar(kafka_39):
    sc = SidecarThread({"bootstrap.servers": kafka_39.bootstrap, "persister": "memory",
                        "group.share.heartbeat.interval.ms": 1000, "group.share.assignment.interval.ms": 0,
                        "group.share.min.record.lock.duration.ms": 1000}).start()
    yield sc
    sc.stop()


def kshare(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def kshare_json(*args: str):
    res = kshare(*args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def consume_acking(bootstrap: str, group: str, topic: str, accept: int, *, timeout_s: float = 30) -> list[bytes]:
    """Accept exactly ``accept`` records (explicit acks, committed), release anything else fetched."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(got) < accept and time.monotonic() < deadline:
            for msg in consumer.poll(0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                if len(got) < accept:
                    consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
                    got.append(msg.value())
                else:
                    consumer.acknowledge(msg, AcknowledgeType.RELEASE)
        consumer.commit_sync(10)
    finally:
        consumer.close()
    return got


def total_lag(bootstrap: str, group: str) -> int:
    data = kshare_json("groups", "describe", "-b", bootstrap, "--group", group, "--offsets")
    return sum(r["lag"] for r in data["offsets"])


def wait_for(predicate, timeout: float = 20, step: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


# -- group configs through confluent-kafka's AdminClient -----------------------------------------
def test_group_config_set_describe_and_apply(sidecar, kafka_39):
    topic, group = unique("cfg"), unique("g-cfg")
    create_topic(kafka_39.bootstrap, topic)
    produce(kafka_39.bootstrap, topic, 5)  # before the group exists: only `earliest` sees them
    set_group_config(sidecar.bootstrap, group, {"share.auto.offset.reset": "earliest"})

    admin = AdminClient({"bootstrap.servers": sidecar.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group)
    described = admin.describe_configs([resource])[resource].result(15)
    assert described["share.auto.offset.reset"].value == "earliest"
    assert described["share.delivery.count.limit"].value == "5"

    got = consume_acking(sidecar.bootstrap, group, topic, 5)
    assert sorted(got) == sorted(f"v-{i}".encode() for i in range(5))

    bad = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.delivery.count.limit", "50", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as err:
        admin.incremental_alter_configs([bad])[bad].result(15)
    assert "share.delivery.count.limit" in str(err.value)

    # the CLI shows the same, and rejects the same value with one line
    rows = {r["name"]: r for r in kshare_json("configs", "get", "-b", sidecar.bootstrap, "--group", group)["configs"]}
    assert rows["share.auto.offset.reset"] == {"name": "share.auto.offset.reset", "value": "earliest",
                                                "source": "group"}
    res = kshare("configs", "set", "-b", sidecar.bootstrap, "--group", group, "share.record.lock.duration.ms=5")
    assert res.returncode == 1 and "share.record.lock.duration.ms" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# -- lag, members, delete ------------------------------------------------------------------------
def test_lag_members_and_delete(sidecar, kafka_39):
    topic, group = unique("lag"), unique("g-lag")
    create_topic(kafka_39.bootstrap, topic, partitions=2)
    set_group_config(sidecar.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce(kafka_39.bootstrap, topic, 20, partitions=2)

    res = kshare("consume", "-b", sidecar.bootstrap, "--group", group, "--topic", topic, "--max-messages", "7",
                 "--print-delivery-count", "--print-offset")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 7 and all("delivery:1" in line for line in lines)
    assert wait_for(lambda: total_lag(sidecar.bootstrap, group) == 20 - 7)

    consume_acking(sidecar.bootstrap, group, topic, 3)
    assert wait_for(lambda: total_lag(sidecar.bootstrap, group) == 20 - 10)

    # a running member: listed as Stable with members, and delete/reset are refused
    proc = subprocess.Popen([sys.executable, "-m", "kshare_sidecar.cli", "consume", "-b", sidecar.bootstrap,
                             "--group", group, "--topic", topic, "--release"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        members = wait_for(lambda: kshare_json("groups", "describe", "-b", sidecar.bootstrap, "--group", group,
                                               "--members")["members"])
        assert len(members) == 1 and members[0]["subscribed"] == [topic]
        assert sorted(members[0]["assignment"][topic]) == [0, 1]
        listed = kshare_json("groups", "list", "-b", sidecar.bootstrap, "--state", "Stable")
        assert {"group": group, "state": "Stable"} in listed
        res = kshare("groups", "delete", "-b", sidecar.bootstrap, "--group", group)
        assert res.returncode == 1 and "NON_EMPTY_GROUP" in res.stdout
        res = kshare("groups", "reset-offsets", "-b", sidecar.bootstrap, "--group", group, "--topic", topic,
                     "--to-earliest", "--execute")
        assert res.returncode == 1 and "active member" in res.stderr
    finally:
        proc.terminate()
        proc.wait(30)
    assert wait_for(lambda: kshare_json("groups", "describe", "-b", sidecar.bootstrap, "--group", group,
                                        "--state")["state"] == "Empty")
    res = kshare("groups", "delete", "-b", sidecar.bootstrap, "--group", group)
    assert res.returncode == 0, res.stdout + res.stderr
    assert group not in [g["group"] for g in kshare_json("groups", "list", "-b", sidecar.bootstrap)]
    res = kshare("groups", "describe", "-b", sidecar.bootstrap, "--group", group)
    assert res.returncode == 1 and "does not exist" in res.stderr


# -- resets --------------------------------------------------------------------------------------
def test_reset_to_earliest_redelivers_everything(sidecar, kafka_39):
    topic, group = unique("reset"), unique("g-reset")
    create_topic(kafka_39.bootstrap, topic, partitions=2)
    set_group_config(sidecar.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    values = produce(kafka_39.bootstrap, topic, 12, partitions=2)
    assert len(consume_acking(sidecar.bootstrap, group, topic, 12)) == 12
    assert wait_for(lambda: total_lag(sidecar.bootstrap, group) == 0)

    dry = kshare("groups", "reset-offsets", "-b", sidecar.bootstrap, "--group", group, "--topic", topic,
                 "--to-earliest", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert not plan["executed"] and [r["new_start_offset"] for r in plan["offsets"]] == [0, 0]
    assert total_lag(sidecar.bootstrap, group) == 0  # a dry run changes nothing

    res = kshare("groups", "reset-offsets", "-b", sidecar.bootstrap, "--group", group, "--topic", topic,
                 "--to-earliest", "--execute")
    assert res.returncode == 0, res.stderr
    assert total_lag(sidecar.bootstrap, group) == 12
    again = consume_acking(sidecar.bootstrap, group, topic, 12)
    assert sorted(again) == sorted(values)


def test_reset_to_datetime_starts_at_first_record_at_or_after(sidecar, kafka_39):
    topic, group = unique("dt"), unique("g-dt")
    create_topic(kafka_39.bootstrap, topic)
    set_group_config(sidecar.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce(kafka_39.bootstrap, topic, 4, prefix="old")
    time.sleep(1.2)
    cut = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.2)
    new = produce(kafka_39.bootstrap, topic, 3, prefix="new")
    consume_acking(sidecar.bootstrap, group, topic, 7)

    res = kshare("groups", "reset-offsets", "-b", sidecar.bootstrap, "--group", group, "--topic", f"{topic}:0",
                 "--to-datetime", cut.isoformat(timespec="milliseconds"), "--execute", "--json")
    assert res.returncode == 0, res.stderr
    assert [r["new_start_offset"] for r in json.loads(res.stdout)["offsets"]] == [4]
    got = consume_acking(sidecar.bootstrap, group, topic, 3)
    assert got == new


def test_delete_offsets_and_unknown_group(sidecar, kafka_39):
    topic, group = unique("del"), unique("g-del")
    create_topic(kafka_39.bootstrap, topic)
    set_group_config(sidecar.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce(kafka_39.bootstrap, topic, 3)
    consume_acking(sidecar.bootstrap, group, topic, 3)
    res = kshare("groups", "delete-offsets", "-b", sidecar.bootstrap, "--group", group, "--topic", topic, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["topics"] == [{"topic": topic, "error": None}]
    assert kshare_json("groups", "describe", "-b", sidecar.bootstrap, "--group", group)["offsets"] == []
    res = kshare("groups", "delete-offsets", "-b", sidecar.bootstrap, "--group", "no-such-group", "--topic", topic)
    assert res.returncode == 1 and "does not exist" in res.stderr


@pytest.mark.parametrize("args", [
    ["groups", "describe"],
    ["groups", "describe", "--group", "g", "--members", "--state"],
    ["groups", "reset-offsets", "--group", "g", "--topic", "t"],
    ["groups", "reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"],
    ["groups", "reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "yesterday"],
    ["groups", "list", "--state", "Rebalancing"],
    ["configs", "set", "--group", "g", "share.auto.offset.reset"],
    ["consume", "--group", "g", "--topic", "t", "--release", "--reject"],
    ["groups", "frobnicate"],
])
def test_bad_arguments_one_line_nonzero(sidecar, args):
    res = kshare(*args[:2], "-b", sidecar.bootstrap, *args[2:]) if args[0] != "consume" else \
        kshare(args[0], "-b", sidecar.bootstrap, *args[1:])
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "error:" in res.stderr and res.stdout == ""


def test_unreachable_cluster_exit_3():
    res = kshare("groups", "list", "-b", "127.0.0.1:1")
    assert res.returncode == 3 and len(res.stderr.strip().splitlines()) == 1
