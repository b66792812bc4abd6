"""Run on the "client" host of tests/e2e/test_connection_setup_lab.py (a network namespace, as root):
aiokafka clients and a BrokerConn against a real Kafka on host "kafka", cut off by an iptables DROP
on the Kafka host (chain CHAIN in its namespace, every packet from and to this host: the client's SYNs
are lost on the way, as in a partition, rather than refused by its own kernel) and healed while
connects are in flight. Prints one JSON line.

Usage: python connsetup_lab_scenario.py BOOTSTRAP KAFKA_NS CLIENT_IP CHAIN
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

from aiokafka.client import AIOKafkaClient
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from kshare_sidecar.backend.aiokafka_setup import bound
from kshare_sidecar.backend.brokerconn import BrokerConn
from kshare_sidecar.backend.connection_states import ClusterConnectionStates
from kshare_sidecar.protocol.requests import request_payload

BASE_MS, MAX_MS = 2_000, 6_000  # socket.connection.setup.timeout[.max].ms, scaled down 5x
REQUEST_TIMEOUT_MS = 30_000
CUT_S = 8.0  # how long the link is down once the reconnect loops have started


def iptables(ns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "iptables", "-w", *args], check=True, capture_output=True)


async def bootstrap_once(bootstrap: str, states: ClusterConnectionStates | None) -> list[int]:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    bound(client, states)
    try:
        await client.bootstrap()
        return sorted(b.nodeId for b in client.cluster.brokers())
    finally:
        await client.close()


async def reconnect_loop(bootstrap: str, states: ClusterConnectionStates | None, healed: asyncio.Event,
                         out: dict, name: str) -> None:
    """As a sidecar's metadata refresh does: try again at once after each failure, until it works."""
    attempts = 0
    while True:
        attempts += 1
        try:
            brokers = await bootstrap_once(bootstrap, states)
        except Exception:  # noqa: BLE001 - the next attempt follows
            await asyncio.sleep(0.05)
            continue
        out[name] = {"attempts": attempts, "brokers": brokers,
                     "after_heal_s": round(time.monotonic() - out["healed_at"], 3) if healed.is_set() else None}
        return


async def main(bootstrap: str, kafka_ns: str, client_ip: str, chain: str) -> dict:
    host, _, port = bootstrap.rpartition(":")
    states = ClusterConnectionStates(BASE_MS, MAX_MS)
    out: dict = {}
    out["before"] = await bootstrap_once(bootstrap, states)  # bound clients work as before
    iptables(kafka_ns, "-N", chain)
    iptables(kafka_ns, "-I", "INPUT", "-j", chain)
    iptables(kafka_ns, "-I", "OUTPUT", "-j", chain)
    iptables(kafka_ns, "-A", chain, "-s", client_ip, "-j", "DROP")
    iptables(kafka_ns, "-A", chain, "-d", client_ip, "-j", "DROP")
    conn = BrokerConn(host, int(port), setup=states)
    start = time.monotonic()
    try:
        await conn.connect()
        out["brokerconn_cut"] = "connected?!"
    except Exception as exc:  # noqa: BLE001
        out["brokerconn_cut"] = [round(time.monotonic() - start, 3), str(exc)]
    healed = asyncio.Event()
    loops = [asyncio.create_task(reconnect_loop(bootstrap, states, healed, out, "bound")),
             asyncio.create_task(reconnect_loop(bootstrap, None, healed, out, "unbound"))]
    await asyncio.sleep(CUT_S)
    out["failures_at_heal"] = states.failures(host, int(port))
    iptables(kafka_ns, "-F", chain)
    out["healed_at"] = time.monotonic()
    healed.set()
    await asyncio.wait_for(asyncio.gather(*loops), REQUEST_TIMEOUT_MS / 1000 + 10)
    out["failures_after"] = states.failures(host, int(port))
    answer = await conn.request(request_payload(ApiVersionsRequest(), 0, "kshare-test"), timeout_s=10)
    out["brokerconn_api_versions_bytes"] = len(answer)
    await conn.close()
    del out["healed_at"]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:5]))))
