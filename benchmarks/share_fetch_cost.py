"""What one ShareFetch costs the sidecar: many small ShareFetches through one sidecar on Kafka 3.9.

The capacity model (docs/capacity.md) charges a sidecar per ShareFetch (with the acknowledgement
the member's next ShareFetch carries, and its state write) and per record beyond it; the 1M-record
throughput runs carry ~1,000 records per ShareFetch and cannot tell the two apart. Here the records
are produced in log batches of ``--records-per-fetch`` (whole batches are acquired, so that is what
a ShareFetch delivers) and ``--consumers`` confluent-kafka ``ShareConsumer`` processes
(``max.poll.records`` the same, implicit acknowledgement) drain them as fast as they can. From
the first record to the last: records/s, ShareFetches (the sidecar's /metrics), the sidecar's CPU
seconds (/proc), and the CPU per ShareFetch — with the model's share of it for the records
themselves subtracted, the figure ``UnitCosts.cpu_us_per_share_fetch`` is.

``--pyspy FILE``: a py-spy profile of the sidecar while it serves (speedscope JSON; with
``--pyspy-python`` Python frames only, sampled without stopping the sidecar — the native mode's
stops over-sample system calls: benchmarks/common.py, ``PySpy``).
Prints one line per round, then one JSON object as the LAST line; writes share_fetch_cost.json into
--out (default: $TMPDIR/kshare-bench).
Usage: python benchmarks/share_fetch_cost.py [--records 20000] [--records-per-fetch 5] [--consumers 4]
       [--record-size 1024] [--rounds 3]
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (CpuMeter, PySpy, SidecarProcess, base_parser, finish, free_port, loadavg, machine,
                    metric_sum, produce_records)

PARTITIONS = 4


def _worker(bootstrap: str, group: str, topic: str, per_fetch: int, total, stop) -> None:
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                              "max.poll.records": per_fetch})
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            n = sum(1 for m in consumer.poll(0.2) if not m.error())
            if n:
                with total.get_lock():
                    total.value += n
    finally:
        consumer.close()


def one_round(sc: SidecarProcess, backend: str, records: int, per_fetch: int, consumers: int, size: int,
              pyspy: Path | None, python_only: bool = False) -> dict:
    from kshare_sidecar.capacity import UnitCosts

    topic, group = f"fetchcost-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    produce_records(backend, topic, records, partitions=PARTITIONS, record_bytes=size,
                    producer_config={"linger.ms": 0, "batch.num.messages": per_fetch})
    ctx = mp.get_context("spawn")
    total, stop = ctx.Value("q", 0), ctx.Event()
    procs = [ctx.Process(target=_worker, args=(sc.bootstrap, group, topic, per_fetch, total, stop), daemon=True)
             for _ in range(consumers)]
    load = loadavg()
    for p in procs:
        p.start()
    deadline = time.monotonic() + 120
    while total.value == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    spy = PySpy(sc.proc.pid, pyspy, native=not python_only) if pyspy is not None else None
    cpu, before, n0, t0 = CpuMeter(sidecar=sc.proc.pid).start(), sc.samples(), total.value, time.monotonic()
    while total.value < records and time.monotonic() - t0 < 300:
        time.sleep(0.02)
    used, after, n1, t1 = cpu.stop()["sidecar"], sc.samples(), total.value, time.monotonic()
    if spy is not None:
        spy.stop()
    stop.set()
    for p in procs:
        p.join(15)
        if p.is_alive():
            p.kill()
    fetches = metric_sum(after, "kshare_total_share_fetch_requests_total") - \
        metric_sum(before, "kshare_total_share_fetch_requests_total")
    got = n1 - n0
    per_record_us = UnitCosts().cpu_s_per_1m_records(size)  # s per 1M records = µs per record
    out = {"records": got, "seconds": round(t1 - t0, 3), "records_per_s": round(got / (t1 - t0), 1),
           "share_fetches": int(fetches), "records_per_share_fetch": round(got / fetches, 2) if fetches else None,
           "sidecar_cpu_s": used, "loadavg_before": load}
    if fetches and used is not None:
        out["sidecar_cpu_us_per_share_fetch"] = round(used / fetches * 1e6)
        out["sidecar_cpu_us_per_share_fetch_beyond_records"] = round((used - got * per_record_us / 1e6) / fetches * 1e6)
    return out


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--records-per-fetch", type=int, default=5)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pyspy", type=Path, default=None, help="a py-spy profile of the sidecar (the last round)")
    ap.add_argument("--pyspy-python", action="store_true",
                    help="that profile with Python frames only, the sidecar not stopped per sample (unbiased shares)")
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds = 5_000, 1
    from kshare_sidecar.testing import KafkaBroker

    rounds = []
    with KafkaBroker("3.9") as broker:
        sc = SidecarProcess(broker.bootstrap, metrics_port=free_port())
        try:
            for i in range(args.rounds):
                r = one_round(sc, broker.bootstrap, args.records, args.records_per_fetch, args.consumers,
                              args.record_size, args.pyspy if i == args.rounds - 1 else None, args.pyspy_python)
                rounds.append(r)
                print(f"round {i + 1}: {r['records']} records in {r['seconds']} s ({r['records_per_s']:,.0f}/s), "
                      f"{r['share_fetches']} ShareFetches of {r['records_per_share_fetch']} records; sidecar "
                      f"{r['sidecar_cpu_s']} s CPU = {r.get('sidecar_cpu_us_per_share_fetch')} µs per ShareFetch "
                      f"({r.get('sidecar_cpu_us_per_share_fetch_beyond_records')} µs beyond its records); "
                      f"load {r['loadavg_before'][:1]}", flush=True)
        finally:
            sc.stop()
    summary = {"scenario": "share_fetch_cost", "parameters": vars(args) | {"out": str(args.out), "pyspy": str(args.pyspy)},
               "machine": machine(), "rounds": rounds}
    finish(summary, args.out, "share_fetch_cost")


if __name__ == "__main__":
    main()
