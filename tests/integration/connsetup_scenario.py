"""Run inside a network namespace of its own by tests/integration/test_connection_setup.py (as root):
connects to a listening port whose SYNs iptables drops, then to the same port once the rule is gone.
Prints one JSON line of what it measured.

Usage: python connsetup_scenario.py CHAIN
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

from aiokafka.client import AIOKafkaClient

from kshare_sidecar.backend.aiokafka_setup import bound
from kshare_sidecar.backend.brokerconn import BrokerConn, BrokerConnError
from kshare_sidecar.backend.connection_states import ClusterConnectionStates

BASE_MS, MAX_MS = 600, 1500  # socket.connection.setup.timeout[.max].ms, small to keep the test short
REQUEST_TIMEOUT_MS = 30_000  # what bounded a connect before
UNBOUND_REQUEST_TIMEOUT_MS = 2_000  # a client not given the schedule: aiokafka's own bound


def iptables(*args: str) -> None:
    subprocess.run(["iptables", *args], check=True, capture_output=True)


async def timed(coro) -> tuple[float, str]:
    start = time.monotonic()
    try:
        await coro
        outcome = "ok"
    except Exception as exc:  # noqa: BLE001 - the outcome is reported, the parent judges it
        outcome = f"{type(exc).__name__}: {exc}"
    return round(time.monotonic() - start, 3), outcome


async def main(chain: str) -> dict:
    accepted = 0

    def on_connect(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    iptables("-N", chain)
    iptables("-I", "INPUT", "-j", chain)
    iptables("-A", chain, "-p", "tcp", "--dport", str(port), "--syn", "-j", "DROP")
    states = ClusterConnectionStates(BASE_MS, MAX_MS)
    out: dict = {"port": port}

    async def broker_connect() -> None:
        conn = BrokerConn("127.0.0.1", port, setup=states)
        try:
            await conn.connect()
        finally:
            await conn.close()

    async def aiokafka_bootstrap(client: AIOKafkaClient) -> None:
        try:
            await client.bootstrap()
        finally:
            await client.close()

    # SYNs dropped: each attempt gives up after its setup timeout, which grows per failure
    out["brokerconn_1"] = await timed(broker_connect())
    out["brokerconn_2"] = await timed(broker_connect())
    out["aiokafka_3"] = await timed(aiokafka_bootstrap(bound(AIOKafkaClient(
        bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=REQUEST_TIMEOUT_MS), states)))
    out["failures_dropped"] = states.failures("127.0.0.1", port)
    # an aiokafka client not given the schedule keeps aiokafka's bound (its request timeout)
    out["aiokafka_unbound"] = await timed(aiokafka_bootstrap(AIOKafkaClient(
        bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=UNBOUND_REQUEST_TIMEOUT_MS)))
    out["failures_after_unbound"] = states.failures("127.0.0.1", port)
    # the drop removed: the next attempt connects, and the count starts again
    iptables("-F", chain)
    out["brokerconn_healed"] = await timed(broker_connect())
    out["failures_healed"] = states.failures("127.0.0.1", port)
    before = accepted
    # aiokafka's next attempt reaches the listener (which is no Kafka: it closes, so ApiVersions fails)
    out["aiokafka_healed"] = await timed(aiokafka_bootstrap(bound(AIOKafkaClient(
        bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=REQUEST_TIMEOUT_MS), states)))
    out["aiokafka_healed_accepted"] = accepted - before
    out["accepted"] = accepted
    server.close()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
