"""Pass-through throughput: produce and plain-consumer fetch through the sidecar ÷ direct.

One embedded Kafka 3.9 and one ``kshare sidecar run`` subprocess. Four runs, interleaved so that
machine noise hits both sides alike: produce direct, produce through the sidecar (1 KiB records,
librdkafka producer, acks=all), then a plain consumer group reading each topic back (direct,
through the sidecar). Each is repeated ``--rounds`` times; the best of each side is reported with
the ratios and the sidecar's CPU seconds. Target: both ratios ≥ 0.8 on this machine.

    python benchmarks/passthrough.py [--quick] [--records N] [--rounds R] [--out DIR]
"""

from __future__ import annotations

import resource
import time

from common import CpuSampler, SidecarProcess, base_parser, finish, loadavg, machine

RECORD_BYTES = 1024
PARTITIONS = 4


def produce(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": "all",
                         "queue.buffering.max.kbytes": 1 << 20})
    value = b"x" * RECORD_BYTES
    failed: list = []
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda err, _m: failed.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.005)
    remaining = producer.flush(120)
    seconds = time.perf_counter() - start
    if remaining or failed:
        raise RuntimeError(f"{remaining} undelivered, {len(failed)} failed: {failed[:3]}")
    return seconds


def consume(bootstrap: str, group: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, start = 0, None
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        batch = consumer.consume(10_000, 1.0)
        if batch and start is None:
            start = time.perf_counter()  # from the first record: group join is not fetch throughput
        got += sum(1 for m in batch if m.error() is None)
    seconds = time.perf_counter() - (start or time.perf_counter())
    consumer.close()
    if got < n:
        raise RuntimeError(f"consumed {got} of {n}")
    return seconds


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--records", type=int)
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args()
    n = args.records or (100_000 if args.quick else 500_000)
    rounds = args.rounds or (1 if args.quick else 3)

    from confluent_kafka.admin import AdminClient, NewTopic

    from kshare_sidecar.testing import KafkaBroker

    runs: dict[str, list[float]] = {"produce_direct": [], "produce_sidecar": [], "fetch_direct": [],
                                    "fetch_sidecar": []}
    with KafkaBroker("3.9") as broker:
        sidecar = SidecarProcess(broker.bootstrap)
        cpu = CpuSampler()
        cpu.start()
        sidecar_cpu_before = _cpu_seconds(sidecar.proc.pid)
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for r in range(rounds):
                topics = {side: f"pt-{side}-{r}-{int(time.time())}" for side in ("direct", "sidecar")}
                for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics.values()]).values():
                    f.result(60)
                time.sleep(1)
                for side, bootstrap in (("direct", broker.bootstrap), ("sidecar", sidecar.bootstrap)):
                    runs[f"produce_{side}"].append(n / produce(bootstrap, topics[side], n))
                for side, bootstrap in (("direct", broker.bootstrap), ("sidecar", sidecar.bootstrap)):
                    runs[f"fetch_{side}"].append(n / consume(bootstrap, f"g-{side}-{r}", topics[side], n))
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} rec/s" for k, v in runs.items()), flush=True)
            sidecar_cpu = _cpu_seconds(sidecar.proc.pid) - sidecar_cpu_before
        finally:
            busy = cpu.stop()
            sidecar.stop()

    best = {k: max(v) for k, v in runs.items()}
    summary = {
        "scenario": "passthrough", "records": n, "rounds": rounds, "record_bytes": RECORD_BYTES,
        "partitions": PARTITIONS, "machine": machine(), "loadavg": loadavg(), "machine_cpu_busy": busy,
        "records_per_s": {k: [round(x) for x in v] for k, v in runs.items()},
        "best_records_per_s": {k: round(v) for k, v in best.items()},
        "ratio_produce": round(best["produce_sidecar"] / best["produce_direct"], 3),
        "ratio_fetch": round(best["fetch_sidecar"] / best["fetch_direct"], 3),
        "sidecar_cpu_s": round(sidecar_cpu, 2),
        "sidecar_cpu_s_per_1m_records": round(sidecar_cpu / (2 * n * rounds) * 1e6, 2),
        "bench_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(f"produce: sidecar ÷ direct = {summary['ratio_produce']}   fetch: sidecar ÷ direct = "
          f"{summary['ratio_fetch']}   (target ≥ 0.8)", flush=True)
    finish(summary, args.out, "passthrough")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (from /proc; 0 when unreadable)."""
    import os

    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


if __name__ == "__main__":
    main()
