"""Produce -> deliver latency at a fixed rate: kshare (sidecar on Kafka 3.9) vs native Kafka 4.x.

A paced producer sends RATE records/s (default 5,000) for DURATION s (default 60; --quick 20) of
1 KiB records to a 4-partition topic; each record's value starts with the wall-clock time
(``time.time_ns()``) just before ``produce()``. 4 confluent-kafka ``ShareConsumer`` processes
(implicit acknowledgement) record ``receipt time - produce time`` for every record. The first
``--warmup`` seconds of producing (default 5 s) are sent but excluded from the percentiles. All
processes share one machine and one clock.

Producer: ``linger.ms=1``, ``acks=1`` (librdkafka's default linger of 5 ms would add up to 5 ms to
both systems alike).

Prints one line per system, then one JSON object as the LAST line; writes latency.json and
latency.png (latency CDF) into --out (default: $TMPDIR/kshare-bench).
Usage: python benchmarks/latency.py [--quick] [--rate N] [--duration S] [--only kshare,native] [--out DIR]
"""

from __future__ import annotations

import multiprocessing as mp
import struct
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    CpuSampler,
    SidecarProcess,
    base_parser,
    finish,
    loadavg,
    machine,
    native_share_group,
    percentile,
    pyplot,
)

RECORD_BYTES = 1024
PARTITIONS = 4
CONSUMERS = 4
HEADER = struct.Struct(">qq")  # produce time (ns since epoch), sequence number


def _worker(bootstrap: str, group: str, topic: str, measure_from_ns, ready, stop, results) -> None:
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    ready.release()
    lat_ms = array("d")
    seqs = array("q")
    try:
        while not stop.is_set():
            msgs = consumer.poll(0.5)
            now = time.time_ns()
            for msg in msgs:
                if msg.error():
                    continue
                sent, seq = HEADER.unpack_from(msg.value())
                seqs.append(seq)
                if sent >= measure_from_ns.value > 0:
                    lat_ms.append((now - sent) / 1e6)
    finally:
        consumer.close()
        results.put((lat_ms.tobytes(), seqs.tobytes()))


def run(bootstrap: str, group: str, topic: str, rate: int, duration: float, warmup: float,
        backend: str | None = None) -> dict:
    """Consume via ``bootstrap`` (the sidecar or a native broker); produce to ``backend``."""
    from confluent_kafka import Producer

    ctx = mp.get_context("spawn")
    measure_from, ready, stop, results = ctx.Value("q", 0), ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(bootstrap, group, topic, measure_from, ready, stop, results),
                         daemon=True) for _ in range(CONSUMERS)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire(timeout=120)
    time.sleep(3)  # let the group form before the first record

    producer = Producer({"bootstrap.servers": backend or bootstrap, "linger.ms": 1, "acks": 1})
    pad = b"\0" * (RECORD_BYTES - HEADER.size)
    cpu = CpuSampler()
    start = time.monotonic()
    total = warmup + duration
    sent = 0
    measured_start = None
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= total:
            break
        if measured_start is None and elapsed >= warmup:
            measure_from.value = time.time_ns()
            measured_start = time.monotonic()
            cpu.start()
        due = int(elapsed * rate)
        while sent < due:
            value = HEADER.pack(time.time_ns(), sent) + pad
            try:
                producer.produce(topic, value=value, partition=sent % PARTITIONS)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    produce_s = time.monotonic() - (measured_start or start)
    busy = cpu.stop()
    load = loadavg()
    producer.flush(30)
    time.sleep(5)  # drain: let the last records arrive
    stop.set()
    lat, seqs = array("d"), array("q")
    for _ in procs:
        try:
            lb, sb = results.get(timeout=30)
        except Exception:
            continue
        lat.frombytes(lb)
        seqs.frombytes(sb)
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    values = sorted(lat)
    distinct = len(set(seqs))
    pct = {f"p{q}".replace(".", ""): (round(v, 2) if (v := percentile(values, q)) is not None else None)
           for q in (50, 99, 99.9)}
    return {"sent": sent, "received": len(seqs), "received_distinct": distinct, "missing": sent - distinct,
            "measured_records": len(values), "measured_s": round(produce_s, 1),
            "achieved_rate": round((len(values) / produce_s) if produce_s else 0, 1),
            "p50_ms": pct["p50"], "p99_ms": pct["p99"], "p999_ms": pct["p999"],
            "max_ms": round(values[-1], 2) if values else None,
            "mean_ms": round(sum(values) / len(values), 2) if values else None,
            "cpu_busy": busy, "loadavg": load, "_latencies": values}


def plot(results: dict, png: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, r in results.items():
        v = r["_latencies"]
        if not v:
            continue
        n = len(v)
        # Plot the tail on a log scale: x = latency, y = 1 - CDF.
        step = max(1, n // 4000)
        xs = v[::step] + [v[-1]]
        ys = [1 - i / n for i in range(0, n, step)] + [1 / n]
        ax.plot(xs, ys, label=f"{label} (p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, p99.9 {r['p999_ms']} ms)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("produce -> deliver latency (ms)")
    ax.set_ylabel("fraction of records slower")
    ax.set_title("Latency tail at a fixed produce rate")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png)
    return True


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--rate", type=int, default=5000, help="records/s produced")
    ap.add_argument("--duration", type=float, help="measured seconds (default 60, --quick 20)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds produced before measuring")
    ap.add_argument("--only", default="kshare,native")
    args = ap.parse_args()
    duration = args.duration or (20.0 if args.quick else 60.0)
    only = set(args.only.split(","))

    from kshare_sidecar.testing import KafkaBroker
    from tests.support import create_topic, unique

    results: dict[str, dict] = {}
    load_start = loadavg()

    def report(label: str, r: dict) -> None:
        results[label] = r
        print(f"{label:<20} p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms  p99.9 {r['p999_ms']} ms  max {r['max_ms']} ms  "
              f"({r['measured_records']} records, {r['achieved_rate']:,.0f}/s, missing {r['missing']}, "
              f"cpu busy {r['cpu_busy']}, load {r['loadavg']})", flush=True)

    if "kshare" in only:
        with KafkaBroker("3.9") as b39:
            topic = unique("lat")
            create_topic(b39.bootstrap, topic, PARTITIONS)
            with SidecarProcess(b39.bootstrap) as sc:
                report("kshare_on_kafka_3_9", run(sc.bootstrap, unique("kshare-lat"), topic, args.rate, duration,
                                                  args.warmup, backend=b39.bootstrap))
    if "native" in only:
        with KafkaBroker("4") as b4:
            topic = unique("lat")
            create_topic(b4.bootstrap, topic, PARTITIONS)
            group = native_share_group(b4.bootstrap, unique("native-lat"))
            report("native_kafka_4", run(b4.bootstrap, group, topic, args.rate, duration, args.warmup))

    k, n = results.get("kshare_on_kafka_3_9"), results.get("native_kafka_4")
    summary = {
        "scenario": "latency", "rate": args.rate, "duration_s": duration, "warmup_s": args.warmup,
        "record_bytes": RECORD_BYTES, "partitions": PARTITIONS, "consumers": CONSUMERS,
        "producer": {"linger.ms": 1, "acks": 1}, "machine": machine(), "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "results": {label: {k2: v for k2, v in r.items() if not k2.startswith("_")} for label, r in results.items()},
        "p99_delta_kshare_minus_native_ms": (round(k["p99_ms"] - n["p99_ms"], 2)
                                             if k and n and k["p99_ms"] is not None and n["p99_ms"] is not None
                                             else None),
    }
    finish(summary, args.out, "latency", lambda png: plot(results, png))


if __name__ == "__main__":
    main()
