"""Consumer scaling on ONE partition: kshare (sidecar on Kafka 3.9) vs native Kafka 4.x share groups.

1 partition, 10 ms of simulated work per record (time.sleep(0.01): I/O-like work that does not
burn CPU, so 32 consumers on a 2-core machine can overlap it), 1 / 4 / 16 / 32 confluent-kafka
``ShareConsumer`` processes with implicit acknowledgement. Ideal: 100 records/s per consumer.

So that work can spread, records are produced in small batches (``linger.ms=0``,
``batch.num.messages=5``: Kafka and kshare acquire whole log batches, so a 1,000-record producer
batch would go to one consumer) and consumers use ``max.poll.records=5``.

Per level: start N processes in a fresh share group (earliest), wait until all subscribed and every
consumer has finished at least one record (at most 30 s; a native group's assignment arrives with
a heartbeat), let the group settle ``--warmup`` more seconds, then count the records whose work
finished within a fixed window (``--window``). Reports records/s, the ratio to 1 consumer, how many
consumers did work in the window and the machine's CPU busy fraction during the window.

Prints one line per level, then one JSON object as the LAST line; writes scaling.json and
scaling.png into --out (default: $TMPDIR/kshare-bench).
Usage: python benchmarks/scaling.py [--quick] [--levels 1,4,16,32] [--only kshare,native] [--out DIR]
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
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
    produce_records,
    pyplot,
)

WORK_S = 0.010
RECORD_BYTES = 100
BATCH_NUM_MESSAGES = 5
MAX_POLL_RECORDS = 5


def _worker(idx: int, bootstrap: str, group: str, topic: str, counts, ready, stop) -> None:
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "max.poll.records": MAX_POLL_RECORDS})
    consumer.subscribe([topic])
    ready.release()
    try:
        while not stop.is_set():
            for msg in consumer.poll(0.5):
                if msg.error():
                    continue
                time.sleep(WORK_S)  # the simulated work
                counts[idx] += 1  # single writer per slot; the reader tolerates a stale value
    finally:
        consumer.close()


def run_level(bootstrap: str, group: str, topic: str, consumers: int, warmup: float, window: float,
              max_warmup: float = 30.0) -> dict:
    ctx = mp.get_context("spawn")
    counts = ctx.Array("q", consumers, lock=False)
    ready, stop = ctx.Semaphore(0), ctx.Event()
    procs = [ctx.Process(target=_worker, args=(i, bootstrap, group, topic, counts, ready, stop), daemon=True)
             for i in range(consumers)]
    t_spawn = time.monotonic()
    for p in procs:
        p.start()
    joined = 0
    deadline = time.monotonic() + 120
    while joined < consumers and time.monotonic() < deadline:
        if ready.acquire(timeout=1):
            joined += 1
    spawn_s = time.monotonic() - t_spawn
    # Warm-up: until every consumer has finished a record (a native group is assigned only at a
    # heartbeat, 5 s apart by default) or ``max_warmup`` passed, then ``warmup`` more seconds.
    t_warm = time.monotonic()
    while time.monotonic() - t_warm < max_warmup and not all(counts[i] > 0 for i in range(consumers)):
        time.sleep(0.2)
    all_started_s = time.monotonic() - t_warm
    time.sleep(warmup)
    cpu = CpuSampler().start()
    before, t0 = list(counts), time.monotonic()
    time.sleep(window)
    after, t1 = list(counts), time.monotonic()
    busy = cpu.stop()
    load = loadavg()
    stop.set()
    end = time.monotonic() + 30
    for p in procs:
        p.join(max(0.1, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
    deltas = [a - b for a, b in zip(after, before)]
    got = sum(deltas)
    return {"consumers": consumers, "subscribed": joined, "records": got, "seconds": round(t1 - t0, 3),
            "records_per_s": round(got / (t1 - t0), 1), "ideal_records_per_s": round(consumers / WORK_S, 1),
            "consumers_active": sum(1 for d in deltas if d > 0), "records_before_window": sum(before),
            "cpu_busy": busy, "loadavg": load, "spawn_s": round(spawn_s, 1),
            "until_all_consumers_started_s": round(all_started_s, 1)}


def run_side(label: str, bootstrap: str, topic: str, levels: list[int], warmup: float, window: float,
             group_for) -> list[dict]:
    rows = []
    for n in levels:
        r = run_level(bootstrap, group_for(n), topic, n, warmup, window)
        rows.append(r)
        print(f"{label:<7} {n:>3} consumers: {r['records_per_s']:>8,.1f} rec/s "
              f"(ideal {r['ideal_records_per_s']:,.0f}), "
              f"{r['consumers_active']}/{n} active, cpu busy {r['cpu_busy']}, load {r['loadavg']}", flush=True)
    base = rows[0]["records_per_s"] if rows and rows[0]["consumers"] == 1 else None
    for r in rows:
        r["ratio_to_1_consumer"] = round(r["records_per_s"] / base, 2) if base else None
    return rows


def plot(results: dict, png: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    levels = None
    for label, rows in results.items():
        xs = [r["consumers"] for r in rows]
        levels = xs
        ax1.plot(xs, [r["records_per_s"] for r in rows], marker="o", label=label)
        ax2.plot(xs, [r["ratio_to_1_consumer"] or 0 for r in rows], marker="o", label=label)
    if levels:
        ax1.plot(levels, [n / WORK_S for n in levels], ls="--", color="grey", label="ideal")
        ax2.plot(levels, levels, ls="--", color="grey", label="ideal")
    ax1.set_xlabel("consumers")
    ax1.set_ylabel("records/s")
    ax1.set_title("1 partition, 10 ms work/record")
    ax2.set_xlabel("consumers")
    ax2.set_ylabel("speed-up vs 1 consumer")
    ax2.set_title("scaling ratio")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels or [1])
        ax.set_xticklabels([str(x) for x in levels or [1]])
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png)
    return True


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--levels", default="1,4,16,32")
    ap.add_argument("--only", default="kshare,native")
    ap.add_argument("--warmup", type=float, help="seconds between all consumers started and the window")
    ap.add_argument("--window", type=float, help="measurement window per level, seconds")
    ap.add_argument("--records", type=int, help="records produced per broker (must outlast the largest level)")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    warmup = args.warmup or (2.0 if args.quick else 5.0)
    window = args.window or (12.0 if args.quick else 60.0)
    # Enough that the largest level cannot drain the partition: ideal rate x (start-up + warm-up +
    # window + slack).
    records = args.records or int(max(levels) / WORK_S * (warmup + window + 40) * 1.1)
    only = set(args.only.split(","))
    args.out.mkdir(parents=True, exist_ok=True)

    from kshare_sidecar.testing import KafkaBroker
    from tests.support import unique

    producer_config = {"linger.ms": 0, "batch.num.messages": BATCH_NUM_MESSAGES, "batch.size": 1_000_000}
    results: dict[str, list[dict]] = {}
    load_start = loadavg()
    if "kshare" in only:
        with KafkaBroker("3.9") as b39:
            topic = unique("scale")
            t = time.monotonic()
            produce_records(b39.bootstrap, topic, records, partitions=1, record_bytes=RECORD_BYTES,
                            producer_config=producer_config)
            print(f"produced {records} records in {time.monotonic() - t:.1f} s", flush=True)
            with SidecarProcess(b39.bootstrap) as sc:
                results["kshare_on_kafka_3_9"] = run_side("kshare", sc.bootstrap, topic, levels, warmup, window,
                                                          lambda n: unique(f"kshare-s{n}"))
    if "native" in only:
        with KafkaBroker("4") as b4:
            topic = unique("scale")
            produce_records(b4.bootstrap, topic, records, partitions=1, record_bytes=RECORD_BYTES,
                            producer_config=producer_config)
            results["native_kafka_4"] = run_side("native", b4.bootstrap, topic, levels, warmup, window,
                                                 lambda n: native_share_group(b4.bootstrap, unique(f"native-s{n}")))

    def at(label: str, n: int) -> dict | None:
        return next((r for r in results.get(label, []) if r["consumers"] == n), None)

    top = max(levels)
    k, nat = at("kshare_on_kafka_3_9", top), at("native_kafka_4", top)
    summary = {
        "scenario": "scaling", "partitions": 1, "work_ms_per_record": WORK_S * 1000, "record_bytes": RECORD_BYTES,
        "levels": levels, "warmup_s": warmup, "window_s": window, "records_produced": records,
        "producer": {"linger.ms": 0, "batch.num.messages": BATCH_NUM_MESSAGES},
        "consumer": {"max.poll.records": MAX_POLL_RECORDS, "acknowledgement": "implicit"},
        "machine": machine(), "loadavg_start": load_start, "loadavg_end": loadavg(),
        "results": results,
        f"ratio_kshare_{top}_to_1": k and k["ratio_to_1_consumer"],
        f"ratio_native_{top}_to_1": nat and nat["ratio_to_1_consumer"],
        f"ratio_kshare_to_native_at_{top}": (round(k["records_per_s"] / nat["records_per_s"], 3)
                                             if k and nat and nat["records_per_s"] else None),
    }
    finish(summary, args.out, "scaling", lambda png: plot(results, png))


if __name__ == "__main__":
    main()
