"""The Spark source's driver alone: what one trigger's ``latestOffset`` costs, per driver client.

Why apart from ``spark_source.py``: Spark's ``durationMs.latestOffset`` mixes the driver's work
with Spark's own (Py4J calls, offset serialization) and the load of a whole query; this drains a
topic with the driver's acquirer exactly as ``latestOffset`` drives it — acknowledge the previous
batch, then acquire the next — without Spark, so the two driver clients (``shareClient``:
``kshare``, the asyncio client in offsets-only mode, and ``librdkafka``) are compared side by
side, natively (Kafka 4.3) and through a sidecar process on Kafka 3.9, in one run (until 2026-11-27 the
sidecar ran on a thread of this process, sharing the GIL with the client under test).

    python benchmarks/spark_driver.py                  # 400k records, 2 rounds (figure of record)
    python benchmarks/spark_driver.py --quick          # 100k records, 1 round (smoke test)

Prints per round, target and client: batches, mean batch, ms per batch (mean, median, p90,
excluding the first two: joining the group), the time inside the acquirer's steps, and the
kshare / librdkafka ratio of the mean.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_source import broker_limits, produce, set_group, sidecar_process  # noqa: E402


def drain(client: str, bootstrap: str, topic: str, records: int, per_trigger: int, locks: int) -> dict:
    from kshare_sidecar.spark import ranges as R
    from kshare_sidecar.spark.acquire import LibrdkafkaAcquirer
    from kshare_sidecar.spark.acquire_ranges import RangeAcquirer
    from kshare_sidecar.spark.options import parse_options

    group = f"bench-driver-{uuid.uuid4().hex[:6]}"
    set_group(bootstrap, group, locks)
    opts = parse_options({"kafka.bootstrap.servers": bootstrap, "group": group, "subscribe": topic,
                          "maxRecordsPerTrigger": str(per_trigger), "lockDurationMs": "60000",
                          "shareClient": client})
    acq = (RangeAcquirer if client == "kshare" else LibrdkafkaAcquirer)(opts)
    seq = total = 0
    times: list[float] = []
    sizes: list[int] = []
    deadline = time.monotonic() + 300
    try:
        while total < records and time.monotonic() < deadline:
            started = time.perf_counter()
            acq.acknowledge_through(seq - 1)  # as latestOffset does: the previous batch is done
            got = acq.acquire(seq, 2.0)
            elapsed = time.perf_counter() - started
            n = R.count(got)
            if n:
                times.append(elapsed * 1000)
                sizes.append(n)
            total += n
            seq += 1
        acq.acknowledge_through(seq)
    finally:
        acq.close()
    warm = sorted(times[2:]) or sorted(times)
    return {"records": total, "batches": len(sizes), "mean_batch": round(statistics.mean(sizes)),
            "ms_mean": round(statistics.mean(warm), 1), "ms_median": round(statistics.median(warm), 1),
            "ms_p90": round(warm[int(len(warm) * 0.9)], 1),
            "steps_s": {k: round(v, 2) for k, v in acq.timings.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--per-trigger", type=int, default=20_000)
    ap.add_argument("--record-locks", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    records = args.records or (100_000 if args.quick else 400_000)
    rounds = args.rounds or (1 if args.quick else 2)

    from kshare_sidecar.testing import KafkaBroker

    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    with contextlib.ExitStack() as stack:
        k4 = stack.enter_context(KafkaBroker("4", extra_config=broker_limits(args.record_locks)))
        k39 = stack.enter_context(KafkaBroker("3.9"))
        topic = f"bench-driver-{uuid.uuid4().hex[:6]}"
        for backend in (k4.bootstrap, k39.bootstrap):
            produce(backend, topic, records, 100, 2)
        sidecar = stack.enter_context(sidecar_process(k39.bootstrap, args.record_locks)).bootstrap
        for r in range(rounds):
            for target, bootstrap in (("native 4.3", k4.bootstrap), ("sidecar on 3.9", sidecar)):
                res = {c: drain(c, bootstrap, topic, records, args.per_trigger, args.record_locks)
                       for c in ("librdkafka", "kshare")}
                for client, out in res.items():
                    print(f"[round {r + 1}] {target:15} {client:10} {out}", flush=True)
                ratio = res["kshare"]["ms_mean"] / res["librdkafka"]["ms_mean"]
                print(f"[round {r + 1}] {target:15} kshare / librdkafka ms per batch: {ratio:.2f}", flush=True)
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
