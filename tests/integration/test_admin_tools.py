"""Kafka's own admin tools against Kafka 3.9 + the sidecar.

`kafka-share-groups.sh` (ShareGroupCommand from org.apache.kafka:kafka-tools 4.3.1) and
`kafka-configs.sh --entity-type groups` (kafka.admin.ConfigCommand), resolved from Maven Central
into the harness cache. What they print is checked against the group's real state.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from kshare_sidecar.testing.tools import SidecarThread, run_configs, run_share_groups
from tests.integration.test_admin import consume_acking, wait_for
from tests.support import create_topic, produce, table, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420),
              pytest.mark.skipif(not (shutil.which("java") and shutil.which("mvn")),
                                 reason="needs java and mvn for Kafka's tools")]


@pytest.fixture(scope="module")
def sidecar(kafka_39):
    sc = SidecarThread({"bootstrap.servers": kafka_39.bootstrap, "persister": "memory",
                        "group.share.heartbeat.interval.ms": 1000, "group.share.assignment.interval.ms": 0}).start()
    yield sc
    sc.stop()


def test_kafka_configs_groups(sidecar, kafka_39):
    group = unique("g-kc")
    res = run_configs(sidecar.bootstrap, "--entity-type", "groups", "--entity-name", group, "--alter",
                      "--add-config", "share.auto.offset.reset=earliest,share.record.lock.duration.ms=20000")
    assert res.returncode == 0 and f"Completed updating config for group {group}" in res.stdout, res.output
    res = run_configs(sidecar.bootstrap, "--entity-type", "groups", "--entity-name", group, "--describe")
    assert "share.auto.offset.reset=earliest" in res.stdout and "share.record.lock.duration.ms=20000" in res.stdout
    res = run_configs(sidecar.bootstrap, "--entity-type", "groups", "--entity-name", group, "--alter",
                      "--add-config", "share.delivery.count.limit=99")
    assert res.returncode != 0 and "InvalidConfigurationException" in res.output
    assert "share.delivery.count.limit" in res.output
    res = run_configs(sidecar.bootstrap, "--entity-type", "groups", "--entity-name", group, "--alter",
                      "--delete-config", "share.record.lock.duration.ms")
    assert res.returncode == 0, res.output
    res = run_configs(sidecar.bootstrap, "--entity-type", "groups", "--entity-name", group, "--describe")
    assert "share.record.lock.duration.ms" not in res.stdout and "share.auto.offset.reset=earliest" in res.stdout

    # the config is applied: records produced before the group's first member are delivered
    topic = unique("kc")
    create_topic(kafka_39.bootstrap, topic)
    produce(kafka_39.bootstrap, topic, 4)
    assert len(consume_acking(sidecar.bootstrap, group, topic, 4)) == 4


def test_share_group_command(sidecar, kafka_39):
    topic, group = unique("sgc"), unique("g-sgc")
    create_topic(kafka_39.bootstrap, topic, partitions=2)
    res = run_configs(sidecar.bootstrap, "--entity-type", "groups", "--entity-name", group, "--alter",
                      "--add-config", "share.auto.offset.reset=earliest")
    assert res.returncode == 0, res.output
    values = produce(kafka_39.bootstrap, topic, 16, partitions=2)
    assert len(consume_acking(sidecar.bootstrap, group, topic, 6)) == 6

    res = run_share_groups(sidecar.bootstrap, "--list")
    assert group in res.stdout.split(), res.output
    res = run_share_groups(sidecar.bootstrap, "--list", "--state", "Empty")
    assert {"GROUP": group, "STATE": "Empty"} in table(res.stdout, "GROUP"), res.output

    def offsets():
        rows = table(run_share_groups(sidecar.bootstrap, "--describe", "--group", group, "--offsets").stdout, "GROUP")
        return rows if sum(int(r["LAG"]) for r in rows) == 16 - 6 else None

    rows = wait_for(offsets)
    assert rows and sorted(r["PARTITION"] for r in rows) == ["0", "1"] and all(r["TOPIC"] == topic for r in rows)

    proc = subprocess.Popen([sys.executable, "-m", "kshare_sidecar.cli", "consume", "-b", sidecar.bootstrap,
                             "--group", group, "--topic", topic, "--release"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def members():
            out = run_share_groups(sidecar.bootstrap, "--describe", "--group", group, "--members").stdout
            return table(out, "GROUP")

        rows = wait_for(members, timeout=30, step=1)
        assert len(rows) == 1 and rows[0]["GROUP"] == group and topic in rows[0]["ASSIGNMENT"], rows
        res = run_share_groups(sidecar.bootstrap, "--delete", "--group", group)
        assert "is not EMPTY" in res.output, res.output
        res = run_share_groups(sidecar.bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
                               "--to-earliest", "--execute")
        assert "is not empty" in res.output, res.output
    finally:
        proc.terminate()
        proc.wait(30)
    wait_for(lambda: "Empty" in run_share_groups(sidecar.bootstrap, "--list", "--state").stdout, timeout=30, step=1)

    res = run_share_groups(sidecar.bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
                           "--to-earliest", "--execute")
    rows = table(res.stdout, "GROUP")
    assert sorted((r["PARTITION"], r["NEW-OFFSET"]) for r in rows) == [("0", "0"), ("1", "0")], res.output
    again = consume_acking(sidecar.bootstrap, group, topic, 16)
    assert sorted(again) == sorted(values)

    time.sleep(0.5)
    res = run_share_groups(sidecar.bootstrap, "--delete", "--group", group)
    assert f"Deletion of requested share groups ('{group}') was successful." in res.stdout, res.output
    assert group not in run_share_groups(sidecar.bootstrap, "--list").stdout.split()
