"""The Spark source's executor read path alone: CPU per 10k records, each reader side by side.

No SparkSession: a Kafka 3.9 broker from the harness, one partition of --records records of
--value-size bytes (keys ``str(i)``, as ``spark_source.py`` writes them; --compression for the
producer's codec), then 10k-record ranges read in turn exactly as an executor task reads them
(``read.read_ranges``, ``deliveryCount`` 1), --rounds times over the whole partition, one reader
after the other, in one process:

  librdkafka       ``readClient=librdkafka``: a plain confluent-kafka consumer kept assigned
                   (the reader until 2026-11-29)
  kshare           ``readClient=kshare``: raw Fetch requests, record batches decoded into Arrow
                   columns, the record-start walk in C (``_walk.c``)
  kshare-pywalk    the same with the walk in Python (an install without a C compiler)

Per reader and 10k records: the reading thread's CPU (``time.thread_time``: what an executor
task's Python worker spends), the whole process's CPU (librdkafka's own threads fetch and
decode too) and wall time; medians over the ranges. Then, for the raw reader, where its thread's
CPU goes: Fetch (request, answer into the frame), decode (batch headers, the walk, numpy
fields) and Arrow (columns and record batch), measured on the same answers, and the walk alone
in C and in Python. The machine is shared: CPU times are steadier than wall times, but both move
with the load (printed at the start and the end). Prints a table and one JSON object last.

Usage: python benchmarks/spark_reader.py [--records 200000] [--rounds 3] [--value-size 100]
                                         [--compression none|gzip|snappy|lz4|zstd]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RANGE = 10_000


def produce(bootstrap: str, topic: str, n: int, size: int, compression: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": compression})
    payload = b"x" * size
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=payload, key=str(i).encode(), partition=0)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def read_all(opts, topic: str, n: int) -> list[tuple[float, float, float]]:
    """(thread CPU, process CPU, wall) in ms per 10k-record range, over the whole partition."""
    from kshare_sidecar.spark.read import read_ranges

    out = []
    for first in range(0, n - RANGE + 1, RANGE):
        t, p, w = time.thread_time(), time.process_time(), time.perf_counter()
        rows = sum(b.num_rows for b in read_ranges(opts, topic, 0, [[first, first + RANGE - 1, 1]]))
        out.append(((time.thread_time() - t) * 1000, (time.process_time() - p) * 1000,
                    (time.perf_counter() - w) * 1000))
        assert rows == RANGE, f"{rows} rows for a {RANGE}-record range"
    return out


def breakdown(bootstrap: str, topic: str, n: int) -> dict:
    """The raw reader's thread CPU by phase, per 10k records, on the same Fetch answers."""
    import numpy as np

    from kshare_sidecar.spark import _chain
    from kshare_sidecar.spark import read as RD
    from kshare_sidecar.spark.arrow import arrow_schema, record_batch
    from kshare_sidecar.spark.decode import decode
    from kshare_sidecar.spark.fetch import Fetcher
    from kshare_sidecar.spark.readclient import ReaderConfig

    f = Fetcher(bootstrap)
    T = time.thread_time
    answers = []
    fetch_ms = []
    config = ReaderConfig(servers=bootstrap)
    for first in range(0, n - RANGE + 1, RANGE):  # each range's first Fetch, sized as the reader sizes it
        t = T()
        a = f.fetch(topic, 0, first, RD._fetch_size(config, topic, 0, RANGE), time.monotonic() + 60)
        fetch_ms.append((T() - t) * 1000)
        answers.append((first, a))
        d = decode(a.records, first=first, last=first + RANGE - 1)
        RD._learn_size(topic, 0, d.bytes_per_offset, d.largest_batch)
    decoded, decode_ms = [], []
    for first, a in answers:
        t = T()
        decoded.append(decode(a.records, first=first, last=first + RANGE - 1))
        decode_ms.append((T() - t) * 1000 * RANGE / max(1, len(decoded[-1].records)))
    schema = arrow_schema(False)
    record_batch(decoded[0].records, np.ones(len(decoded[0].records), np.int32), topic, 0, schema)  # warm
    arrow_ms = []
    for d in decoded:
        t = T()
        record_batch(d.records, np.ones(len(d.records), np.int32), topic, 0, schema)
        arrow_ms.append((T() - t) * 1000 * RANGE / max(1, len(d.records)))
    walks: dict[str, list[float]] = {"c": [], "python": []}
    for (first, a), d in zip(answers, decoded):
        from kshare_sidecar.spark.decode import COMPRESSION_MASK, HEADER, decompress

        # the walk reads records, so compressed batches are decompressed first (not timed)
        parts, spans, counts, pos, at, answer = [], [], [], 0, 0, a.records
        while len(answer) - pos >= 61:
            fields = HEADER.unpack_from(answer, pos)
            end = pos + 12 + fields[1]
            if end > len(answer):
                break
            body = answer[pos + 61:end]
            if fields[5] & COMPRESSION_MASK:
                body = decompress(fields[5] & COMPRESSION_MASK, body)
            parts.append(bytes(body))
            spans.append((at, at + len(body)))
            counts.append(fields[-1])
            at, pos = at + len(body), end
        view = b"".join(parts)
        records = sum(counts)
        if _chain.compiled():
            t = T()
            _chain.record_starts(view, spans, counts)
            walks["c"].append((T() - t) * 1000 * RANGE / records)
        t = T()
        _chain.python_record_starts(view, spans, counts)
        walks["python"].append((T() - t) * 1000 * RANGE / records)
    f.close()
    med = statistics.median
    return {"fetch_ms_per_answer": round(med(fetch_ms), 2),
            "answer_bytes": round(statistics.mean(len(a.records) for _, a in answers)),
            "decode_ms_per_10k": round(med(decode_ms), 2), "arrow_ms_per_10k": round(med(arrow_ms), 2),
            "walk_c_ms_per_10k": round(med(walks["c"]), 3) if walks["c"] else None,
            "walk_python_ms_per_10k": round(med(walks["python"]), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    args = ap.parse_args()
    n = args.records - args.records % RANGE

    from kshare_sidecar.spark import _chain
    from kshare_sidecar.spark import read as RD
    from kshare_sidecar.spark import read_librdkafka as RL
    from kshare_sidecar.spark.options import parse_options
    from kshare_sidecar.testing import KafkaBroker

    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} "
          f"({os.cpu_count()} CPUs); the compiled walk is {'in use' if _chain.compiled() else 'NOT built'}", flush=True)
    results: dict[str, list] = {"librdkafka": [], "kshare": [], "kshare-pywalk": []}
    with KafkaBroker("3.9", heap="512m") as broker:
        topic = f"bench-reader-{os.getpid()}"
        produce(broker.bootstrap, topic, n, args.value_size, args.compression)
        base = {"kafka.bootstrap.servers": broker.bootstrap, "group": "bench", "subscribe": topic}
        compiled = _chain._compiled
        for r in range(args.rounds):
            for name in results:
                opts = parse_options({**base, "readClient": "librdkafka" if name == "librdkafka" else "kshare"})
                _chain._compiled = None if name == "kshare-pywalk" else compiled
                try:
                    results[name] += read_all(opts, topic, n)
                finally:
                    _chain._compiled = compiled
            print(f"round {r + 1} done", flush=True)
        RD._close_all()
        RL._close_all()
        phases = breakdown(broker.bootstrap, topic, n)
    load_end = os.getloadavg()
    med = statistics.median
    summary = {name: {"thread_cpu_ms": round(med(x[0] for x in rows), 2),
                      "process_cpu_ms": round(med(x[1] for x in rows), 2),
                      "wall_ms": round(med(x[2] for x in rows), 2), "ranges": len(rows)}
               for name, rows in results.items()}
    print(f"\nper {RANGE:,} records of {args.value_size} bytes ({args.compression}), medians over "
          f"{args.rounds} rounds of {n // RANGE} ranges:")
    print(f"{'reader':<16}{'thread CPU ms':>15}{'process CPU ms':>16}{'wall ms':>10}")
    for name, s in summary.items():
        print(f"{name:<16}{s['thread_cpu_ms']:>15}{s['process_cpu_ms']:>16}{s['wall_ms']:>10}")
    print(f"raw reader's thread CPU by phase: {phases}")
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    print(json.dumps({"records": n, "value_size": args.value_size, "compression": args.compression,
                      "rounds": args.rounds, "per_10k": summary, "phases": phases,
                      "load": [round(x, 2) for x in (*load_start, *load_end)]}))


if __name__ == "__main__":
    main()
