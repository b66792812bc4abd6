"""Throughput of a cluster of sidecars (issue 15): 1, 2 and 3 sidecars on one Kafka 3.9 backend.

The throughput benchmark's workload (1 KiB records, 4 partitions, 4 confluent-kafka
ShareConsumer processes with implicit acknowledgement; --quick: 100k records, full: 1M), consumed
through a cluster of N sidecars (``cluster.name`` set, a fresh state topic per run, consumers
bootstrapped round-robin to different sidecars). Per run: records/s, machine-wide CPU
utilisation, each sidecar's CPU seconds, and how the 4 partitions' leadership fell over the
sidecars (4 user partitions are placed on the state partitions by hash: with 3 sidecars one of
them may lead none, or two). The JSON has the scaling ratios (N sidecars ÷ 1 sidecar).

Everything — broker, sidecars, consumers — shares this machine: on 2 cores the sidecars compete
with the broker and the consumers, so the ratio measures that contention as much as kshare.

Usage: python benchmarks/cluster.py [--quick] [--records N] [--sidecars 1,2,3] [--out DIR]
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import CpuSampler, SidecarProcess, base_parser, finish, free_port, loadavg, machine  # noqa: E402
from throughput import CONSUMERS, PARTITIONS, RECORD_BYTES, consume, prepare_topic  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (from /proc)."""
    import os
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _leaders(port: int, topic: str) -> tuple[set[int], dict[int, int]]:
    from kshare_sidecar.client import protocol
    from kshare_sidecar.client.conn import NodeConn

    conn = NodeConn(-1, "127.0.0.1", port, "kshare-bench", timeout_s=10)
    try:
        resp = await conn.call(protocol.metadata([topic]))
    finally:
        await conn.close()
    (t,) = resp.topics
    return {b.node_id for b in resp.brokers}, {p.partition_index: p.leader_id for p in t.partitions}


def settled(sidecars: list[SidecarProcess], topic: str, timeout_s: float = 90) -> dict[int, int]:
    """Wait until every sidecar lists all of them and names the same leaders; return the leaders."""
    want = set(range(1, len(sidecars) + 1))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            views = [asyncio.run(_leaders(sc.port, topic)) for sc in sidecars]
            if all(b == want for b, _ in views) and all(v[1] == views[0][1] for v in views) \
                    and set(views[0][1].values()) <= want:
                return views[0][1]
        except Exception:  # noqa: BLE001 - still starting
            pass
        time.sleep(0.5)
    raise RuntimeError("the sidecars did not agree on the cluster")


def run(bootstrap: str, topic: str, n: int, count: int, timeout_s: float) -> dict:
    from tests.support import unique

    name, state_topic = unique("bench-cl"), f"__kshare_state_{unique('bench')}"
    sidecars = []
    try:
        for node in range(1, count + 1):
            sidecars.append(SidecarProcess(bootstrap, metrics_port=free_port(), env={
                "KSHARE_CLUSTER_NAME": name, "KSHARE_NODE_ID": str(node), "KSHARE_STATE_TOPIC": state_topic,
                "KSHARE_CLUSTER_SESSION_TIMEOUT_MS": "10000"}))
        leaders = settled(sidecars, topic)
        before = [_cpu_seconds(sc.proc.pid) for sc in sidecars]
        load = loadavg()
        cpu = CpuSampler().start()
        bootstrap_list = ",".join(sc.bootstrap for sc in sidecars)  # each consumer may reach every sidecar
        result = consume("share", bootstrap_list, unique("bench-g"), topic, n, timeout_s)
        result["machine_cpu_utilisation"] = cpu.stop()
        result["sidecar_cpu_s"] = [round(_cpu_seconds(sc.proc.pid) - b, 2) for sc, b in zip(sidecars, before)]
        result["sidecar_cpu_utilisation"] = [round(c / result["seconds"], 3) for c in result["sidecar_cpu_s"]]
        result["leaders"] = {str(p): node for p, node in sorted(leaders.items())}
        result["loadavg_before"] = load
        result["loadavg_after"] = loadavg()
        return result
    finally:
        for sc in sidecars:
            sc.stop()


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--records", type=int)
    ap.add_argument("--sidecars", default="1,2,3", help="cluster sizes to run, e.g. 1,3")
    ap.add_argument("--timeout", type=float, default=None, help="per-run limit in seconds")
    args = ap.parse_args()
    n = args.records or (100_000 if args.quick else 1_000_000)
    timeout = args.timeout or (180 if args.quick else 1200)
    sizes = [int(x) for x in args.sidecars.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)

    from kshare_sidecar.testing import KafkaBroker
    from tests.support import unique

    results: dict[str, dict] = {}
    with KafkaBroker("3.9") as broker:
        topic = unique("cl-tput")
        prepare_topic(broker.bootstrap, topic, n)
        for count in sizes:
            r = run(broker.bootstrap, topic, n, count, timeout)
            results[f"{count}_sidecars"] = r
            print(f"{count} sidecar(s): {r['records']:>9} records in {r['seconds']:>8.2f} s  "
                  f"{r['records_per_s']:>10,.0f} rec/s  machine CPU {r['machine_cpu_utilisation']}, sidecar CPU s "
                  f"{r['sidecar_cpu_s']}, leaders {r['leaders']}, load {r['loadavg_before']}"
                  + ("" if r["complete"] else "  INCOMPLETE (timed out)"), flush=True)

    def ratio(k: int) -> float | None:
        a, b = results.get(f"{k}_sidecars"), results.get("1_sidecars")
        return round(a["records_per_s"] / b["records_per_s"], 3) if a and b and b["records_per_s"] else None

    summary = {"scenario": "cluster", "records": n, "record_bytes": RECORD_BYTES, "partitions": PARTITIONS,
               "consumers": CONSUMERS, "machine": machine(), "results": results,
               "scaling": {f"{k}_to_1": ratio(k) for k in sizes if k != 1}}
    finish(summary, args.out, "cluster")


if __name__ == "__main__":
    main()
