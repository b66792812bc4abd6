"""End-to-end consume throughput: kshare vs native Kafka share groups vs a plain consumer group.

1 KiB records, 4 partitions, N records (--quick: 100k, full: 1M), 4 consumer processes:
  (a) confluent-kafka ShareConsumer via kshare on Kafka 3.9 (--backend: any release the harness pins,
      e.g. 2.8 with its ZooKeeper; docs/compatibility.md, "Backends")
  (b) confluent-kafka ShareConsumer via kshare on Kafka 4.x (--native: the 4.x release of b-d)
  (c) confluent-kafka ShareConsumer on native Kafka 4.x share groups
  (d) confluent-kafka Consumer (plain consumer group) on the Kafka 4.x topic
Share consumers use implicit acknowledgement. The client axis (``--client``): (a)-(c) with
confluent-kafka's ShareConsumer (librdkafka, synchronous), with kshare's asyncio ShareConsumer
(``kshare_sidecar.client``, one event loop per process, ``getmany``), or both on the same topic
(each client its own fresh group), reported as ``<scenario>`` and ``<scenario>_asyncio`` with
the asyncio÷confluent ratio per target. The clock runs from the first record any consumer
receives to the moment the last of the N records is received (group join time is excluded for
every scenario alike). Everything (brokers, sidecar, consumers) shares one machine.

``--console``: the console's cost on the fetch path (docs/console.md). Scenario (a) only, in
--console-rounds rounds, each two runs side by side on the same topic: a sidecar without the
console, then a sidecar with the console sampling every second and a poller that loads the
groups page, the group's page (as its refresh script does) and the group's JSON once a second
each, as an operator with the console open would (more than one browser tab does); reported as
``kshare_on_kafka_3_9`` and ``kshare_on_kafka_3_9_console`` with their ratio.

Prints one line per scenario, then one JSON object as the LAST line; writes throughput.png
(matplotlib, if importable) and throughput.json into --out (default: $TMPDIR/kshare-bench).
Usage: python benchmarks/throughput.py [--quick] [--records N] [--out DIR] [--client confluent|asyncio|both]
       python benchmarks/throughput.py --console [--quick] [--console-rounds N]
       [--backend 3.9] [--native 4]
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (SidecarProcess, base_parser, finish, free_port, loadavg, machine, produce_records,  # noqa: E402
                    pyplot, read_path_figures)

RECORD_BYTES = 1024
PARTITIONS = 4
CONSUMERS = 4


# -- consumer processes ------------------------------------------------------------------------
def _count(n: int, total, first_ts, stop, target: int) -> None:
    now = time.monotonic()
    with total.get_lock():
        if first_ts.value == 0.0:
            first_ts.value = now
        total.value += n
        if total.value >= target:
            stop.set()


def _asyncio_worker(bootstrap: str, group: str, topic: str, total, first_ts, stop, target: int, ready) -> None:
    """kshare's asyncio ShareConsumer, implicit mode: each getmany accepts the previous batch."""
    import asyncio

    from kshare_sidecar.client import ShareConsumer

    async def run() -> None:
        async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, acknowledgement_mode="implicit",
                                 max_poll_records=500, client_id="kshare-bench") as consumer:
            ready.release()
            while not stop.is_set():
                n = sum(len(records) for records in (await consumer.getmany(timeout_ms=500)).values())
                if n:
                    _count(n, total, first_ts, stop, target)

    asyncio.run(run())


def _worker(kind: str, bootstrap: str, group: str, topic: str, total, first_ts, stop, target: int,
            ready) -> None:
    if kind == "asyncio":
        return _asyncio_worker(bootstrap, group, topic, total, first_ts, stop, target, ready)
    from confluent_kafka import Consumer, ShareConsumer

    if kind == "share":
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    else:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": True, "fetch.max.bytes": 52428800})
    consumer.subscribe([topic])
    ready.release()
    try:
        while not stop.is_set():
            msgs = consumer.poll(0.5) if kind == "share" else consumer.consume(1000, 0.5)
            n = sum(1 for m in msgs if not m.error())
            if n:
                _count(n, total, first_ts, stop, target)
    finally:
        consumer.close()


def consume(kind: str, bootstrap: str, group: str, topic: str, target: int, timeout_s: float) -> dict:
    ctx = mp.get_context("spawn")
    load = loadavg()
    total, first_ts, stop, ready = ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Event(), ctx.Semaphore(0)
    procs = [ctx.Process(target=_worker, args=(kind, bootstrap, group, topic, total, first_ts, stop, target, ready),
                         daemon=True) for _ in range(CONSUMERS)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    end = None
    while time.monotonic() < deadline:
        if stop.wait(0.01):
            end = time.monotonic()
            break
    else:
        stop.set()
    got = total.value
    end = end or time.monotonic()
    for p in procs:
        p.join(15)
        if p.is_alive():
            p.kill()
    elapsed = max(end - first_ts.value, 1e-9) if first_ts.value else float("nan")
    rps = got / elapsed
    return {"records": got, "seconds": round(elapsed, 3), "records_per_s": round(rps, 1),
            "mb_per_s": round(rps * RECORD_BYTES / 1e6, 2), "complete": got >= target,
            "loadavg_before": load}


def kshare_consume(sc: SidecarProcess, group: str, topic: str, target: int, timeout_s: float,
                   kind: str = "share") -> dict:
    """:func:`consume` through a kshare sidecar, plus its read-path figures (metrics scraped
    before and after: read amplification, CPU seconds per 1M records, peak RSS)."""
    before = sc.samples()
    load = loadavg()
    result = consume(kind, sc.bootstrap, group, topic, target, timeout_s)
    result["sidecar"] = read_path_figures(before, sc.samples())
    result["sidecar"]["loadavg_before"] = load
    return result


# -- the console's cost (--console) ------------------------------------------------------------
class ConsolePoller:
    """Loads the console's pages for one group once a second each until stopped (an open console)."""

    def __init__(self, url: str, group: str) -> None:
        gid = urllib.parse.quote(group)
        self.requests = [(f"{url}/", {}), (f"{url}/group?id={gid}", {"X-Kshare-Fragment": "1"}),
                         (f"{url}/api/group?id={gid}", {})]
        self.loads = self.failures = self.not_yet = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConsolePoller:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for url, headers in self.requests:
                try:
                    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
                        r.read()
                    self.loads += 1
                except urllib.error.HTTPError as exc:
                    if exc.code == 404:  # the group's page before its first member joined
                        self.not_yet += 1
                    else:
                        self.failures += 1
                except OSError:
                    self.failures += 1


def console_cost(bootstrap: str, topic: str, n: int, timeout: float, rounds: int, report) -> None:
    """Rounds of the two runs, in alternating order (the second run of a round may find the
    broker's page cache warmer)."""
    from tests.support import unique

    def without(r: int) -> None:
        sc = SidecarProcess(bootstrap, metrics_port=free_port())
        try:
            report("a", kshare_consume(sc, unique("kshare-g"), topic, n, timeout), round_=r)
        finally:
            sc.stop()

    def with_console(r: int) -> None:
        port = free_port()
        sc = SidecarProcess(bootstrap, metrics_port=free_port(), env={
            "KSHARE_CONSOLE_LISTEN": f"127.0.0.1:{port}", "KSHARE_CONSOLE_SAMPLE_INTERVAL_MS": "1000"})
        try:
            group = unique("kshare-g")
            with ConsolePoller(f"http://127.0.0.1:{port}", group) as poller:
                result = kshare_consume(sc, group, topic, n, timeout)
            result.update(console_page_loads=poller.loads, console_failures=poller.failures)
            report("a", result, suffix="_console", round_=r)
        finally:
            sc.stop()

    for r in range(rounds):
        for run in ((without, with_console) if r % 2 == 0 else (with_console, without)):
            run(r)


# -- setup ------------------------------------------------------------------------------------
def prepare_topic(bootstrap: str, topic: str, n: int) -> None:
    produce_records(bootstrap, topic, n, partitions=PARTITIONS, record_bytes=RECORD_BYTES)


def plot(results: dict, path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    labels = list(results)
    values = [results[k]["records_per_s"] for k in labels]
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(labels)), 4.5))
    palette = {"kshare_on_kafka_3_9": "#1f77b4", "kshare_on_kafka_4": "#4c9bd6", "native_kafka_4": "#ff7f0e"}
    colors = ["#2ca02c" if k.endswith("_asyncio") else palette.get(k, "#7f7f7f") for k in labels]
    bars = ax.bar(labels, values, color=colors)  # green: kshare's asyncio client
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values])
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.set_ylabel("records/s (1 KiB)")
    ax.set_title(f"Consume throughput, {PARTITIONS} partitions, {CONSUMERS} consumers")
    fig.tight_layout()
    fig.savefig(path)
    return True


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--records", type=int)
    ap.add_argument("--timeout", type=float, default=None, help="per-scenario limit in seconds")
    ap.add_argument("--only", default="a,b,c,d", help="scenarios to run, e.g. a,c")
    ap.add_argument("--profile", help="run the kshare sidecar of scenario (a) under pyinstrument, text to FILE")
    ap.add_argument("--metrics", action="store_true", help="scrape scenario (a)'s sidecar /metrics into --out")
    ap.add_argument("--client", choices=["confluent", "asyncio", "both"], default="confluent",
                    help="share consumer of (a)-(c): confluent-kafka's, kshare's asyncio one, or both")
    ap.add_argument("--console", action="store_true", help="scenario (a) without and with the web console open "
                    "and polling (its cost on the fetch path)")
    ap.add_argument("--console-rounds", type=int, default=2, help="--console: rounds of the two runs")
    ap.add_argument("--backend", default="3.9",
                    help="Kafka release kshare runs on in (a): 2.8, 3.5, 3.7, 3.9, 4.0, 4.1, 4.4 (2.8, 3.5: ZooKeeper)")
    ap.add_argument("--native", default="4", help="Kafka 4.x release of (b)-(d), e.g. 4.4")
    args = ap.parse_args()
    kinds = {"confluent": ["share"], "asyncio": ["asyncio"], "both": ["share", "asyncio"]}[args.client]
    n = args.records or (100_000 if args.quick else 1_000_000)
    timeout = args.timeout or (120 if args.quick else 900)
    only = set(args.only.split(","))
    args.out.mkdir(parents=True, exist_ok=True)

    from kshare_sidecar.testing import KafkaBroker
    from tests.support import set_group_config, unique

    results: dict[str, dict] = {}
    from kshare_sidecar.testing.kafka import resolve_version

    backend, native = resolve_version(args.backend), resolve_version(args.native)
    names = {"a": f"kshare_on_kafka_{args.backend.replace('.', '_')}",
             "b": "kshare_on_kafka_4", "c": "native_kafka_4", "d": "plain_consumer_kafka_4"}

    def report(key: str, r: dict, kind: str = "share", suffix: str = "", round_: int | None = None) -> None:
        name = names[key] + ("_asyncio" if kind == "asyncio" else "") + suffix
        if round_ is not None:
            name += f"_round{round_ + 1}"
        r["client"] = "kshare asyncio" if kind == "asyncio" else "confluent-kafka"
        results[name] = r
        print(f"({key}) {name:<32} {r['records']:>9} records in {r['seconds']:>8.2f} s  "
              f"{r['records_per_s']:>10,.0f} rec/s  {r['mb_per_s']:>7.2f} MB/s"
              + ("" if r["complete"] else "  INCOMPLETE (timed out)"), flush=True)
        if "sidecar" in r:
            f = r["sidecar"]
            print(f"    read amplification {f['read_amplification']}, sidecar CPU {f['sidecar_cpu_s']} s "
                  f"({f['sidecar_cpu_s_per_1m_records']} s per 1M records), peak RSS {f['sidecar_max_rss_mb']} MB, "
                  f"cache hits/misses {f['cache_hits']}/{f['cache_misses']}", flush=True)

    if args.console:
        with KafkaBroker("3.9") as b39:
            topic = unique("tput")
            prepare_topic(b39.bootstrap, topic, n)
            console_cost(b39.bootstrap, topic, n, timeout, args.console_rounds, report)
        without = [v["records_per_s"] for k, v in results.items() if "_console" not in k]
        with_console = [v["records_per_s"] for k, v in results.items() if "_console" in k]
        summary = {"scenario": "throughput_console", "records": n, "record_bytes": RECORD_BYTES,
                   "partitions": PARTITIONS, "consumers": CONSUMERS, "machine": machine(), "results": results,
                   "ratio_console_to_without": round(sum(with_console) / sum(without), 3) if without else None,
                   "cpu_s_per_1m_records": {
                       "without": [v["sidecar"]["sidecar_cpu_s_per_1m_records"] for k, v in results.items()
                                   if "_console" not in k],
                       "with_console": [v["sidecar"]["sidecar_cpu_s_per_1m_records"] for k, v in results.items()
                                        if "_console" in k]}}
        finish(summary, args.out, "throughput_console", lambda png: plot(results, png))
        return
    if "a" in only:
        with KafkaBroker(args.backend) as ka:
            topic = unique("tput")
            prepare_topic(ka.bootstrap, topic, n)
            sc = SidecarProcess(ka.bootstrap, profile=args.profile, metrics_port=free_port())
            try:
                for kind in kinds:
                    report("a", kshare_consume(sc, unique("kshare-g"), topic, n, timeout, kind), kind)
                if args.metrics:
                    sc.scrape(args.out / "kshare_metrics_a.txt")
            finally:
                sc.stop()
    if only & {"b", "c", "d"}:
        with KafkaBroker(args.native) as b4:
            topic = unique("tput")
            prepare_topic(b4.bootstrap, topic, n)
            if "b" in only:
                sc = SidecarProcess(b4.bootstrap, metrics_port=free_port())
                try:
                    for kind in kinds:
                        report("b", kshare_consume(sc, unique("kshare-g"), topic, n, timeout, kind), kind)
                finally:
                    sc.stop()
            if "c" in only:
                for kind in kinds:
                    group = unique("native-g")
                    set_group_config(b4.bootstrap, group, {"share.auto.offset.reset": "earliest"})
                    report("c", consume(kind, b4.bootstrap, group, topic, n, timeout), kind)
            if "d" in only:
                report("d", consume("plain", b4.bootstrap, unique("plain-g"), topic, n, timeout))

    def ratio(x: str, y: str) -> float | None:
        if x in results and y in results and results[y]["records_per_s"]:
            return round(results[x]["records_per_s"] / results[y]["records_per_s"], 3)
        return None

    summary = {
        "scenario": "throughput", "records": n, "record_bytes": RECORD_BYTES, "partitions": PARTITIONS,
        "consumers": CONSUMERS, "machine": machine(), "backend": backend, "native": native,
        "results": results,
        "ratio_kshare_to_native": ratio(names["a"], names["c"]),
        "ratio_kshare_to_plain_consumer": ratio(names["a"], names["d"]),
        "ratio_kshare_on_4_to_native": ratio(names["b"], names["c"]),
    }
    if "asyncio" in kinds:
        summary["ratio_asyncio_kshare_to_native_asyncio"] = ratio(names["a"] + "_asyncio", names["c"] + "_asyncio")
        summary["ratio_asyncio_to_confluent"] = {
            names[k]: ratio(names[k] + "_asyncio", names[k]) for k in "abc" if names[k] in results}
    finish(summary, args.out, "throughput", lambda png: plot(results, png))


if __name__ == "__main__":
    main()
