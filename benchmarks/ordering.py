"""Key-ordered vs unordered sharing on ONE partition (kshare's share.key.ordering, docs/extensions.md).

Shaped like Confluent Parallel Consumer's published comparison of its ordering modes: 1 partition,
10,000 records, uniform 0-5 ms of simulated work per record (time.sleep: I/O-like, so 16 consumer
processes on a small machine can overlap it), 16 confluent-kafka ``ShareConsumer`` processes with
implicit acknowledgement, key counts 1 / 10 / 100 / 10,000 (record i has key ``i % keys``);
each key count once unordered and once with ``share.key.ordering=true`` (a fresh topic and group
per run, sidecar on Kafka 3.9, records produced in 5-record batches: whole log batches are acquired).

Per run: the 16 processes start, subscribe, and the clock starts at the first record processed;
it stops when all records are processed or at --cap seconds (then the rate is over what was done).
Reports records/s, elapsed seconds, how many consumers did work, the ratio ordered/unordered per
key count, and the load average before and after. Ideal rate: 16 / 2.5 ms = 6,400 records/s.

Prints one line per run, then one JSON object as the LAST line; writes ordering.json (and
ordering.png with matplotlib) into --out (default: $TMPDIR/kshare-bench).
Usage: python benchmarks/ordering.py [--quick] [--keys 1,10,100,10000] [--records 10000] [--cap 120] [--pyspy]
"""

from __future__ import annotations

import multiprocessing as mp
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PySpy, SidecarProcess, base_parser, finish, free_port, loadavg, machine, metric_sum, pyplot

CONSUMERS = 16
WORK_MAX_S = 0.005
MAX_POLL_RECORDS = 5
BATCH_NUM_MESSAGES = 5


def _worker(idx: int, bootstrap: str, group: str, topic: str, counts, ready, stop) -> None:
    from confluent_kafka import ShareConsumer

    rng = random.Random(idx)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                              "max.poll.records": MAX_POLL_RECORDS})
    consumer.subscribe([topic])
    ready.release()
    try:
        while not stop.is_set():
            for msg in consumer.poll(0.2):
                if msg.error():
                    continue
                time.sleep(rng.uniform(0, WORK_MAX_S))  # the simulated work
                counts[idx] += 1
    finally:
        consumer.close()


def run(sc: SidecarProcess, backend: str, keys: int, ordered: bool, records: int, cap: float,
        pyspy: Path | None = None) -> dict:
    """One run, plus what the sidecar did for it (its /metrics before and after); ``pyspy``: a
    py-spy profile of the sidecar during the run into that file (speedscope; benchmarks/pyspy_top.py)."""
    before = sc.samples()
    spy = PySpy(sc.proc.pid, pyspy) if pyspy is not None else None
    try:
        out = _run(sc.bootstrap, backend, keys, ordered, records, cap)
    finally:
        if spy is not None:
            spy.stop()
    after = sc.samples()

    def d(name: str) -> float:
        return metric_sum(after, name) - metric_sum(before, name)

    fetches, delivered = d("kshare_total_share_fetch_requests_total"), d("kshare_share_fetch_delivered_records_total")
    out["share_fetches"] = int(fetches)
    out["share_acknowledges"] = int(d("kshare_total_share_acknowledgement_requests_total"))
    out["records_per_share_fetch"] = round(delivered / fetches, 2) if fetches else None
    out["backend_fetches"] = int(d("kshare_backend_fetch_requests_total"))  # reads and long polls
    out["sidecar_cpu_ms_per_1k_records"] = round(d("kshare_process_cpu_seconds_total") / max(out["records"], 1) * 1e6, 1)
    return out


def _run(bootstrap: str, backend: str, keys: int, ordered: bool, records: int, cap: float) -> dict:
    from tests.support import set_group_config, unique

    topic, group = unique(f"order-k{keys}"), unique("g")
    produce_keyed(backend, topic, records, keys)
    set_group_config(bootstrap, group, {"share.key.ordering": "true" if ordered else "false"})
    ctx = mp.get_context("spawn")
    counts = ctx.Array("q", CONSUMERS, lock=False)
    ready, stop = ctx.Semaphore(0), ctx.Event()
    procs = [ctx.Process(target=_worker, args=(i, bootstrap, group, topic, counts, ready, stop), daemon=True)
             for i in range(CONSUMERS)]
    load_before = loadavg()
    for p in procs:
        p.start()
    for _ in range(CONSUMERS):
        ready.acquire(timeout=120)
    deadline = time.monotonic() + 180
    while sum(counts) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    while sum(counts) < records and time.monotonic() - t0 < cap:
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    done = sum(counts)
    per = list(counts)
    load_after = loadavg()
    stop.set()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    return {"keys": keys, "mode": "key-ordered" if ordered else "unordered", "records": done,
            "complete": done >= records, "seconds": round(elapsed, 2), "records_per_s": round(done / elapsed, 1),
            "consumers_active": sum(1 for c in per if c), "loadavg_before": load_before, "loadavg_after": load_after}


def produce_keyed(backend: str, topic: str, records: int, keys: int) -> None:
    """Record i has key ``i % keys``; 5-record producer batches (whole log batches are acquired)."""
    from confluent_kafka import Producer

    from tests.support import create_topic

    create_topic(backend, topic, 1)
    producer = Producer({"bootstrap.servers": backend, "linger.ms": 0, "batch.num.messages": BATCH_NUM_MESSAGES,
                         "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=str(i % keys).encode(), value=b"x" * 100, partition=0)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def plot(rows: list[dict], png: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for mode in ("unordered", "key-ordered"):
        rs = [r for r in rows if r["mode"] == mode]
        ax.plot([r["keys"] for r in rs], [r["records_per_s"] for r in rs], marker="o", label=mode)
    ax.set_xscale("log")
    ax.set_xlabel("distinct keys")
    ax.set_ylabel("records/s")
    ax.set_title("1 partition, 16 consumers, 0-5 ms work/record")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png)
    return True


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--keys", default="1,10,100,10000")
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--cap", type=float, help="seconds a run may take before it is cut (default 120, quick 40)")
    ap.add_argument("--pyspy", action="store_true", help="py-spy record (native frames) on the sidecar during each "
                                                          "run: pyspy_<keys>_<mode>.json in --out")
    args = ap.parse_args()
    keys = [int(k) for k in args.keys.split(",")]
    records = 2_000 if args.quick and args.records == 10_000 else args.records
    cap = args.cap or (40.0 if args.quick else 120.0)

    from kshare_sidecar.testing import KafkaBroker

    rows = []
    load_start = loadavg()
    if args.pyspy:
        args.out.mkdir(parents=True, exist_ok=True)  # py-spy writes its profiles there during the runs
    with KafkaBroker("3.9") as b39, SidecarProcess(b39.bootstrap, metrics_port=free_port()) as sc:
        for k in keys:
            for ordered in (False, True):
                spy = args.out / f"pyspy_{k}_{'ordered' if ordered else 'unordered'}.json" if args.pyspy else None
                r = run(sc, b39.bootstrap, k, ordered, records, cap, spy)
                rows.append(r)
                print(f"{k:>6} keys {r['mode']:<12} {r['records_per_s']:>8,.1f} rec/s  {r['records']} records in "
                      f"{r['seconds']} s{'' if r['complete'] else ' (cut at the cap)'}, "
                      f"{r['consumers_active']}/{CONSUMERS} consumers active, {r['records_per_share_fetch']} records "
                      f"per ShareFetch, {r['share_acknowledges']} ShareAcknowledges, {r['backend_fetches']} backend Fetches, sidecar CPU {r['sidecar_cpu_ms_per_1k_records']} ms per 1k records, "
                      f"load {r['loadavg_after']}", flush=True)
    ratios = {}
    for k in keys:
        u = next(r for r in rows if r["keys"] == k and r["mode"] == "unordered")
        o = next(r for r in rows if r["keys"] == k and r["mode"] == "key-ordered")
        ratios[str(k)] = round(o["records_per_s"] / u["records_per_s"], 3) if u["records_per_s"] else None
    summary = {"scenario": "ordering", "machine": machine(), "consumers": CONSUMERS, "records": records,
               "work_ms": "uniform 0-5", "cap_s": cap, "loadavg_start": load_start, "loadavg_end": loadavg(),
               "runs": rows, "ordered_over_unordered": ratios}
    finish(summary, args.out, "ordering", lambda png: plot(rows, png))


if __name__ == "__main__":
    main()
