"""PySpark: the kshare share-group source vs Spark's own Kafka source, same topic, same machine.

N records (--records, default 200k; --quick 50k) of --value-size bytes on a 2-partition topic.
Scenarios, each a fresh streaming query in one local[2] SparkSession writing to the `noop` sink:
  (a) spark-kafka   Spark's built-in Kafka source (spark-sql-kafka-0-10 from Maven Central) on Kafka 4.x
  (b) kshare-native the kshare data source on native Kafka 4.x share groups
  (c) kshare-sidecar the kshare data source through a kshare sidecar on Kafka 3.9 (--no-sidecar skips it)
  (d) python-floor  with --floor: a Python streaming source whose reads cost nothing (spark_floor.py),
                    the ceiling of any source on PySpark's Python data source API
  (e) kshare-native-rdkafka-reader  with --librdkafka-reader: (b) with the executors reading through
                    librdkafka (readClient=librdkafka) instead of raw Fetch requests decoded into Arrow
All use the same per-trigger cap (--per-trigger, maxOffsetsPerTrigger / maxRecordsPerTrigger) and
the default trigger (next batch as soon as the previous ends). A kshare micro-batch is one poll,
bounded by the group's in-flight window (share.partition.max.record.locks per partition, default
2000): --record-locks (default 10000) raises it on the benchmark's groups, and the brokers' and
sidecar's group.share.max.partition.max.record.locks with it, as docs/spark.md ("Sizing") tells
users to; --record-locks 0 keeps the defaults. "mean_batch" shows what the batches were. The clock
runs from the moment the first micro-batch that read records was planned (the end of its
latestOffset, which for a share group includes the tail of the group join) to the moment N
records were read (query start-up and group join are excluded alike; run_query says why and
reports the earlier definition too). Each scenario first runs once over --warmup records
(default 100k, a fresh query and group, not measured), so no source pays for the JVM's first query
alone. Brokers, sidecar and Spark share the machine, so figures are relative. --rounds R runs the
three sources in turn R times in one session (both brokers and the sidecar up throughout), so each
round's ratios are measured under nearly the same load; the summary gives them per round.

spark-sql-kafka should match the running Spark release. Maven Central has no 4.3.0; the 4.2.0
connector (--kafka-jar-version, the fallback) runs on PySpark 4.3.0, so (a) and (b) run on the same
Spark. ``--baseline-python PY`` instead runs (a) and (b) under another interpreter -- e.g. a venv
with ``pyspark[sql]==4.0.0`` and this project installed, where the 4.0.0 connector matches --
against the same broker and topic, in the same run; then this one runs (b) (and (c)) on its own
Spark. The JSON says which Spark and connector ran what.

Prints one line per scenario (records/s, batches, mean batch, Spark's mean durationMs per batch for
latestOffset / addBatch / walCommit / commitOffsets / queryPlanning / triggerExecution), a summary
table (records/s and ratio to Spark's Kafka source per round) with the load average at the start
and the end, then one JSON object as the LAST line.
Usage: python benchmarks/spark_source.py [--quick] [--records N] [--rounds R] [--no-sidecar] [--floor]
                                         [--librdkafka-reader]
                                         [--baseline-python /tmp/spark40/bin/python]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def produce(bootstrap: str, topic: str, n: int, size: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep the handle alive until the result
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    payload = b"x" * size
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=payload, key=str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


_SETTINGS = """<settings><mirrors><mirror><id>gcs-via-central</id><mirrorOf>gcs-maven-central-mirror</mirrorOf>
<url>https://repo.maven.apache.org/maven2</url></mirror></mirrors></settings>
"""


def spark_kafka_jars(version: str) -> Path:
    """Resolve spark-sql-kafka with the harness's Maven helper.

    Spark's parent POM declares a Google Cloud Storage mirror of Central as an extra repository;
    where that host is unreachable Maven fails. A project-local ``.mvn/maven.config`` points it
    at Central instead (nothing global is touched).
    """
    from kshare_sidecar.testing.maven import cache_root, resolve_artifacts

    name = f"spark-sql-kafka-{version}"
    home = cache_root() / name
    (home / ".mvn").mkdir(parents=True, exist_ok=True)
    (home / "mirror-settings.xml").write_text(_SETTINGS)
    (home / ".mvn" / "maven.config").write_text(f"-s\n{home / 'mirror-settings.xml'}\n")
    return resolve_artifacts(name, [("org.apache.spark", "spark-sql-kafka-0-10_2.13", version)])


def set_group(bootstrap: str, group: str, record_locks: int = 0) -> dict[str, str]:
    """Per-group configs (IncrementalAlterConfigs on a GROUP: Kafka 4.x and the kshare sidecar).

    ``record_locks`` raises the group's in-flight cap per share-partition
    (``share.partition.max.record.locks``, default 2000): a micro-batch is one poll, and one
    poll cannot hold more than the cap times the partitions.
    """
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def alter(configs: dict[str, str]) -> None:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
        for f in admin.incremental_alter_configs(
                [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]).values():
            f.result(30)

    applied = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "60000"}
    if record_locks:
        applied["share.partition.max.record.locks"] = str(record_locks)
    alter(applied)
    return applied


#: How often run_query asks Spark for progress. Each ``recentProgress`` converts every kept
#: progress (up to ~60 per query) over py4j; at 0.05 s (until 2026-11-27) that was a steady load
#: on the driver JVM and this process, on the 2 cores the query runs on. The figures come from the
#: progress timestamps, so a slower poll only stops the query later.
POLL_S = 0.5


def run_query(spark, df, n: int, timeout_s: float) -> dict:
    """Drain ``n`` records into the noop sink; records/s from the end of the first records-bearing
    batch's ``latestOffset`` to the end of the batch that reached ``n``, with Spark's per-batch
    durationMs (mean per phase, ms).

    Why not from that batch's start: a share group's first ``latestOffset`` with records is the
    poll during which the member got its assignment — up to ``pollTimeoutMs`` of waiting for the
    group join, 0.5-0.9 s on this machine — where Spark's Kafka source asks for the latest
    offsets in ~10 ms. The module's definition excludes start-up and the group join alike, so the
    clock starts once that batch is planned, and its ``latestOffset`` is left out of the phase
    means (the other phases count for every batch). ``records_per_s_from_plan_start`` keeps the
    earlier definition (the clock from the start of that batch) for comparison."""
    query = df.writeStream.format("noop").start()
    first_at = None
    first_plan_ms = 0.0
    done_at = None
    rows = 0
    batches = 0
    phases: dict[str, float] = {}
    seen = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and rows < n:
            time.sleep(POLL_S)
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            for p in query.recentProgress:
                if p["batchId"] in seen:
                    continue
                seen.add(p["batchId"])
                if p["numInputRows"]:
                    batches += 1
                    start_s = _ts(p["timestamp"])
                    durations = dict(p["durationMs"])
                    if first_at is None or start_s < first_at:
                        first_at = start_s
                        first_plan_ms = durations.get("latestOffset", 0)
                        durations["latestOffset"] = 0  # the group join's tail: see the docstring
                    rows += p["numInputRows"]
                    done_at = start_s + durations.get("triggerExecution", 0) / 1000
                    for phase, ms in durations.items():
                        phases[phase] = phases.get(phase, 0) + ms
    finally:
        query.stop()
    if rows < n:
        raise RuntimeError(f"only {rows} of {n} records read within {timeout_s:.0f} s")
    assert first_at is not None and done_at is not None
    seconds = max(done_at - first_at - first_plan_ms / 1000, 1e-6)
    means = {k: round(v / max(batches, 1)) for k, v in sorted(phases.items()) if k in PHASES}
    if batches > 1:
        means["latestOffset"] = round(phases.get("latestOffset", 0) / (batches - 1))
    return {"records": rows, "seconds": round(seconds, 2), "records_per_s": round(rows / seconds),
            "batches": batches, "mean_batch": round(rows / max(batches, 1)), "ms_per_batch": means,
            "first_latest_offset_ms": round(first_plan_ms),
            "records_per_s_from_plan_start": round(rows / max(done_at - first_at, 1e-6))}


#: Spark's durationMs phases reported per batch: the source's own time is latestOffset (driver:
#: plan the batch; kshare: acknowledge the previous one, then one poll) and addBatch (executors:
#: read, hand Arrow/rows to the JVM, noop sink); the rest is Spark's checkpointing.
PHASES = ("latestOffset", "addBatch", "walCommit", "commitOffsets", "queryPlanning", "triggerExecution")


def _ts(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def broker_limits(record_locks: int) -> dict[str, str]:
    """Broker (and sidecar) settings that let a group raise share.partition.max.record.locks that far."""
    if record_locks <= 4000:  # Kafka's and kshare's default group.share.max.partition.max.record.locks
        return {}
    return {"group.share.max.partition.max.record.locks": str(record_locks)}


def sidecar_process(backend: str, record_locks: int = 0, settings: dict[str, str] | None = None):
    """``kshare sidecar run`` on ``backend`` as its own process, as it is deployed (``common.SidecarProcess``).

    Until 2026-11-27 the benchmarks ran the sidecar on a thread of their own process, where it
    shared the GIL with the benchmark's polling of Spark (py4j) or, in ``spark_driver.py``, with
    the client under test. ``settings``: extra sidecar settings (``--sidecar-config``)."""
    from common import SidecarProcess

    from kshare_sidecar.config.settings import env_name

    wanted = {**broker_limits(record_locks), **(settings or {})}
    return SidecarProcess(backend, env={env_name(k): str(v) for k, v in wanted.items()})


def kafka_jar_list(spark_version: str, fallback: str) -> tuple[str, str]:
    """(jar version, comma-separated jars) for spark-sql-kafka matching ``spark_version`` if possible."""
    from kshare_sidecar.testing import HarnessError

    jar_version = spark_version
    try:
        jars = spark_kafka_jars(jar_version)
    except HarnessError as exc:
        print(f"spark-sql-kafka {spark_version} not resolvable ({exc}); using {fallback}", flush=True)
        jar_version = fallback
        jars = spark_kafka_jars(jar_version)
    # What --packages would add: the connector and the client; Spark already ships the rest
    # (Scala, Hadoop, compression codecs), and a second copy of those only causes conflicts.
    wanted = ("spark-sql-kafka", "spark-token-provider-kafka", "kafka-clients", "commons-pool2")
    return jar_version, ",".join(str(p) for p in sorted(jars.glob("*.jar")) if p.name.startswith(wanted))


def session(jars: str | None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers: this interpreter, not PATH's python3
    from pyspark.sql import SparkSession

    from kshare_sidecar.spark import register

    builder = (SparkSession.builder.master("local[2]").appName("kshare-spark-bench")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
    if jars:
        builder = builder.config("spark.jars", jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import spark_floor

    spark_floor.register(spark)
    return spark


def bench_spark_kafka(spark, bootstrap: str, topic: str, jar_version: str, args, n: int, warmup: int = 0) -> dict:
    """Spark's Kafka source from the earliest offset; first over ``warmup`` records (a fresh
    query, not measured), so that no source pays for the JVM's first query alone."""

    def frame():
        return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(args.per_trigger)).load())

    try:
        if warmup:
            run_query(spark, frame(), min(warmup, n), args.timeout)
        out = run_query(spark, frame(), n, args.timeout)
    except Exception as exc:  # e.g. a connector built for another Spark line: NoSuchMethodError
        out = {"error": str(exc)[:300], "fix": f"run under pyspark=={jar_version} (--baseline-python)"}
    import pyspark

    return {**out, "spark": pyspark.__version__, "spark_sql_kafka": jar_version}


def bench_kshare(spark, share: str, backend: str, topic: str, args, n: int, warmup: int = 0,
                 read_client: str = "auto") -> dict:
    """The kshare source on a fresh group (from the earliest offset); a warm-up as above.
    ``read_client``: the executors' reader (``readClient``; --librdkafka-reader runs ``librdkafka``)."""
    import pyspark

    def frame():
        group = f"bench-{uuid.uuid4().hex[:6]}"
        configs = set_group(share, group, args.record_locks)
        df = (spark.readStream.format("kshare").option("kafka.bootstrap.servers", share)
              .option("kafka.backend.servers", backend)
              .option("group", group).option("subscribe", topic).option("readClient", read_client)
              .option("maxRecordsPerTrigger", str(args.per_trigger)).option("lockDurationMs", "60000").load())
        return df, configs

    if warmup:
        run_query(spark, frame()[0], min(warmup, n), args.timeout)
    df, configs = frame()
    return {**run_query(spark, df, n, args.timeout), "spark": pyspark.__version__, "group_configs": configs}


def bench_floor(spark, args, n: int, warmup: int = 0) -> dict:
    """A Python streaming source whose reads cost nothing (``spark_floor.py``): PySpark's own cost."""
    import pyspark

    def frame(records: int):
        return (spark.readStream.format("kshare-bench-floor").option("records", str(records))
                .option("perTrigger", str(args.per_trigger)).option("valueSize", str(args.value_size)).load())

    if warmup:
        run_query(spark, frame(min(warmup, n)), min(warmup, n), args.timeout)
    return {**run_query(spark, frame(n), n, args.timeout), "spark": pyspark.__version__}


def worker(args) -> None:
    """--worker: (a) and (b) on this interpreter's Spark against an existing broker and topic."""
    import pyspark

    jar_version, jars = kafka_jar_list(pyspark.__version__, args.kafka_jar_version)
    spark = session(jars)
    n = args.records
    results = {"spark-kafka": bench_spark_kafka(spark, args.bootstrap, args.topic, jar_version, args, n, args.warmup)}
    print(f"spark-kafka    {results['spark-kafka']}", flush=True)
    results["kshare-native"] = bench_kshare(spark, args.bootstrap, args.bootstrap, args.topic, args, n, args.warmup)
    print(f"kshare-native  {results['kshare-native']}", flush=True)
    spark.stop()
    print(json.dumps({"worker": pyspark.__version__, "results": results}))


def run_baseline(python: str, bootstrap: str, topic: str, n: int, args) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--worker", "--bootstrap", bootstrap, "--topic", topic,
           "--records", str(n), "--per-trigger", str(args.per_trigger), "--timeout", str(args.timeout),
           "--warmup", str(args.warmup), "--record-locks", str(args.record_locks),
           "--kafka-jar-version", args.kafka_jar_version]
    # The other interpreter must not pick up this one's PySpark (SPARK_HOME, PYTHONPATH).
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYTHONPATH", "PYSPARK_PYTHON")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout * 3)
    for line in proc.stdout.splitlines()[:-1]:
        print(f"  [baseline] {line}", flush=True)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    except Exception:
        raise RuntimeError(f"baseline run under {python} failed (exit {proc.returncode}): "
                           f"{(proc.stdout + proc.stderr)[-2000:]}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--per-trigger", type=int, default=20_000)
    ap.add_argument("--no-sidecar", action="store_true")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--record-locks", type=int, default=10_000,
                    help="the kshare groups' share.partition.max.record.locks (brokers and sidecar get the matching "
                         "group.share.max.partition.max.record.locks); 0 leaves the defaults (2000)")
    ap.add_argument("--warmup", type=int, default=100_000,
                    help="unmeasured records per scenario first (0: none). After a 20k warm-up, Spark's Kafka source "
                         "ran 20-50%% slower in the first round than in the second (JIT)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the sources in turn this many times in one session (warm-up in the first round only); "
                         "ratios are per round, with their median: the machine's load moves less within a round")
    ap.add_argument("--kafka-jar-version", default="4.2.0",
                    help="spark-sql-kafka version to use when the running Spark's own is not on Maven Central")
    ap.add_argument("--baseline-python", default=None,
                    help="run Spark's Kafka source (and the kshare source) under this interpreter, whose PySpark "
                         "matches an available spark-sql-kafka (e.g. a venv with pyspark[sql]==4.0.0)")
    ap.add_argument("--floor", action="store_true",
                    help="also run python-floor, a Python streaming source whose reads cost nothing "
                         "(spark_floor.py): the ceiling of any source on PySpark's Python data source API")
    ap.add_argument("--librdkafka-reader", action="store_true",
                    help="also run kshare-native-rdkafka-reader: the native kshare source with the executors reading "
                         "through librdkafka (readClient=librdkafka, the reader until 2026-11-29) for an A/B of the "
                         "raw Fetch reader")
    ap.add_argument("--sidecar-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the sidecar (docs/configuration.md), e.g. read.ahead.enable=true; repeatable")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    args = ap.parse_args()
    bad = [kv for kv in args.sidecar_config if "=" not in kv]
    if bad:
        ap.error(f"--sidecar-config takes KEY=VALUE, got {', '.join(bad)}")
    n = args.records or (50_000 if args.quick else 200_000)
    if args.worker:
        args.records = n
        worker(args)
        return

    import pyspark

    from kshare_sidecar.testing import KafkaBroker

    if args.rounds > 1 and args.baseline_python:
        ap.error("--rounds > 1 runs everything in this interpreter; leave out --baseline-python")
    spark_version = pyspark.__version__
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} "
          f"({os.cpu_count()} CPUs)", flush=True)
    rounds: list[dict[str, dict]] = []
    limits = broker_limits(args.record_locks)
    with contextlib.ExitStack() as stack:
        k4 = stack.enter_context(KafkaBroker("4", extra_config=limits))
        topic = f"bench-spark-{uuid.uuid4().hex[:6]}"
        produce(k4.bootstrap, topic, n, args.value_size, 2)
        share = None
        if not args.no_sidecar:
            # Started up front, so that --rounds can alternate the three sources in one session.
            k39 = stack.enter_context(KafkaBroker("3.9"))
            produce(k39.bootstrap, topic, n, args.value_size, 2)
            settings = dict(kv.split("=", 1) for kv in args.sidecar_config)
            share = stack.enter_context(sidecar_process(k39.bootstrap, args.record_locks, settings)).bootstrap
        if args.baseline_python:
            base = run_baseline(args.baseline_python, k4.bootstrap, topic, n, args)
            first = {"spark-kafka": base["spark-kafka"],
                     f"kshare-native@{base['kshare-native']['spark']}": base["kshare-native"]}
            spark = session(None)
            jar_version = None
        else:
            first = {}
            jar_version, jars = kafka_jar_list(spark_version, args.kafka_jar_version)
            spark = session(jars)
        for r in range(args.rounds):
            res = dict(first) if r == 0 else {}
            warmup = args.warmup if r == 0 else 0
            if jar_version is not None:
                res["spark-kafka"] = bench_spark_kafka(spark, k4.bootstrap, topic, jar_version, args, n, warmup)
                print(f"[round {r + 1}] spark-kafka    {res['spark-kafka']}", flush=True)
            res["kshare-native"] = bench_kshare(spark, k4.bootstrap, k4.bootstrap, topic, args, n, warmup)
            print(f"[round {r + 1}] kshare-native  {res['kshare-native']}", flush=True)
            if share is not None:
                res["kshare-sidecar"] = bench_kshare(spark, share, k39.bootstrap, topic, args, n, warmup)
                print(f"[round {r + 1}] kshare-sidecar {res['kshare-sidecar']}", flush=True)
            if args.librdkafka_reader:
                res["kshare-native-rdkafka-reader"] = bench_kshare(spark, k4.bootstrap, k4.bootstrap, topic, args, n,
                                                                   warmup, read_client="librdkafka")
                print(f"[round {r + 1}] kshare-native-rdkafka-reader {res['kshare-native-rdkafka-reader']}",
                      flush=True)
            if args.floor:
                res["python-floor"] = bench_floor(spark, args, n, warmup)
                print(f"[round {r + 1}] python-floor   {res['python-floor']}", flush=True)
            rounds.append(res)
        spark.stop()
    load_end = os.getloadavg()

    ratios = [round_ratios(res) for res in rounds]
    earlier = [round_ratios(res, "records_per_s_from_plan_start") for res in rounds]
    summary = {key: statistics.median(rs[key] for rs in ratios if key in rs)
               for key in sorted({k for rs in ratios for k in rs})}
    print()
    print(f"{'source':<28} {'records/s per round':<28} {'batches x mean (round 1)':<26} "
          f"{'ratio to spark-kafka per round':<32} (clock from the first batch's start)")
    for key in rounds[0]:
        rates = " / ".join(f"{res[key].get('records_per_s', 'error')}" for res in rounds if key in res)
        shape = f"{rounds[0][key].get('batches')} x {rounds[0][key].get('mean_batch')}"
        rel = " / ".join(f"{rs[key + '/spark-kafka']:.3f}" for rs in ratios if key + "/spark-kafka" in rs) or "1"
        old = " / ".join(f"{rs[key + '/spark-kafka']:.3f}" for rs in earlier if key + "/spark-kafka" in rs) or "1"
        print(f"{key:<28} {rates:<28} {shape:<26} {rel:<32} ({old})")
    print(f"load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}, "
          f"at end {load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f} (1 / 5 / 15 min)")
    print(json.dumps({"benchmark": "spark_source", "spark": spark_version, "records": n,
                      "value_size": args.value_size, "partitions": 2, "per_trigger": args.per_trigger,
                      "warmup": args.warmup, "record_locks": args.record_locks, "rounds": args.rounds,
                      "sidecar_config": args.sidecar_config,
                      "cores": "local[2]", "cpus": os.cpu_count(),
                      "loadavg_at_start": [round(x, 2) for x in load_start],
                      "loadavg_at_end": [round(x, 2) for x in load_end],
                      "results": rounds[0] if len(rounds) == 1 else rounds,
                      "ratios": ratios[0] if len(ratios) == 1 else ratios,
                      "ratios_from_plan_start": earlier[0] if len(earlier) == 1 else earlier,
                      "median_ratios": summary}))


def round_ratios(res: dict[str, dict], rate: str = "records_per_s") -> dict[str, float]:
    """``rate`` of each kshare run divided by Spark's Kafka source's in the same round."""
    base = res.get("spark-kafka", {}).get(rate)
    if not base:
        return {}
    return {f"{key}/spark-kafka": round(r[rate] / base, 3)
            for key, r in res.items() if key != "spark-kafka" and r.get(rate)}


if __name__ == "__main__":
    main()
