"""GROUP configs: the same IncrementalAlterConfigs (validate-only) and DescribeConfigs against
native Kafka 4.4.0 (the reference) and kshare on 3.9 (both with default settings) give the same
outcomes — every key 4.4.0 knows, each at and beyond its bounds, the dead-letter keys (KIP-1191)
included."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kshare_sidecar.testing.kafka import KafkaBroker
from kshare_sidecar.testing.tools import SidecarThread

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PROBES = {
    "consumer.session.timeout.ms": ["44999", "45000", "60000", "60001", "x"],
    "consumer.heartbeat.interval.ms": ["4999", "5000", "15000", "15001"],
    "consumer.assignment.interval.ms": ["-1", "0", "15000", "15001"],
    "share.assignment.interval.ms": ["-1", "0", "15000", "15001"],
    "share.session.timeout.ms": ["44999", "45000", "60000", "60001"],
    "share.heartbeat.interval.ms": ["4999", "5000", "15000", "15001"],
    "share.renew.acknowledge.enable": ["true", "false", "TRUE", "yes", "1"],
    "streams.assignment.interval.ms": ["-1", "0", "15000", "15001"],
    "streams.heartbeat.interval.ms": ["4999", "5000", "15000", "15001"],
    "streams.session.timeout.ms": ["44999", "45000", "60000", "60001"],
    "streams.initial.rebalance.delay.ms": ["-1", "0", "1000000"],
    "streams.num.standby.replicas": ["-1", "0", "2", "3"],
    "share.delivery.count.limit": ["1", "2", "10", "11"],
    "share.partition.max.record.locks": ["99", "100", "4000", "4001"],
    "share.record.lock.duration.ms": ["999", "14999", "15000", "60000", "60001"],
    "share.isolation.level": ["read_committed", "READ_COMMITTED", "bogus"],
    "share.auto.offset.reset": ["earliest", "by_duration:PT1H", "bogus"],
    "share.no.such.config": ["1"],
    # Kafka 4.4: KIP-1191's dead-letter keys (only __ names are refused at config time)
    "errors.deadletterqueue.topic.name": ["", "dlq.x", "__x", "no-prefix", "bad name"],
    "errors.deadletterqueue.copy.record.enable": ["true", "false", "yes"],
    # Kafka 4.4's new streams keys
    "streams.rack.aware.assignment.tags": ["", "zone", "zone,rack", "zone,zone"],
    "streams.assignor.name": ["sticky", "bogus"],
}


def outcomes(bootstrap: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for key, values in PROBES.items():
        for value in values:
            change = ConfigResource(ResourceType.GROUP, "parity-group", incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
            (future,) = admin.incremental_alter_configs([change], validate_only=True).values()
            try:
                future.result(30)
                out[f"{key}={value}"] = "ok"
            except KafkaException as exc:
                out[f"{key}={value}"] = exc.args[0].name()
    (described,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, "parity-group")]).values()
    for name, entry in described.result(30).items():
        out[f"describe {name}"] = entry.value
    return out


@pytest.fixture(scope="module")
def default_native():
    with KafkaBroker("4") as broker:
        yield broker


def _probe(bootstrap: str, key: str, value: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    change = ConfigResource(ResourceType.GROUP, "parity-group", incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    (future,) = admin.incremental_alter_configs([change], validate_only=True).values()
    try:
        future.result(30)
        return "ok"
    except KafkaException as exc:
        return exc.args[0].name()


def test_group_configs_match_kafka_4_4(kafka_39, default_native):
    sidecar = SidecarThread({"bootstrap.servers": kafka_39.bootstrap, "persister": "memory"}).start()
    try:
        kshare = outcomes(sidecar.bootstrap)
        # kshare's own key (docs/compatibility.md): accepted here, unknown to Kafka, and absent
        # from the describe of all keys above while unset.
        assert _probe(sidecar.bootstrap, "share.assignor", "uniform") == "ok"
        assert _probe(sidecar.bootstrap, "share.assignor", "sticky") == "INVALID_CONFIG"
    finally:
        sidecar.stop()
    native = outcomes(default_native.bootstrap)
    assert _probe(default_native.bootstrap, "share.assignor", "simple") == "INVALID_CONFIG"
    assert native["share.renew.acknowledge.enable=true"] == "ok"  # the key the parity work started from
    differences = {k: (kshare.get(k), native.get(k)) for k in native.keys() | kshare.keys()
                   if kshare.get(k) != native.get(k)}
    assert not differences, "\n".join(f"{k}: kshare {a!r}, native {b!r}" for k, (a, b) in sorted(differences.items()))
