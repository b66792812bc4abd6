"""Throughput of a cluster of sidecars: 1, 2 and 3 sidecars on one Kafka 3.9 backend.

The throughput benchmark's workload (1 KiB records, 4 partitions, 4 confluent-kafka
ShareConsumer processes with implicit acknowledgement; --quick: 100k records, full: 1M), consumed
through a cluster of N sidecars (``cluster.name`` set, a fresh state topic per run, every consumer
given all sidecars as bootstrap). Per run: records/s, machine-wide CPU utilisation, the CPU seconds
of each sidecar, of the broker and of the consumer processes — also per 1M records, the *cost* of a
record, which stays comparable when the machine's cores bound the throughput — the CPU seconds of
everything else on the machine (other users), load averages, and how the 4 partitions' leadership
fell over the sidecars (4 user partitions are placed on the state partitions by hash: with 3
sidecars one of them may lead none, or two). The JSON has the scaling ratios (N sidecars ÷ 1
sidecar) of throughput (``scaling``) and of the sidecars' CPU seconds per record (``cost_scaling``).

Everything — broker, sidecars, consumers — shares this machine: on 2 cores the sidecars compete
with the broker and the consumers, so the throughput ratio measures that contention as much as
kshare; the cost ratio does not.

Each sidecar of a cluster tails the state topic for the group configs of groups other sidecars
coordinate; that tail reads in batches (at most about one fetch a second) rather than once per
state write of the whole cluster, which made the summed CPU per record grow with each sidecar
(the figures before and after: docs/capacity.md).

``--native`` runs the same workload on native Kafka 4.4 clusters of as many brokers as there
were sidecars (share groups on, the same consumers, the same partitions), in the same run: whether
a figure is kshare's or the client's shows there. librdkafka's share consumer, for one, slows
down natively too once a consumer's partitions are led by more than one broker.

``--client java`` consumes with Kafka's own Java share consumer instead (the
kafka-share-consumer-perf-test tool, ``ShareConsumerPerformance``, 4 consumer threads in one JVM
started with the tools' small heap and C1 only: its rate is the tool's as much as the servers').

Each sidecar's CPU is also split into user and system time (its own Python vs the kernel's work
for it), and ``--pyspy`` records every sidecar of each measured run with py-spy (native frames;
``pyspy_<N>_sidecars_node<i>.json``, read with benchmarks/pyspy_top.py). py-spy samples a thread
that waits for a CPU as busy: on a crowded 2-core host it puts time in ``socket.send`` that the
system CPU does not show.

Usage: python benchmarks/cluster.py [--quick] [--records N] [--sidecars 1,2,3] [--partitions P] [--record-bytes B]
       [--native] [--client confluent|java] [--pyspy] [--out DIR]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import (  # noqa: E402
    CpuMeter,
    CpuSampler,
    PySpy,
    SidecarProcess,
    base_parser,
    context_switches,
    finish,
    free_port,
    loadavg,
    machine,
    metric_sum,
    process_user_system_s,
    produce_records,
)
from throughput import CONSUMERS, PARTITIONS, consume  # noqa: E402


WARMUP_RECORDS = 200_000  # one unreported run through one sidecar first: the broker's JIT warms up there


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's reaped children (the consumer processes)."""
    t = os.times()
    return t.children_user + t.children_system


def _user_system(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a running process (its own Python vs the kernel's work for it)."""
    split = process_user_system_s(pid)
    if split is None:
        raise RuntimeError(f"cannot read the CPU time of process {pid}")
    return split


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    return sum(_user_system(pid))


def _idle_rates(pids: list[int], seconds: float) -> list[float]:
    """Each process's CPU seconds per second while nothing is consumed (timers, tails, a JVM's
    background), so that a figure per record can be had without it."""
    before, t0 = [_cpu_seconds(p) for p in pids], time.monotonic()
    time.sleep(seconds)
    wall = max(time.monotonic() - t0, 1e-9)
    return [(_cpu_seconds(p) - b) / wall for p, b in zip(pids, before)]


def _requests(before: list[dict], after: list[dict], records: int) -> dict:
    """Requests the sidecars served and sent, summed over them, per 1M records consumed: what the
    per-record CPU follows (a consumer sends a ShareFetch to every sidecar leading one of its
    partitions, so more sidecars mean more, smaller requests)."""
    def total(name: str) -> float:
        return sum(metric_sum(a, name) - metric_sum(b, name) for b, a in zip(before, after))

    names = {"share_fetch": "kshare_total_share_fetch_requests_total",
             "share_acknowledge": "kshare_total_share_acknowledgement_requests_total",
             "backend_fetch": "kshare_backend_fetch_requests_total",
             "state_writes": "kshare_share_coordinator_write_latency_seconds_count"}
    out: dict[str, float | None] = {k: round(total(v) / max(records, 1) * 1e6) for k, v in names.items()}
    delivered = total("kshare_share_fetch_delivered_bytes_total")
    out["read_amplification"] = round(total("kshare_backend_fetch_bytes_total") / delivered, 3) if delivered else None
    out["copied_per_delivered"] = round(total("kshare_record_bytes_copied_total") / delivered, 3) if delivered else None
    return out


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


def consume_with(client: str, bootstrap: str, group: str, topic: str, n: int, timeout_s: float,
                 record_bytes: int) -> dict:
    """:func:`throughput.consume` (``client`` "confluent"), or ShareConsumerPerformance's 4 threads ("java")."""
    if client != "java":
        return consume("share", bootstrap, group, topic, n, timeout_s, record_bytes, CpuMeter())
    from kshare_sidecar.testing.tools import run_java_tool

    run = run_java_tool("org.apache.kafka.tools.ShareConsumerPerformance",
                        ["--bootstrap-server", bootstrap, "--topic", topic, "--group", group, "--num-records",
                         str(n), "--threads", str(CONSUMERS), "--timeout", str(int(timeout_s * 1000))],
                        timeout=timeout_s + 60)
    lines = run.stdout.strip().splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)  # log lines may follow
    fields = dict(zip([f.strip() for f in lines[head].split(",")], [v.strip() for v in lines[head + 1].split(",")])) \
        if run.returncode == 0 and head is not None and head + 1 < len(lines) else {}
    if not fields:
        print(f"the Java tool's output had no result (exit {run.returncode}): {run.stdout[-500:]} {run.stderr[-500:]}",
              flush=True)
    got, fetch_ms = int(fields.get("data.consumed.in.nMsg", 0)), float(fields.get("fetch.time.ms", 0) or 0)
    seconds = fetch_ms / 1000 if fetch_ms else float("nan")
    return {"records": got, "seconds": round(seconds, 3), "records_per_s": round(got / seconds, 1) if fetch_ms else 0.0,
            "mb_per_s": round(got / seconds * record_bytes / 1e6, 2) if fetch_ms else 0.0, "complete": got >= n,
            "client": "java ShareConsumerPerformance", "tool_exit": run.returncode}


def run(bootstrap: str, topic: str, n: int, count: int, timeout_s: float, broker_pid: int,
        idle_s: float = 10.0, record_bytes: int = 1024, client: str = "confluent",
        pyspy: Path | None = None) -> dict:
    from tests.support import unique

    name, state_topic = unique("bench-cl"), f"__kshare_state_{unique('bench')}"
    sidecars = []
    try:
        for node in range(1, count + 1):
            sidecars.append(SidecarProcess(bootstrap, metrics_port=free_port(), env={
                "KSHARE_CLUSTER_NAME": name, "KSHARE_NODE_ID": str(node), "KSHARE_STATE_TOPIC": state_topic,
                "KSHARE_CLUSTER_SESSION_TIMEOUT_MS": "10000"}))
        leaders = settled(sidecars, topic)
        # a sidecar's cost while nothing is consumed (group membership, its tail of the state topic,
        # timers): measured first, so the per-record cost can be read without it
        idle_rate = _idle_rates([sc.proc.pid for sc in sidecars], idle_s)
        before = [_cpu_seconds(sc.proc.pid) for sc in sidecars]
        switches = [sum(context_switches(sc.proc.pid)) for sc in sidecars]
        user_system = [_user_system(sc.proc.pid) for sc in sidecars]
        scraped = [sc.samples() for sc in sidecars]
        broker_before, children_before, wall_before = _cpu_seconds(broker_pid), _children_cpu_s(), time.monotonic()
        load = loadavg()
        spies = [PySpy(sc.proc.pid, pyspy / f"pyspy_{count}_sidecars_node{i}.json", rate=200)
                 for i, sc in enumerate(sidecars, 1)] if pyspy is not None else []
        cpu = CpuSampler().start()
        bootstrap_list = ",".join(sc.bootstrap for sc in sidecars)  # each consumer may reach every sidecar
        result = consume_with(client, bootstrap_list, unique("bench-g"), topic, n, timeout_s, record_bytes)
        result["machine_cpu_utilisation"] = busy = cpu.stop()
        for spy in spies:
            spy.stop()
        wall = time.monotonic() - wall_before  # the sampled window: consumers' start-up and exit included
        result["sidecar_cpu_s"] = [round(_cpu_seconds(sc.proc.pid) - b, 2) for sc, b in zip(sidecars, before)]
        result["sidecar_cpu_utilisation"] = [round(c / result["seconds"], 3) for c in result["sidecar_cpu_s"]]
        cpu_s = {"sidecars": sum(result["sidecar_cpu_s"]), "broker": _cpu_seconds(broker_pid) - broker_before,
                 "consumers": _children_cpu_s() - children_before}  # consumer processes: reaped children
        if busy is not None:  # everything else busy on the machine meanwhile: other users' work
            cpu_s["others"] = max(0.0, busy * wall * (os.cpu_count() or 1) - sum(cpu_s.values()))
        result["cpu_s"] = {k: round(v, 2) for k, v in cpu_s.items()}
        result["requests_per_1m_records"] = _requests(scraped, [sc.samples() for sc in sidecars], result["records"])
        switched = sum(sum(context_switches(sc.proc.pid)) - b for sc, b in zip(sidecars, switches))
        result["requests_per_1m_records"]["sidecar_context_switches"] = round(
            switched / max(result["records"], 1) * 1e6)
        result["sidecar_user_system_cpu_s"] = [
            [round(a - b, 2) for a, b in zip(_user_system(sc.proc.pid), before_us)]
            for sc, before_us in zip(sidecars, user_system)]
        result["cpu_window_s"] = round(wall, 2)
        result["cpu_s_per_1m_records"] = {k: round(v / max(result["records"], 1) * 1e6, 2) for k, v in cpu_s.items()
                                          if k != "others"}
        result["sidecar_idle_cpu_per_s"] = [round(r, 4) for r in idle_rate]
        busy_sidecars = cpu_s["sidecars"] - sum(idle_rate) * wall  # the same idle cost over the consume window
        result["cpu_s_per_1m_records"]["sidecars_less_idle"] = round(busy_sidecars / max(result["records"], 1) * 1e6, 2)
        result["leaders"] = {str(p): node for p, node in sorted(leaders.items())}
        result["loadavg_before"] = load
        result["loadavg_after"] = loadavg()
        return result
    finally:
        for sc in sidecars:
            sc.stop()


def native_run(count: int, n: int, partitions: int, record_bytes: int, timeout_s: float, warmup: bool,
               client: str = "confluent", idle_s: float = 10.0) -> dict:
    """The same consume on a native Kafka 4.4 cluster of ``count`` brokers: records/s and the
    brokers' CPU seconds summed, per 1M records."""
    from kshare_sidecar.testing.multibroker import KafkaCluster
    from tests.support import set_group_config, unique

    with KafkaCluster("4.4", brokers=count, share_groups=True, heap="768m") as cluster:
        pids = [node._proc.pid for node in cluster.nodes if node._proc is not None]
        if warmup:
            warm, group = unique("cl-nwarm"), unique("cl-nwarm-g")
            produce_records(cluster.bootstrap, warm, WARMUP_RECORDS, partitions=partitions, record_bytes=record_bytes)
            set_group_config(cluster.bootstrap, group, {"share.auto.offset.reset": "earliest"})
            consume_with(client, cluster.bootstrap, group, warm, WARMUP_RECORDS, timeout_s, record_bytes)
        topic, group = unique("cl-native"), unique("cl-native-g")
        produce_records(cluster.bootstrap, topic, n, partitions=partitions, record_bytes=record_bytes)
        set_group_config(cluster.bootstrap, group, {"share.auto.offset.reset": "earliest"})
        # the brokers' background (a JVM's timers, the KRaft quorum's heartbeats) over the same
        # idle time as the sidecars', so that both clusters' figures can be had less idle
        idle_rate = sum(_idle_rates(pids, idle_s))
        load, before, t0 = loadavg(), sum(_cpu_seconds(p) for p in pids), time.monotonic()
        cpu = CpuSampler().start()
        result = consume_with(client, cluster.bootstrap, group, topic, n, timeout_s, record_bytes)
        result["machine_cpu_utilisation"] = cpu.stop()
        brokers, wall = sum(_cpu_seconds(p) for p in pids) - before, time.monotonic() - t0
        per_1m = 1e6 / max(result["records"], 1)
        result["cpu_s"] = {"brokers": round(brokers, 2)}
        result["brokers_idle_cpu_per_s"] = round(idle_rate, 4)
        result["cpu_s_per_1m_records"] = {"brokers": round(brokers * per_1m, 2),
                                          "brokers_less_idle": round((brokers - idle_rate * wall) * per_1m, 2)}
        result["loadavg_before"], result["loadavg_after"] = load, loadavg()
        return result


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--records", type=int)
    ap.add_argument("--sidecars", default="1,2,3", help="cluster sizes to run, e.g. 1,3")
    ap.add_argument("--timeout", type=float, default=None, help="per-run limit in seconds")
    ap.add_argument("--no-warmup", action="store_true", help="skip the unreported warm-up run")
    ap.add_argument("--partitions", type=int, default=PARTITIONS,
                    help="partitions of the topic (default 4; 12 divides evenly over 1, 2, 3 sidecars in number)")
    ap.add_argument("--record-bytes", type=int, default=1024, help="value size of the records (default 1 KiB)")
    ap.add_argument("--client", choices=("confluent", "java"), default="confluent",
                    help="the consumers: confluent-kafka processes (default) or Kafka's Java share consumer tool")
    ap.add_argument("--native", action="store_true",
                    help="also run the workload on native Kafka 4.4 clusters of 1, 2, 3 brokers (as --sidecars)")
    ap.add_argument("--pyspy", action="store_true", help="py-spy record (native frames) on every sidecar during "
                                                          "each measured run: pyspy_<N>_sidecars_node<i>.json in --out")
    args = ap.parse_args()
    n = args.records or (100_000 if args.quick else 1_000_000)
    timeout = args.timeout or (180 if args.quick else 1200)
    sizes = [int(x) for x in args.sidecars.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)

    from kshare_sidecar.testing import KafkaBroker
    from tests.support import unique

    results: dict[str, dict] = {}
    with KafkaBroker("3.9") as broker:
        assert broker._proc is not None
        broker_pid = broker._proc.pid
        topic = unique("cl-tput")
        produce_records(broker.bootstrap, topic, n, partitions=args.partitions, record_bytes=args.record_bytes)
        if not args.no_warmup:  # the broker's JIT warms up here, not in the first measured run
            warm = unique("cl-warm")
            produce_records(broker.bootstrap, warm, WARMUP_RECORDS, partitions=args.partitions,
                            record_bytes=args.record_bytes)
            run(broker.bootstrap, warm, WARMUP_RECORDS, 1, timeout, broker_pid, idle_s=0, client=args.client,
                record_bytes=args.record_bytes)
        for count in sizes:
            r = run(broker.bootstrap, topic, n, count, timeout, broker_pid, record_bytes=args.record_bytes,
                    client=args.client, pyspy=args.out if args.pyspy else None)
            results[f"{count}_sidecars"] = r
            print(f"{count} sidecar(s): {r['records']:>9} records in {r['seconds']:>8.2f} s  "
                  f"{r['records_per_s']:>10,.0f} rec/s  machine CPU {r['machine_cpu_utilisation']}, sidecar CPU s "
                  f"{r['sidecar_cpu_s']} ({r['cpu_s_per_1m_records']['sidecars']} per 1M records, "
                  f"{r['cpu_s_per_1m_records']['sidecars_less_idle']} less idle {r['sidecar_idle_cpu_per_s']}/s), broker "
                  f"{r['cpu_s_per_1m_records']['broker']}, consumers {r['cpu_s_per_1m_records']['consumers']} per 1M, "
                  f"others {r['cpu_s'].get('others')} s, requests per 1M {r['requests_per_1m_records']}, leaders "
                  f"{r['leaders']}, load {r['loadavg_before']}, "
                  f"user/system CPU s per sidecar {r['sidecar_user_system_cpu_s']}"
                  + ("" if r["complete"] else "  INCOMPLETE (timed out)"), flush=True)

    native: dict[str, dict] = {}
    for count in sizes if args.native else []:
        r = native_run(count, n, args.partitions, args.record_bytes, timeout, not args.no_warmup, args.client)
        native[f"{count}_brokers"] = r
        mine = results[f"{count}_sidecars"]
        r["kshare_to_native"] = round(mine["records_per_s"] / r["records_per_s"], 3) if r["records_per_s"] else None
        print(f"native 4.4, {count} broker(s): {r['records']:>9} records in {r['seconds']:>8.2f} s  "
              f"{r['records_per_s']:>10,.0f} rec/s  machine CPU {r['machine_cpu_utilisation']}, brokers "
              f"{r['cpu_s_per_1m_records']['brokers']} CPU s per 1M ({r['cpu_s_per_1m_records']['brokers_less_idle']} "
              f"less idle {r['brokers_idle_cpu_per_s']}/s); kshare's sidecars + broker "
              f"{mine['cpu_s_per_1m_records']['sidecars'] + mine['cpu_s_per_1m_records']['broker']:.2f}; kshare with "
              f"{count} sidecar(s) ÷ native "
              f"{r['kshare_to_native']}, load {r['loadavg_before']}"
              + ("" if r["complete"] else "  INCOMPLETE (timed out)"), flush=True)

    def ratio(k: int) -> float | None:
        a, b = results.get(f"{k}_sidecars"), results.get("1_sidecars")
        return round(a["records_per_s"] / b["records_per_s"], 3) if a and b and b["records_per_s"] else None

    def cost_ratio(k: int, key: str = "sidecars", table: dict = results, unit: str = "sidecars") -> float | None:
        """CPU per record with ``k`` servers ÷ with one (sidecars, or native brokers)."""
        a, b = table.get(f"{k}_{unit}"), table.get(f"1_{unit}")
        if not a or not b or not b["cpu_s_per_1m_records"][key]:
            return None
        return round(a["cpu_s_per_1m_records"][key] / b["cpu_s_per_1m_records"][key], 3)

    summary = {"scenario": "cluster", "client": args.client, "records": n, "record_bytes": args.record_bytes, "partitions": args.partitions,
               "consumers": CONSUMERS, "machine": machine(), "results": results,
               "scaling": {f"{k}_to_1": ratio(k) for k in sizes if k != 1},
               "cost_scaling": {f"{k}_to_1": cost_ratio(k) for k in sizes if k != 1},
               "cost_scaling_less_idle": {f"{k}_to_1": cost_ratio(k, "sidecars_less_idle") for k in sizes if k != 1}}
    if native:
        one = native.get("1_brokers")
        summary["native_4_4"] = native
        summary["native_scaling"] = {
            f"{k}_to_1": round(native[f"{k}_brokers"]["records_per_s"] / one["records_per_s"], 3)
            for k in sizes if k != 1 and one and one["records_per_s"]}
        # the same question of native brokers: does a record cost more when the load is spread?
        summary["native_cost_scaling"] = {f"{k}_to_1": cost_ratio(k, "brokers", native, "brokers")
                                          for k in sizes if k != 1}
        summary["native_cost_scaling_less_idle"] = {
            f"{k}_to_1": cost_ratio(k, "brokers_less_idle", native, "brokers") for k in sizes if k != 1}
    finish(summary, args.out, "cluster")


if __name__ == "__main__":
    main()
