"""What a share-group heartbeat costs the server: kshare's sidecar against Kafka 4.4's own broker.

The scale benchmark's idle load — M members heartbeating at Kafka's default interval (5 s), one
TCP connection each, from benchmarks/scale_load.py (the protocol spoken directly, not client
processes) — served in the same run by (a) a sidecar on Kafka 3.9 and (c) a native Kafka 4.4
broker with share groups on. G groups of M/G members each subscribe to one topic of P
partitions; nobody fetches. Per server, from /proc:

- its CPU while idle with no members (measured first, over ``--idle`` seconds, ``--warm`` seconds
  after start-up), and while the
  members heartbeat (over ``--window`` seconds, after one heartbeat interval to settle the joins);
- **CPU µs per heartbeat** = (CPU in the window − the idle rate × the window) ÷ heartbeats, and
  the window's CPU as a share of one core — for (a) the sidecar (the 3.9 broker behind it: its
  shares only, a heartbeat does not reach it); for (c) the broker's JVM, all its threads;
- heartbeat latency p50/p99 as the members see it, errors, and the server's voluntary context
  switches per heartbeat (every thread's: a JVM hands a request between threads).

So the scale target "idle CPU ≤ 5 % of a core for 2,000 members" (≤ 125 µs per heartbeat) has a
reference: what Kafka's own group coordinator spends for the same members on the same host.

Usage: python benchmarks/heartbeat_cost.py [--quick] [--members 2000] [--groups 200]
       [--partitions 4] [--window 30] [--idle 10] [--rounds 1] [--only a,c] [--out DIR]
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import (
    SidecarProcess,
    base_parser,
    context_switches,
    finish,
    free_port,
    loadavg,
    machine,
    percentile,
)
from scale import LoadGens, _r, cpu_s, join, merged_errors, sidecar_env

from kshare_sidecar.testing.kafka import KafkaBroker

NAMES = {"a": "kshare_on_kafka_3_9", "c": "native_kafka_4_4"}


def all_threads_switches(pid: int) -> int:
    """Voluntary context switches of every thread (a JVM's request passes through several)."""
    return context_switches(pid, all_threads=True)[0]


def ensure_coordinator(bootstrap: str) -> None:
    """A FindCoordinator makes a native broker create its group-metadata topic, which a bare
    ShareGroupHeartbeat does not; the members would otherwise retry until something else did."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.describe_consumer_groups(["heartbeat-cost-probe"]).values():
        with contextlib.suppress(KafkaException):  # an unknown group is an answer: the topic exists now
            future.result(timeout=60)


def measure(bootstrap: str, pids: dict[str, int], args, run: str) -> dict:
    """Idle CPU, then the members joined and heartbeating; figures per process in ``pids``."""
    from tests.support import create_topic

    topic = f"hb-{run}"
    create_topic(bootstrap, topic, args.partitions)
    ensure_coordinator(bootstrap)
    time.sleep(args.warm)  # a JVM compiles and a sidecar loads for a while after start-up: not idle
    c0 = {k: cpu_s(p) for k, p in pids.items()}
    t0 = time.monotonic()
    time.sleep(args.idle)
    idle_rate = {k: (cpu_s(p) - c0[k]) / (time.monotonic() - t0) for k, p in pids.items()}
    groups = [(f"hb-{run}-g{g:04d}", topic, args.partitions) for g in range(args.groups)]
    entries = [(i % args.groups, str(uuid.uuid4())) for i in range(args.members)]
    gens = LoadGens(bootstrap, args.loadgens)
    try:
        join_s = join(gens, entries, groups)
        time.sleep(args.settle)
        gens.all({"cmd": "stats"})  # from here on
        c1 = {k: cpu_s(p) for k, p in pids.items()}
        s1 = {k: all_threads_switches(p) for k, p in pids.items()}
        t1 = time.monotonic()
        time.sleep(args.window)
        wall = time.monotonic() - t1
        cpu = {k: cpu_s(p) - c1[k] for k, p in pids.items()}
        switches = {k: all_threads_switches(p) - s1[k] for k, p in pids.items()}
        stats = gens.all({"cmd": "stats"})
    finally:
        gens.close()
    lat = sorted(x for s in stats for x in s["hb_ms"])
    errors = merged_errors(stats)
    beats = len(lat)
    out: dict = {"members": args.members, "groups": args.groups, "join_s": round(join_s, 2),
                 "heartbeats": beats, "heartbeats_per_s": round(beats / wall, 1),
                 "p50_ms": _r(percentile(lat, 50)), "p99_ms": _r(percentile(lat, 99)), "errors": errors,
                 "seconds": round(wall, 1), "loadavg_end": loadavg(), "processes": {}}
    for k in pids:
        beyond_idle = cpu[k] - idle_rate[k] * wall
        served = k != "backend_broker"  # a heartbeat does not reach the broker behind a sidecar
        out["processes"][k] = {
            "idle_cpu_share": round(idle_rate[k], 4), "cpu_share": round(cpu[k] / wall, 4),
            "cpu_share_beyond_idle": round(beyond_idle / wall, 4),
            "cpu_us_per_heartbeat": round(beyond_idle / beats * 1e6) if beats and served else None,
            "switches_per_heartbeat": round(switches[k] / beats, 2) if beats and served else None}
    return out


def run_kshare(args, run: str) -> dict:
    with KafkaBroker(args.backend) as broker:
        env = sidecar_env(f"__kshare_hb_{uuid.uuid4().hex[:8]}")
        with SidecarProcess(broker.bootstrap, metrics_port=free_port(), env=env) as sidecar:
            time.sleep(2)  # its start-up's one-time work is not idle CPU
            res = measure(sidecar.bootstrap, {"sidecar": sidecar.proc.pid, "backend_broker": _pid(broker)}, args, run)
    res["server"] = f"kshare sidecar on Kafka {broker.version}"
    return res


def run_native(args, run: str) -> dict:
    with KafkaBroker(args.native, share_groups=True) as broker:
        res = measure(broker.bootstrap, {"broker": _pid(broker)}, args, run)
    res["server"] = f"native Kafka {broker.version}"
    return res


def _pid(broker) -> int:
    proc = getattr(broker, "_proc", None)  # the harness keeps its process private
    if proc is None:
        raise RuntimeError(f"no process for {broker!r}")
    return proc.pid


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--members", type=int, default=2000)
    ap.add_argument("--groups", type=int, default=200, help="share groups the members are spread over")
    ap.add_argument("--partitions", type=int, default=4, help="partitions of the one topic every group subscribes to")
    ap.add_argument("--window", type=float, default=30.0, help="seconds of heartbeating measured")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measured before the members join")
    ap.add_argument("--warm", type=float, default=15.0, help="seconds after start-up before the idle measurement")
    ap.add_argument("--settle", type=float, default=6.0, help="seconds between the joins and the window")
    ap.add_argument("--loadgens", type=int, default=1, choices=(1, 2))
    ap.add_argument("--rounds", type=int, default=1, help="(a) then (c), this many times")
    ap.add_argument("--only", default="a,c", help="scenarios: a (kshare on 3.9), c (native 4.4)")
    ap.add_argument("--backend", default="3.9")
    ap.add_argument("--native", default="4")
    args = ap.parse_args()
    if args.quick:
        args.members, args.groups, args.window, args.idle = 400, 40, 10.0, 5.0
    if args.members < args.groups:
        ap.error("--members must be at least --groups (each group needs a member)")
    chosen = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = sorted(set(chosen) - set(NAMES))
    if unknown:
        ap.error(f"--only: unknown scenario {','.join(unknown)} (allowed: a, c)")
    rounds = []
    for r in range(args.rounds):
        results = {}
        for key in chosen:
            run = uuid.uuid4().hex[:6]
            results[NAMES[key]] = (run_kshare if key == "a" else run_native)(args, run)
            res = results[NAMES[key]]
            for name, p in res["processes"].items():
                per = (f"{p['cpu_us_per_heartbeat']} µs per heartbeat beyond idle, " if p["cpu_us_per_heartbeat"]
                       is not None else "")
                switched = (f", {p['switches_per_heartbeat']} context switches per heartbeat"
                            if p["switches_per_heartbeat"] is not None else "")
                print(f"round {r + 1} ({key}) {res['server']}: {name}: {per}{p['cpu_share'] * 100:.1f} % of a core "
                      f"heartbeating ({p['idle_cpu_share'] * 100:.2f} % idle){switched}", flush=True)
            print(f"round {r + 1} ({key}): {res['heartbeats']} heartbeats in {res['seconds']} s "
                  f"({res['heartbeats_per_s']}/s), p50/p99 {res['p50_ms']}/{res['p99_ms']} ms, errors "
                  f"{res['errors'] or 'none'}", flush=True)
        rounds.append(results)
    summary = {"benchmark": "heartbeat_cost", "machine": machine(), "parameters": {
        k: getattr(args, k) for k in ("members", "groups", "partitions", "window", "idle", "warm", "settle", "loadgens",
                                      "rounds", "only", "backend", "native")}, "rounds": rounds}
    per = [(r[NAMES["a"]]["processes"]["sidecar"]["cpu_us_per_heartbeat"],
            r[NAMES["c"]]["processes"]["broker"]["cpu_us_per_heartbeat"])
           for r in rounds if NAMES["a"] in r and NAMES["c"] in r]
    if per:
        summary["ratio_sidecar_to_native_per_heartbeat"] = [round(a / c, 2) if a and c else None for a, c in per]
        print("sidecar ÷ native broker, CPU per heartbeat: " + ", ".join(
            f"{a} / {c} µs" for a, c in per), flush=True)
    finish(summary, args.out, "heartbeat_cost")


if __name__ == "__main__":
    main()
