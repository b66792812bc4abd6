"""A backend connect whose SYNs are lost gives up after the connection setup timeout
(``socket.connection.setup.timeout.ms``, growing per consecutive failure), not after the request
timeout, and the next attempt connects once the network heals — for ``BrokerConn`` and for an
aiokafka client bound by backend/aiokafka_setup.py, while an aiokafka client not bound keeps
aiokafka's own bound.

Real fault: a network namespace made here (``conn…``), a listening socket in it and an iptables
DROP of the SYNs to its port (chain ``conn-drop``, in the namespace's own tables); the scenario
(connsetup_scenario.py) runs inside the namespace, which is deleted afterwards, also on failure.
About 7 s.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.netlab import available

SCENARIO = Path(__file__).with_name("connsetup_scenario.py")
BASE_S, MAX_S = 0.6, 1.5  # the scenario's socket.connection.setup.timeout[.max].ms
SLACK_S = 1.0  # a loaded machine schedules late; a connect bounded by the request timeout takes 30 s


def _unavailable() -> str | None:
    """The network lab's own check (root, iproute2), and iptables for the DROP rule."""
    return available() or (None if shutil.which("iptables") else "needs iptables")


@pytest.fixture
def namespace():
    why = _unavailable()
    if why:
        pytest.skip(why)
    ns = f"conn{os.getpid() % 100000}{secrets.token_hex(2)}"
    made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot make a network namespace: {made.stderr.strip()}")
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, capture_output=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def within(elapsed: float, timeout_s: float) -> bool:
    """Gave up at ``timeout_s`` with Kafka's ±20 % jitter (a loaded machine may be late)."""
    return 0.8 * timeout_s - 0.05 <= elapsed <= 1.2 * timeout_s + SLACK_S


def test_connect_with_dropped_syns_gives_up_after_the_setup_timeout_and_reconnects_when_healed(namespace):
    run = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, str(SCENARIO), "conn-drop"],
                         capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.splitlines()[-1])
    print(json.dumps(got, indent=1))
    (t1, e1), (t2, e2), (t3, e3) = got["brokerconn_1"], got["brokerconn_2"], got["aiokafka_3"]
    # 0 failures so far: the base; 1: doubled; 2: doubled again, capped at the max
    assert within(t1, BASE_S) and "not set up within" in e1, got
    assert within(t2, 2 * BASE_S) and "after 1 consecutive failures" in e2, got
    assert within(t3, MAX_S) and t3 <= MAX_S + SLACK_S and "KafkaConnectionError" in e3, got
    assert got["failures_dropped"] == 3
    # not given the schedule: aiokafka's own bound, its request timeout (2 s here), and no count
    assert got["aiokafka_unbound"][0] >= 1.9 and got["failures_after_unbound"] == 3, got
    # healed: the next attempt connects at once and the count starts again
    assert got["brokerconn_healed"][1] == "ok" and got["brokerconn_healed"][0] < 1, got
    assert got["failures_healed"] == 0
    # aiokafka's next attempt reaches the listener (no Kafka there: ApiVersions fails, not the connect)
    assert got["aiokafka_healed_accepted"] == 1 and got["aiokafka_healed"][0] < 1, got
