"""PySpark: the kshare share-group source vs Spark's own Kafka source, same topic, same machine.

N records (--records, default 200k; --quick 50k) of --value-size bytes on a 2-partition topic.
Scenarios, each a fresh streaming query in one local[2] SparkSession writing to the `noop` sink:
  (a) spark-kafka   Spark's built-in Kafka source (spark-sql-kafka-0-10 from Maven Central) on Kafka 4.x
  (b) kshare-native the kshare data source on native Kafka 4.x share groups
  (c) kshare-sidecar the kshare data source through a kshare sidecar on Kafka 3.9 (--no-sidecar skips it)
All use the same per-trigger cap (--per-trigger, maxOffsetsPerTrigger / maxRecordsPerTrigger) and
the default trigger (next batch as soon as the previous ends). The clock runs from the first
micro-batch that read records to the moment N records were read (query start-up and group join
are excluded alike). Brokers, sidecar and Spark share the machine, so figures are relative.

Prints one line per scenario, then one JSON object as the LAST line.
Usage: python benchmarks/spark_source.py [--quick] [--records N] [--no-sidecar]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


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


def set_earliest(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in {"share.auto.offset.reset": "earliest",
                            "share.record.lock.duration.ms": "60000"}.items()]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]).values():
        f.result(30)


def run_query(spark, df, n: int, timeout_s: float) -> dict:
    query = df.writeStream.format("noop").start()
    first_at = None
    done_at = None
    rows = 0
    batches = 0
    seen = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and rows < n:
            time.sleep(0.05)
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            for p in query.recentProgress:
                if p["batchId"] in seen:
                    continue
                seen.add(p["batchId"])
                if p["numInputRows"]:
                    batches += 1
                    # The batch's start time: the clock starts when the first batch with records starts.
                    start_s = _ts(p["timestamp"])
                    if first_at is None or start_s < first_at:
                        first_at = start_s
                    rows += p["numInputRows"]
                    done_at = start_s + p["durationMs"].get("triggerExecution", 0) / 1000
    finally:
        query.stop()
    if rows < n:
        raise RuntimeError(f"only {rows} of {n} records read within {timeout_s:.0f} s")
    seconds = max(done_at - first_at, 1e-6)
    return {"records": rows, "seconds": round(seconds, 2), "records_per_s": round(rows / seconds),
            "batches": batches}


def _ts(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class SidecarThread:
    def __init__(self, backend: str) -> None:
        from kshare_sidecar.config import load_config
        from kshare_sidecar.service.runner import Sidecar

        self.sidecar = Sidecar(load_config(env={}, overrides={
            "bootstrap.servers": backend, "listen": "127.0.0.1:0", "share.auto.offset.reset": "earliest",
            "state.topic.replication.factor": 1, "group.share.record.lock.duration.ms": 60000}))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.sidecar.start(), self.loop).result(60)
        return f"127.0.0.1:{self.sidecar.port}"

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.sidecar.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--per-trigger", type=int, default=20_000)
    ap.add_argument("--no-sidecar", action="store_true")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--kafka-jar-version", default="4.0.0",
                    help="spark-sql-kafka version to use when the running Spark's own is not on Maven Central")
    args = ap.parse_args()
    n = args.records or (50_000 if args.quick else 200_000)

    import pyspark
    from pyspark.sql import SparkSession

    from kshare_sidecar.spark import register
    from kshare_sidecar.testing import KafkaBroker

    from kshare_sidecar.testing import HarnessError

    spark_version = pyspark.__version__
    # spark-sql-kafka must match Spark; when Maven Central lacks this exact release (4.3.0 was
    # absent in late 2026, and 4.1/4.2 lack spark-token-provider-kafka there), fall back to --kafka-jar-version and say so in the JSON.
    jar_version = spark_version
    try:
        jars = spark_kafka_jars(jar_version)
    except HarnessError as exc:
        print(f"spark-sql-kafka {spark_version} not resolvable ({exc}); using {args.kafka_jar_version}", flush=True)
        jar_version = args.kafka_jar_version
        jars = spark_kafka_jars(jar_version)
    # What --packages would add: the connector and the client; Spark already ships the rest
    # (Scala, Hadoop, compression codecs), and a second copy of those only causes conflicts.
    wanted = ("spark-sql-kafka", "spark-token-provider-kafka", "kafka-clients", "commons-pool2")
    jar_list = ",".join(str(p) for p in sorted(jars.glob("*.jar")) if p.name.startswith(wanted))
    results: dict[str, dict] = {}
    with KafkaBroker("4") as k4:
        topic = f"bench-spark-{uuid.uuid4().hex[:6]}"
        produce(k4.bootstrap, topic, n, args.value_size, 2)
        spark = (SparkSession.builder.master("local[2]").appName("kshare-spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.jars", jar_list).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", k4.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.per_trigger)).load())
        try:
            results["spark-kafka"] = run_query(spark, df, n, args.timeout)
        except Exception as exc:  # e.g. a connector built for another Spark line: NoSuchMethodError
            results["spark-kafka"] = {"error": str(exc)[:300], "jar": jar_version,
                                      "fix": f"run under pyspark=={jar_version} so the connector matches"}
        print(f"spark-kafka    {results['spark-kafka']}", flush=True)

        group = f"bench-{uuid.uuid4().hex[:6]}"
        set_earliest(k4.bootstrap, group)
        df = (spark.readStream.format("kshare").option("kafka.bootstrap.servers", k4.bootstrap)
              .option("group", group).option("subscribe", topic)
              .option("maxRecordsPerTrigger", str(args.per_trigger)).option("lockDurationMs", "60000").load())
        results["kshare-native"] = run_query(spark, df, n, args.timeout)
        print(f"kshare-native  {results['kshare-native']}", flush=True)

        if not args.no_sidecar:
            with KafkaBroker("3.9") as k39:
                produce(k39.bootstrap, topic, n, args.value_size, 2)
                with SidecarThread(k39.bootstrap) as share:
                    df = (spark.readStream.format("kshare").option("kafka.bootstrap.servers", share)
                          .option("kafka.backend.servers", k39.bootstrap)
                          .option("group", f"bench-{uuid.uuid4().hex[:6]}").option("subscribe", topic)
                          .option("maxRecordsPerTrigger", str(args.per_trigger))
                          .option("lockDurationMs", "60000").load())
                    results["kshare-sidecar"] = run_query(spark, df, n, args.timeout)
                    print(f"kshare-sidecar {results['kshare-sidecar']}", flush=True)
        spark.stop()
    print(json.dumps({"benchmark": "spark_source", "spark": spark_version, "spark_sql_kafka": jar_version, "records": n,
                      "value_size": args.value_size, "partitions": 2, "per_trigger": args.per_trigger,
                      "cores": "local[2]", "results": results}))


if __name__ == "__main__":
    main()
