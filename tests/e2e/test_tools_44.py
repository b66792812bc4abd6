"""Kafka 4.4.0's own admin tools — ``kafka-configs.sh`` (org.apache.kafka.tools.ConfigCommand, moved
to kafka-tools in 4.4) and ``kafka-share-groups.sh`` — the same commands against native Kafka 4.4.0
and through kshare on Kafka 3.9, their outputs compared: share-group configs with the dead-letter
keys, a dead-letter topic's opt-in (a topic config Kafka 3.9 cannot hold, kept by the sidecar),
the group list and its offsets."""

from __future__ import annotations

import shutil

import pytest

from kshare_sidecar.testing.tools import KAFKA_TOOLS_VERSION, run_configs, run_share_groups
from tests.support import create_topic, produce, share_consume, table, unique

# A dozen JVM tool runs on each target: opt-in (`make test-dlq`), outside the default suite.
pytestmark = [pytest.mark.kafka, pytest.mark.optin("dlq"),
              pytest.mark.skipif(not (shutil.which("java") and shutil.which("mvn")),
                                 reason="needs java and mvn for Kafka's tools")]


def _config_lines(output: str, keys: tuple[str, ...]) -> list[str]:
    """The describe lines of ``keys`` (``  key=value sensitive=... synonyms={...}``), stripped."""
    return sorted(line.strip() for line in output.splitlines() if line.strip().split("=")[0] in keys)


def _session(bootstrap: str, backend: str, names: dict) -> dict:
    group, topic, dlq = names["group"], names["topic"], names["dlq"]
    out: dict = {}
    res = run_configs(bootstrap, "--entity-type", "groups", "--entity-name", group, "--alter", "--add-config",
                      f"errors.deadletterqueue.topic.name={dlq},errors.deadletterqueue.copy.record.enable=true,"
                      "share.auto.offset.reset=earliest")
    out["alter group"] = (res.returncode, res.stdout.strip())
    res = run_configs(bootstrap, "--entity-type", "groups", "--entity-name", group, "--describe", "--all")
    # (the lock duration is set at both brokers' level by the e2e fixtures, the delivery limit at neither:
    # their synonyms are STATIC_BROKER_CONFIG and DEFAULT_CONFIG of the group.share.* broker setting)
    out["describe group"] = _config_lines(res.stdout, ("errors.deadletterqueue.topic.name",
                                                       "errors.deadletterqueue.copy.record.enable",
                                                       "share.record.lock.duration.ms", "share.delivery.count.limit"))
    res = run_configs(bootstrap, "--entity-type", "groups", "--entity-name", group, "--alter", "--add-config",
                      "errors.deadletterqueue.topic.name=__internal")
    out["refused"] = (res.returncode != 0, "DLQ topic name must not start with '__'" in res.output)
    create_topic(backend, dlq, 1)
    res = run_configs(bootstrap, "--entity-type", "topics", "--entity-name", dlq, "--alter", "--add-config",
                      "errors.deadletterqueue.group.enable=true")
    out["alter topic"] = (res.returncode, res.stdout.strip())
    res = run_configs(bootstrap, "--entity-type", "topics", "--entity-name", dlq, "--describe", "--all")
    out["describe topic"] = _config_lines(res.stdout, ("errors.deadletterqueue.group.enable",))
    create_topic(backend, topic, 2)
    produce(backend, topic, 20, partitions=2)
    assert len(share_consume(bootstrap, group, topic, 20)) == 20
    res = run_share_groups(bootstrap, "--list")
    out["listed"] = group in res.stdout.split()
    # (the offsets right after the consumer closed depend on when each side applied its last
    # acknowledgements: compared after the reset below, which needs an empty group)
    # new in 4.4's kafka-share-groups.sh: --to-offset (and --to-current, --from-file, --export)
    res = run_share_groups(bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "3",
                           "--execute")
    out["reset to-offset"] = (res.returncode, sorted(res.stdout.split()))
    res = run_share_groups(bootstrap, "--describe", "--group", group, "--offsets")
    out["offsets after reset"] = sorted((r["TOPIC"], r["PARTITION"], r.get("START-OFFSET"), r.get("LAG"))
                                        for r in table(res.stdout, "GROUP"))
    res = run_share_groups(bootstrap, "--describe", "--group", group, "--state")
    out["state columns"] = list(table(res.stdout, "GROUP")[0]) if table(res.stdout, "GROUP") else res.output
    return out


def test_kafka_44_tools_through_kshare_as_natively(sidecar, kafka_39, native_kafka):
    assert KAFKA_TOOLS_VERSION == "4.4.0"
    tag = unique("t").split("-")[1]
    names = {"group": f"gtools-{tag}", "topic": f"tools-{tag}", "dlq": f"dlq.tools-{tag}"}
    native = _session(native_kafka.bootstrap, native_kafka.bootstrap, names)
    kshare = _session(sidecar.bootstrap, kafka_39.bootstrap, names)
    assert native["alter group"][0] == 0 and native["refused"] == (True, True), native
    assert native["describe topic"] and native["describe topic"][0].startswith(
        "errors.deadletterqueue.group.enable=true"), native["describe topic"]
    differences = {k: (kshare[k], native[k]) for k in native if kshare.get(k) != native[k]}
    assert not differences, "\n".join(f"{k}:\n  kshare {a}\n  native {b}" for k, (a, b) in differences.items())
