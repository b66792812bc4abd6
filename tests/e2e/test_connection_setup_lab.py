"""The connection setup timeout against a real Kafka across a real partition (``make test-connsetup``):
a client host and a Kafka host, network namespaces of a lab made here (tests/e2e/netlab.py, named
``conn…``); the Kafka host drops every packet from and to the client host for 8 s while clients keep
trying to bootstrap, then lets them through.

Measured side by side in one run: how long after the heal a client bound by the setup schedule
(backend/aiokafka_setup.py; 2 s doubling to 6 s here, Kafka's 10 → 30 s scaled down) and a plain
aiokafka client (a connect bounded by its 30 s request timeout, waiting out TCP's SYN
retransmissions at 1, 3, 7, 15 s) first get Kafka's metadata. ~1 minute with Kafka's start-up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.netlab import Lab, LabKafka, available

pytestmark = pytest.mark.optin("connsetup")

SCENARIO = Path(__file__).with_name("connsetup_lab_scenario.py")
KAFKA_ENV = {
    "KAFKA_NODE_ID": "1", "KAFKA_PROCESS_ROLES": "broker,controller", "CLUSTER_ID": "a3NoYXJlAAAAAAAAAAADkA",
    "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
    "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://kafka:9092",
    "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER", "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@kafka:9093",
    "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
}


@pytest.fixture
def lab(tmp_path):
    why = available()
    if why:
        pytest.skip(why)
    with Lab(tmp_path, name="conn") as lab:
        yield lab
    assert lab.leftovers() == [], "the lab left namespaces or hosts files behind"


def test_a_bound_client_reconnects_soon_after_a_partition_heals(lab):
    lab.add_host("kafka")
    lab.add_host("client")
    kafka = LabKafka(lab, "kafka", KAFKA_ENV, probe_from="client", bootstrap="kafka:9092")
    kafka.heap = "512m"
    kafka.start()
    try:
        run = lab.python("client", SCENARIO.read_text(), "kafka:9092", lab.hosts["kafka"].ns, lab.hosts["client"].ip,
                         "conn-x", timeout=180)
    finally:
        kafka.stop()
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    print(json.dumps(got, indent=1))
    assert got["before"] == [1]
    took, why = got["brokerconn_cut"]
    assert 1.6 - 0.05 <= took <= 2.4 + 1.0 and "not set up within" in why, got
    assert got["failures_at_heal"] >= 2  # the bound loop's attempts gave up one after another
    bound, unbound = got["bound"], got["unbound"]
    assert bound["brokers"] == unbound["brokers"] == [1]
    # the attempt in flight at the heal gives up within the 6 s max; the next one connects at once
    assert bound["after_heal_s"] is not None and bound["after_heal_s"] <= 6 * 1.2 + 1, got
    assert got["failures_after"] == 0
    assert got["brokerconn_api_versions_bytes"] > 0
