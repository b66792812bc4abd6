"""End-to-end consume throughput and the cost of a record: kshare vs native Kafka share groups.

N records (--quick: 100k, full: 1M) of each record size (``--record-size``, default 1024 and 100
bytes; --quick: 1024), 4 partitions, 4 consumer processes:
  (a) confluent-kafka ShareConsumer via kshare on Kafka 3.9 (--backend: any release the harness pins,
      e.g. 2.8 with its ZooKeeper; docs/compatibility.md, "Backends")
  (b) confluent-kafka ShareConsumer via kshare on Kafka 4.x (--native: the 4.x release of b-c)
  (c) confluent-kafka ShareConsumer on native Kafka 4.x share groups
Share consumers use implicit acknowledgement. The client axis (``--client``): (a)-(c) with
confluent-kafka's ShareConsumer (librdkafka, synchronous), with kshare's asyncio ShareConsumer
(``kshare_sidecar.client``, one event loop per process, ``getmany``), or both on the same topic
(each client its own fresh group), reported as ``<scenario>`` and ``<scenario>_asyncio`` with
the asyncio÷confluent ratio per target. The clock runs from the first record any consumer
receives to the moment the last of the N records is received (group join time is excluded for
every scenario alike). Everything (brokers, sidecar, consumers) shares one machine.

Warm-up (``--warmup-records``, Kafka's name from ``kafka-producer-perf-test``): before the measured
pass of a scenario and record size, that many records of the same size, on a topic of their own,
are consumed through a group of their own by the same servers (the same sidecar process, the same
broker JVM), so the measured pass sees servers past their start-up: the brokers' JIT compilation,
the sidecar's receive pool filling and its heap growing. Default: half of ``--records``; 0 measures
servers cold, as every run before 2026-12-02 15:00 UTC did. The warm-up pass is reported too
(``warm-up`` lines, the JSON's ``warmup``): those are the cold figures.

The cost of a record: CPU seconds per million records of the sidecar process and of the backend
broker's JVM (every scenario: the backend broker behind kshare, the native 4.x broker), from
/proc over the whole consume (group join included, the same for every scenario) and again from
the first record on (the window the rate is taken over: the join and the first requests' one-time
work left out, and printed apart as "CPU before the first record"), and "total server CPU per
record" = (sidecar + its backend) ÷ native broker, for both windows. The sidecar's read path from
its /metrics: read amplification, record bytes copied in the sidecar per byte delivered
(``kshare_record_bytes_copied_total``: every copy of record bytes in user space; receiving from
and sending to sockets is not counted), backend Fetches, ShareFetches.

``--console``: the console's cost on the fetch path (docs/console.md). Scenario (a) only, 1 KiB
records, in --console-rounds rounds, each two runs side by side on the same topic: a sidecar
without the console, then a sidecar with the console sampling every second and a poller that
loads the groups page, the group's page (as its refresh script does) and the group's JSON once a
second each, as an operator with the console open would (more than one browser tab does);
reported as ``kshare_on_kafka_3_9`` and ``kshare_on_kafka_3_9_console`` with their ratio.

Prints one line per scenario, then one JSON object as the LAST line; writes throughput.png
(matplotlib, if importable) and throughput.json into --out (default: $TMPDIR/kshare-bench).
Usage: python benchmarks/throughput.py [--quick] [--records N] [--record-size 1024,100] [--only a,c]
       [--warmup-records N] [--client confluent|asyncio|both] [--pyspy] [--perf] [--backend 3.9] [--native 4] [--out DIR]
       python benchmarks/throughput.py --console [--quick] [--console-rounds N]
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (CpuMeter, PerfRecord, PySpy, SidecarProcess, base_parser, finish, free_port, loadavg, machine,  # noqa: E402
                    native_share_group, produce_records, pyplot, read_path_figures)

PARTITIONS = 4
CONSUMERS = 4
NAMES = {"a": "kshare_on_kafka_3_9", "b": "kshare_on_kafka_4", "c": "native_kafka_4"}
CONSOLE_BYTES = 1024  # --console runs 1 KiB records only


# -- consumer processes ------------------------------------------------------------------------
def _count(n: int, total, first_ts, stop, target: int) -> None:
    now = time.monotonic()
    with total.get_lock():
        if first_ts.value == 0.0:
            first_ts.value = now
        total.value += n
        if total.value >= target:
            stop.set()


class _ClientCpu:
    """A consumer process's CPU (every thread of it: librdkafka's too) from its first record on,
    added to a value the processes share when it stops: the client's cost of a record."""

    def __init__(self, shared) -> None:
        self.shared = shared
        self.start: float | None = None

    @staticmethod
    def _now() -> float:
        # getrusage, not common.process_cpu_s (/proc, in clock ticks): a consumer's share of a
        # run is a few tenths of a second, where 10 ms ticks at each end would be a few per cent
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def first_record(self) -> None:
        if self.start is None:
            self.start = self._now()

    def report(self) -> None:
        if self.start is not None:
            with self.shared.get_lock():
                self.shared.value += self._now() - self.start


def _asyncio_worker(bootstrap: str, group: str, topic: str, total, first_ts, stop, target: int, ready,
                    client_cpu) -> None:
    """kshare's asyncio ShareConsumer, implicit mode: each getmany accepts the previous batch."""
    import asyncio

    from kshare_sidecar.client import ShareConsumer

    meter = _ClientCpu(client_cpu)

    async def run() -> None:
        async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, acknowledgement_mode="implicit",
                                 max_poll_records=500, client_id="kshare-bench") as consumer:
            ready.release()
            while not stop.is_set():
                n = sum(len(records) for records in (await consumer.getmany(timeout_ms=500)).values())
                if n:
                    meter.first_record()
                    _count(n, total, first_ts, stop, target)
            meter.report()

    asyncio.run(run())


def _worker(kind: str, bootstrap: str, group: str, topic: str, total, first_ts, stop, target: int,
            ready, client_cpu) -> None:
    if kind == "asyncio":
        return _asyncio_worker(bootstrap, group, topic, total, first_ts, stop, target, ready, client_cpu)
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    meter = _ClientCpu(client_cpu)
    ready.release()
    try:
        while not stop.is_set():
            n = sum(1 for m in consumer.poll(0.5) if not m.error())
            if n:
                meter.first_record()
                _count(n, total, first_ts, stop, target)
        meter.report()
    finally:
        consumer.close()


def consume(kind: str, bootstrap: str, group: str, topic: str, target: int, timeout_s: float,
            record_bytes: int, cpu: CpuMeter) -> dict:
    ctx = mp.get_context("spawn")
    load = loadavg()
    total, first_ts, stop, ready = ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Event(), ctx.Semaphore(0)
    client_cpu = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_worker, args=(kind, bootstrap, group, topic, total, first_ts, stop, target, ready,
                                               client_cpu), daemon=True) for _ in range(CONSUMERS)]
    cpu.start()
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    end = None
    at_first: dict[str, float | None] | None = None  # CPU until the first record: the group's start
    while time.monotonic() < deadline:
        if stop.wait(0.01):
            end = time.monotonic()
            break
        if at_first is None and first_ts.value:
            at_first = cpu.stop()
    else:
        stop.set()
    used = cpu.stop()
    at_first = at_first or {name: 0.0 for name in used}
    got = total.value
    end = end or time.monotonic()
    for p in procs:
        p.join(15)
        if p.is_alive():
            p.kill()
    elapsed = max(end - first_ts.value, 1e-9) if first_ts.value else float("nan")
    rps = got / elapsed
    per_1m = {f"{name}_cpu_s_per_1m_records": round(s / got * 1e6, 2) if s is not None and got else None
              for name, s in used.items()}
    # the same CPU from the first record on (the window the rate is taken over): what a record
    # costs once the group runs, without the join and the first requests' one-time work
    start = {f"{name}_cpu_s_before_first_record": at_first.get(name) for name in used}
    steady = {f"{name}_cpu_s_per_1m_records_steady":
              round((s - (at_first.get(name) or 0.0)) / got * 1e6, 2) if s is not None and got else None
              for name, s in used.items()}
    # reported by each consumer as it stops (after the join above)
    clients = round(client_cpu.value / got * 1e6, 2) if got else None
    return {"records": got, "seconds": round(elapsed, 3), "records_per_s": round(rps, 1),
            "mb_per_s": round(rps * record_bytes / 1e6, 2), "complete": got >= target,
            "loadavg_before": load, "cpu_s": used, **per_1m, **start, **steady,
            "consumers_cpu_s_per_1m_records_steady": clients}


def kshare_consume(sc: SidecarProcess, broker, group: str, topic: str, target: int, timeout_s: float,
                   record_bytes: int, kind: str = "share", pyspy: Path | None = None,
                   perf: Path | None = None, pyspy_python: bool = False) -> dict:
    """:func:`consume` through a kshare sidecar, plus its read-path figures (metrics scraped
    before and after: read amplification, bytes copied, peak RSS)."""
    before = sc.samples()
    spy = PySpy(sc.proc.pid, pyspy, native=not pyspy_python) if pyspy else None
    rec = PerfRecord(sc.proc.pid, perf) if perf else None
    try:
        result = consume(kind, sc.bootstrap, group, topic, target, timeout_s, record_bytes,
                         CpuMeter(sidecar=sc.proc.pid, backend_broker=_pid(broker)))
    finally:
        for profiler in (spy, rec):
            if profiler is not None:
                profiler.stop()
    result["sidecar"] = read_path_figures(before, sc.samples())
    if spy is not None:
        result["pyspy"] = str(pyspy)
    if rec is not None:
        result["perf"] = str(perf)
    return result


def _pid(broker) -> int | None:
    proc = getattr(broker, "_proc", None)
    return proc.pid if proc is not None else None


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


def console_cost(broker, topic: str, n: int, timeout: float, rounds: int, report) -> None:
    """Rounds of the two runs, in alternating order (the second run of a round may find the
    broker's page cache warmer)."""
    from tests.support import unique

    def without(r: int) -> None:
        sc = SidecarProcess(broker.bootstrap, metrics_port=free_port())
        try:
            report("a", CONSOLE_BYTES, kshare_consume(sc, broker, unique("kshare-g"), topic, n, timeout, CONSOLE_BYTES),
                   round_=r)
        finally:
            sc.stop()

    def with_console(r: int) -> None:
        port = free_port()
        sc = SidecarProcess(broker.bootstrap, metrics_port=free_port(), env={
            "KSHARE_CONSOLE_LISTEN": f"127.0.0.1:{port}", "KSHARE_CONSOLE_SAMPLE_INTERVAL_MS": "1000"})
        try:
            group = unique("kshare-g")
            with ConsolePoller(f"http://127.0.0.1:{port}", group) as poller:
                result = kshare_consume(sc, broker, group, topic, n, timeout, CONSOLE_BYTES)
            result.update(console_page_loads=poller.loads, console_failures=poller.failures)
            report("a", CONSOLE_BYTES, result, suffix="_console", round_=r)
        finally:
            sc.stop()

    for r in range(rounds):
        for run in ((without, with_console) if r % 2 == 0 else (with_console, without)):
            run(r)


def plot(by_size: dict, path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(1, len(by_size), figsize=(max(8, 5 * len(by_size)), 4.5), squeeze=False)
    palette = {"kshare_on_kafka_3_9": "#1f77b4", "kshare_on_kafka_4": "#4c9bd6", "native_kafka_4": "#ff7f0e"}
    for ax, (size, results) in zip(axes[0], by_size.items()):
        labels = list(results)
        values = [results[k]["records_per_s"] for k in labels]
        colors = ["#2ca02c" if k.endswith("_asyncio") else palette.get(k, "#7f7f7f") for k in labels]
        bars = ax.bar(labels, values, color=colors)  # green: kshare's asyncio client
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values])
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
        ax.set_ylabel(f"records/s ({size} B)")
        ax.set_title(f"{size}-byte records, {PARTITIONS} partitions, {CONSUMERS} consumers")
    fig.tight_layout()
    fig.savefig(path)
    return True


def summarize(results: dict, kinds: list[str], names: dict[str, str]) -> dict:
    """Ratios of one record size: throughput and the server CPU per record."""
    def ratio(x: str, y: str, field: str = "records_per_s") -> float | None:
        a, b = results.get(x, {}).get(field), results.get(y, {}).get(field)
        return round(a / b, 3) if a and b else None

    def server_cpu(name: str, window: str = "", without_jit: bool = False) -> float | None:
        r = results.get(name)
        if r is None:
            return None
        parts = [r.get(f"sidecar_cpu_s_per_1m_records{window}"), r.get(f"backend_broker_cpu_s_per_1m_records{window}")]
        if parts[1] is None:
            return None
        if without_jit:  # the broker's JIT compiler threads left out: what serving costs once compiled
            parts.append(-(r.get(f"backend_broker_jit_cpu_s_per_1m_records{window}") or 0.0))
        return round(sum(p for p in parts if p is not None), 2)

    out: dict = {"ratio_kshare_to_native": ratio(names["a"], names["c"]),
                 "ratio_kshare_on_4_to_native": ratio(names["b"], names["c"])}
    for window in ("", "_steady"):
        for key in "ab":
            total, native = server_cpu(names[key], window), server_cpu(names["c"], window)
            if total is not None and native:
                out[f"server_cpu_per_1m_{key}_s{window}"] = total
                out[f"ratio_server_cpu_{key}_to_native{window}"] = round(total / native, 2)
        if "c" in {k for k, n in names.items() if n in results}:
            out[f"server_cpu_per_1m_native_s{window}"] = server_cpu(names["c"], window)
    total, native = server_cpu(names["a"], "_steady", True), server_cpu(names["c"], "_steady", True)
    if total is not None and native:
        out["server_cpu_per_1m_a_s_steady_without_jit"] = total
        out["server_cpu_per_1m_native_s_steady_without_jit"] = native
        out["ratio_server_cpu_a_to_native_steady_without_jit"] = round(total / native, 2)
    if "asyncio" in kinds:
        out["ratio_asyncio_kshare_to_native_asyncio"] = ratio(names["a"] + "_asyncio", names["c"] + "_asyncio")
        out["ratio_asyncio_to_confluent"] = {
            names[k]: ratio(names[k] + "_asyncio", names[k]) for k in "abc" if names[k] in results}
        # the client's cost of a record: asyncio ÷ confluent-kafka consumers' CPU per record
        out["ratio_asyncio_to_confluent_consumer_cpu"] = {
            names[k]: ratio(names[k] + "_asyncio", names[k], "consumers_cpu_s_per_1m_records_steady")
            for k in "abc" if names[k] in results}
    return out


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--records", type=int)
    ap.add_argument("--record-size", help="record value sizes in bytes, comma-separated (default 1024,100; "
                                          "--quick: 1024)")
    ap.add_argument("--timeout", type=float, default=None, help="per-scenario limit in seconds")
    ap.add_argument("--warmup-records", type=int, default=None,
                    help="records consumed through the same servers before each measured pass, on a topic and "
                         "group of their own, not measured (default: half of --records; 0: cold servers)")
    ap.add_argument("--only", default="a,b,c", help="scenarios to run, e.g. a,c")
    ap.add_argument("--profile", help="run the kshare sidecar of scenario (a) under pyinstrument, text to FILE")
    ap.add_argument("--pyspy", action="store_true",
                    help="py-spy record (native frames) on scenario (a)'s sidecar while it serves: "
                         "pyspy_a_<size>.json (speedscope) in --out; see benchmarks/pyspy_top.py")
    ap.add_argument("--pyspy-python", action="store_true",
                    help="with --pyspy: Python frames only, the sidecar not stopped per sample (the native mode's "
                         "stops over-sample system calls; benchmarks/common.py, PySpy)")
    ap.add_argument("--perf", action="store_true",
                    help="perf record -g on scenario (a)'s sidecar while it serves (CPU samples with native and "
                         "kernel stacks): perf_a_<size>.data in --out")
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
    sizes = [int(s) for s in (args.record_size or ("1024" if args.quick else "1024,100")).split(",")]
    timeout = args.timeout or (120 if args.quick else 900)
    warmup = n // 2 if args.warmup_records is None else args.warmup_records
    if warmup < 0:
        ap.error(f"--warmup-records takes 0 or more; got {warmup}")
    only = set(args.only.split(","))
    if only - set(NAMES):
        ap.error(f"--only takes scenarios among {','.join(NAMES)}; got {args.only}")
    args.out.mkdir(parents=True, exist_ok=True)

    from kshare_sidecar.testing import KafkaBroker
    from tests.support import unique

    by_size: dict[int, dict[str, dict]] = {size: {} for size in sizes}
    warmups: dict[int, dict[str, dict]] = {size: {} for size in sizes}  # the cold figures
    from kshare_sidecar.testing.kafka import resolve_version

    backend, native = resolve_version(args.backend), resolve_version(args.native)
    names = {**NAMES, "a": f"kshare_on_kafka_{args.backend.replace('.', '_')}"}

    def report(key: str, size: int, r: dict, kind: str = "share", suffix: str = "", round_: int | None = None,
               warm_up: bool = False) -> None:
        name = names[key] + ("_asyncio" if kind == "asyncio" else "") + suffix
        if round_ is not None:
            name += f"_round{round_ + 1}"
        r["client"] = "kshare asyncio" if kind == "asyncio" else "confluent-kafka"
        (warmups if warm_up else by_size)[size][name] = r
        print(f"({key}) {size:>5} B {name:<28}{' warm-up' if warm_up else ''} {r['records']:>9} records in {r['seconds']:>7.2f} s  "
              f"{r['records_per_s']:>10,.0f} rec/s  {r['mb_per_s']:>7.2f} MB/s  load {r['loadavg_before'][:1]}"
              + ("" if r["complete"] else "  INCOMPLETE (timed out)"), flush=True)
        cpu = "  ".join(f"{k.removesuffix('_cpu_s_per_1m_records')} {v} s "
                        f"({r.get(k + '_steady')} s from the first record)" for k, v in r.items()
                        if k.endswith("_cpu_s_per_1m_records") and v is not None)
        print(f"    CPU per 1M records: {cpu}", flush=True)
        print(f"    the {CONSUMERS} consumers' CPU per 1M records from each one's first record (all their "
              f"threads): {r.get('consumers_cpu_s_per_1m_records_steady')} s", flush=True)
        before = "  ".join(f"{k.removesuffix('_cpu_s_before_first_record')} {v} s" for k, v in r.items()
                           if k.endswith("_cpu_s_before_first_record") and v is not None)
        print(f"    CPU before the first record (join, first requests): {before}", flush=True)
        if "sidecar" in r:
            f = r["sidecar"]
            print(f"    read amplification {f['read_amplification']} (of which cut trailing batches "
                  f"{f['cut_per_delivered_byte']}), bytes copied per byte delivered "
                  f"{f['copies_per_delivered_byte']}, backend Fetches {f['backend_fetch_requests']}, "
                  f"ShareFetches {f['share_fetch_requests']}, peak RSS {f['sidecar_max_rss_mb']} MB, "
                  f"cache hits/misses {f['cache_hits']}/{f['cache_misses']}", flush=True)

    if args.console:
        with KafkaBroker("3.9") as b39:
            topic = unique("tput")
            produce_records(b39.bootstrap, topic, n, partitions=PARTITIONS, record_bytes=CONSOLE_BYTES)
            console_cost(b39, topic, n, timeout, args.console_rounds, report)
        results = by_size[CONSOLE_BYTES]
        without = [v["records_per_s"] for k, v in results.items() if "_console" not in k]
        with_console = [v["records_per_s"] for k, v in results.items() if "_console" in k]
        summary = {"scenario": "throughput_console", "records": n, "record_bytes": CONSOLE_BYTES,
                   "partitions": PARTITIONS, "consumers": CONSUMERS, "machine": machine(), "results": results,
                   "ratio_console_to_without": round(sum(with_console) / sum(without), 3) if without else None,
                   "cpu_s_per_1m_records": {
                       "without": [v["sidecar_cpu_s_per_1m_records"] for k, v in results.items()
                                   if "_console" not in k],
                       "with_console": [v["sidecar_cpu_s_per_1m_records"] for k, v in results.items()
                                        if "_console" in k]}}
        finish(summary, args.out, "throughput_console", lambda png: plot({CONSOLE_BYTES: results}, png))
        return

    def warmup_topic(broker, size: int) -> str:
        """A topic of ``warmup`` records of ``size`` bytes on ``broker``, for one warm-up pass."""
        topic = unique("tput-warmup")
        produce_records(broker.bootstrap, topic, warmup, partitions=PARTITIONS, record_bytes=size)
        return topic

    def sidecar_scenario(key: str, broker, size: int, topic: str) -> None:
        sc = SidecarProcess(broker.bootstrap, profile=args.profile if key == "a" else None,
                            metrics_port=free_port())
        try:
            if warmup:
                warm_topic = warmup_topic(broker, size)
                report(key, size, kshare_consume(sc, broker, unique("kshare-warmup-g"), warm_topic, warmup, timeout,
                                                 size, kinds[0]), kinds[0], warm_up=True)
            for kind in kinds:
                spy = args.out / f"pyspy_{key}_{size}_{kind}.json" if args.pyspy and key == "a" else None
                perf = args.out / f"perf_{key}_{size}_{kind}.data" if args.perf and key == "a" else None
                report(key, size, kshare_consume(sc, broker, unique("kshare-g"), topic, n, timeout, size, kind,
                                                 pyspy=spy, perf=perf, pyspy_python=args.pyspy_python), kind)
            if args.metrics and key == "a":
                sc.scrape(args.out / f"kshare_metrics_a_{size}.txt")
        finally:
            sc.stop()

    if "a" in only:
        with KafkaBroker(args.backend) as b39:
            for size in sizes:
                topic = unique("tput")
                produce_records(b39.bootstrap, topic, n, partitions=PARTITIONS, record_bytes=size)
                sidecar_scenario("a", b39, size, topic)
    if only & {"b", "c"}:
        with KafkaBroker(args.native) as b4:
            for size in sizes:
                topic = unique("tput")
                produce_records(b4.bootstrap, topic, n, partitions=PARTITIONS, record_bytes=size)
                if "b" in only:
                    sidecar_scenario("b", b4, size, topic)
                if "c" in only:
                    if warmup:
                        group = native_share_group(b4.bootstrap, unique("native-warmup-g"))
                        report("c", size, consume(kinds[0], b4.bootstrap, group, warmup_topic(b4, size), warmup,
                                                  timeout, size, CpuMeter(backend_broker=_pid(b4))), kinds[0],
                               warm_up=True)
                    for kind in kinds:
                        group = native_share_group(b4.bootstrap, unique("native-g"))
                        report("c", size, consume(kind, b4.bootstrap, group, topic, n, timeout, size,
                                                  CpuMeter(backend_broker=_pid(b4))), kind)

    sizes_out = {str(size): {"results": results, **summarize(results, kinds, names)} for size, results in by_size.items()}
    for size, s in sizes_out.items():
        line = f"{size:>5} B: kshare on {backend} ÷ native {native} {s['ratio_kshare_to_native']}"
        if "server_cpu_per_1m_a_s" in s:
            line += (f"; server CPU per 1M records: kshare + {backend} broker {s['server_cpu_per_1m_a_s']} s, native "
                     f"{s['server_cpu_per_1m_native_s']} s, ratio {s['ratio_server_cpu_a_to_native']} "
                     f"(from the first record: {s.get('server_cpu_per_1m_a_s_steady')} s, "
                     f"{s.get('server_cpu_per_1m_native_s_steady')} s, ratio {s.get('ratio_server_cpu_a_to_native_steady')}; "
                     f"without the brokers' JIT compilation: {s.get('server_cpu_per_1m_a_s_steady_without_jit')} s, "
                     f"{s.get('server_cpu_per_1m_native_s_steady_without_jit')} s, ratio "
                     f"{s.get('ratio_server_cpu_a_to_native_steady_without_jit')})")
        print(line, flush=True)
    summary = {"scenario": "throughput", "records": n, "record_sizes": sizes, "partitions": PARTITIONS,
               "consumers": CONSUMERS, "machine": machine(), "backend": backend, "native": native,
               "warmup_records": warmup, "sizes": sizes_out,
               "warmup": {str(size): {"results": results, **summarize(results, kinds[:1], names)}
                          for size, results in warmups.items() if results}}
    finish(summary, args.out, "throughput", lambda png: plot(by_size, png))


if __name__ == "__main__":
    main()
