"""A kshare -> Parquet streaming query in its own process, so a test can kill it with SIGKILL.

    python -m tests.spark.query_proc SHARE BACKEND GROUP TOPIC OUT [MAX_RECORDS]
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    share, backend, group, topic, out = argv[:5]
    max_records = argv[5] if len(argv) > 5 else "2000"
    from pyspark.sql import SparkSession

    from kshare_sidecar.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("kshare-kill-test")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = (spark.readStream.format("kshare")
          .option("kafka.bootstrap.servers", share).option("kafka.backend.servers", backend)
          .option("group", group).option("subscribe", topic)
          .option("maxRecordsPerTrigger", max_records).option("lockDurationMs", "60000").load())
    query = (df.writeStream.format("parquet").option("path", f"{out}/data")
             .option("checkpointLocation", f"{out}/ck").trigger(processingTime="1 second").start())
    print("query started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
