"""The backend matrix's two extremes (``make test-backends``): Kafka 4.0 and 4.1 with their share
groups switched on (early access and preview; off as the releases ship them, which the matrix
runs), and Kafka 2.4, too old for kshare's default state write mode, refused at start-up. A module
of their own: each starts its own broker, after the matrix's last release has stopped."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kshare_sidecar.testing.kafka import KafkaBroker, free_port
from tests.e2e.backends.conftest import backend_profile
from tests.e2e.backends.test_backend_matrix import beside_native
from tests.e2e.conftest import SidecarProcess

pytestmark = [pytest.mark.kafka, pytest.mark.optin("backends"), pytest.mark.timeout(600)]


@pytest.mark.parametrize("version", ["4.0.1", "4.1.1"])
def test_beside_native_switched_on(version, tmp_path):
    """kshare beside the backend's own share groups, switched on: each serves its own group."""
    with KafkaBroker(version, share_groups=True, heap="768m") as broker:
        assert backend_profile(broker.bootstrap).native_share_groups()
        sc = SidecarProcess(broker.bootstrap, tmp_path / "sidecar.log").start()
        try:
            beside_native(broker, sc)
            log = sc.log_path.read_text(errors="replace")
            assert "the backend's own share groups are not reachable through kshare" in log, log[-2000:]
        finally:
            sc.stop()


def test_refused(tmp_path, matrix_found):
    """Kafka 2.4 has InitProducerId v0-v2 only: the default mode (fenced, with its refresh) is
    refused in one line naming the release, the API and what to do."""
    with KafkaBroker("2.4", heap="512m") as broker:
        profile = backend_profile(broker.bootstrap)
        matrix_found.setdefault(broker.version, {})["profile"] = {"metadata": broker.metadata, "release": profile.release,
                                                           "mode": profile.mode,
                                                           "differences": profile.differences()}
        done = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "sidecar", "run", "--bootstrap-server",
                               broker.bootstrap, "--listen", f"127.0.0.1:{free_port()}"],
                              capture_output=True, text=True, timeout=120)
    output = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1 and len(output) == 1, output
    line = output[0].split("start-up failed: ", 1)[1]
    matrix_found["2.4.1"]["line"] = line
    assert line.startswith("backend Kafka 2.4 (ZooKeeper), from its ApiVersions: state.write.mode = 'fenced' "
                           "needs InitProducerId v3+"), line
    print(f"\n[Kafka 2.4.1] {output[0]}")


test_refused.matrix_version = "2.4.1"  # type: ignore[attr-defined]


def test_three_brokers_on_one_zookeeper_from_the_cli():
    """`kshare dev broker --kafka 2.8 --brokers 3`: three 2.8 brokers on one ZooKeeper, a topic
    replicated three times, and nothing left after Ctrl-C (brokers, ZooKeeper, their directories)."""
    import json
    import os
    import signal

    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.integration.test_dev_broker_cli import _children
    from tests.support import produce, unique

    proc = subprocess.Popen([sys.executable, "-m", "kshare_sidecar.cli", "dev", "broker", "--kafka", "2.8",
                             "--brokers", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert (info["version"], info["metadata"], info["brokers"]) == ("2.8.2", "zookeeper", 3)
        assert len(info["bootstrap"].split(",")) == 3
        descendants = _children(proc.pid)
        cmdlines = [open(f"/proc/{p}/cmdline", "rb").read() for p in descendants if os.path.exists(f"/proc/{p}")]
        assert sum(b"QuorumPeerMain" in c for c in cmdlines) == 1 and sum(b"kafka.Kafka" in c for c in cmdlines) == 3
        admin = AdminClient({"bootstrap.servers": info["bootstrap"]})
        topic = unique("zk3")
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(60)
        meta = admin.list_topics(topic, timeout=30).topics[topic]
        assert all(len(p.replicas) == 3 for p in meta.partitions.values())
        produce(info["bootstrap"], topic, 30, partitions=3)
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=120)
    assert rc == 0
    assert [p for p in descendants if os.path.exists(f"/proc/{p}")] == []
