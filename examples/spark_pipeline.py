"""Example pipeline: a Kafka share group -> a transformation -> Parquet, with PySpark.

Runs with plain ``python`` (local[*]) or ``spark-submit``:

    python examples/spark_pipeline.py --bootstrap 127.0.0.1:9092 --group etl --topic orders \\
        --out /tmp/orders-parquet --earliest --timeout 120
    spark-submit examples/spark_pipeline.py --bootstrap sidecar:9092 --backend kafka:9092 ...

``--bootstrap`` serves the share group (Kafka 4.x, or a kshare sidecar); ``--backend`` is the
cluster executors read payloads from (optional: a sidecar passes Fetch through, so by default
executors read via --bootstrap; naming the backend behind the sidecar saves a hop).
Several copies of this job (and plain Python share consumers) can share the same group.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kshare_sidecar.spark import register


def start_from_earliest(bootstrap: str, group: str) -> None:
    """Set the group's share.auto.offset.reset to earliest (a per-group config; Kafka's default is
    latest). Works on Kafka 4.x and on a kshare sidecar; takes effect for partitions the group
    has not started yet."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--backend", default=None)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True, help="comma-separated topics")
    ap.add_argument("--out", required=True, help="Parquet output directory")
    ap.add_argument("--checkpoint", default=None, help="default: <out>/_checkpoint")
    ap.add_argument("--max-records", default="10000", help="maxRecordsPerTrigger")
    ap.add_argument("--trigger", default="5 seconds")
    ap.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--earliest", action="store_true",
                    help="set the group's share.auto.offset.reset to earliest before starting")
    args = ap.parse_args()

    if args.earliest:
        start_from_earliest(args.bootstrap, args.group)

    # Run with plain `python`, Spark (local mode) starts its Python workers with the `python3` on
    # PATH unless PYSPARK_PYTHON says otherwise: use this interpreter, where kshare is installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    spark = SparkSession.builder.appName("kshare-share-group-pipeline").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)

    reader = (
        spark.readStream.format("kshare")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("group", args.group)
        .option("subscribe", args.topic)
        .option("maxRecordsPerTrigger", args.max_records)
    )
    if args.backend:
        reader = reader.option("kafka.backend.servers", args.backend)
    records = reader.load()

    # The transformation: decode, derive a few columns, keep the coordinates for deduplication.
    enriched = records.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        F.length("value").alias("value_bytes"),
        F.upper(F.col("value").cast("string")).alias("value_upper"),
        "topic", "partition", "offset", "timestamp", "deliveryCount",
        F.to_date("timestamp").alias("day"),
    )

    query = (
        enriched.writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint or f"{args.out.rstrip('/')}/_checkpoint")
        .partitionBy("day")
        .trigger(processingTime=args.trigger)
        .start()
    )
    try:
        query.awaitTermination(args.timeout)
    finally:
        query.stop()
    progress = query.recentProgress  # the last spark.sql.streaming.numRecentProgressUpdates (100)
    rows = sum(p["numInputRows"] for p in progress)
    print(f"stopped: {rows} records read in the last {len(progress)} triggers; output in {args.out}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
