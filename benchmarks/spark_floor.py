"""The floor of a Python streaming source: what PySpark itself costs per micro-batch.

``python-floor`` (``spark_source.py --floor``) is a Python ``DataSourceStreamReader`` with the
kshare source's schema and batch shape (``--per-trigger`` rows per batch over two input
partitions) whose driver work is a counter and whose reads cost nothing: each input partition
yields one Arrow batch of constant columns. Whatever it reaches is the ceiling for *any* source
written against PySpark's Python data source API on this Spark and machine -- the driver's
Python process round trips per trigger, the Python worker per task, Arrow into the JVM -- so the
ratio ``python-floor / spark-kafka`` says how much of the kshare source's gap is its own work and
how much is the API's (the source's target: ≥ 1.0× Spark's Kafka source).

The classes are pickled by value (``register``), so Spark's Python workers need not import this
file.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

NAME = "kshare-bench-floor"


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        from kshare_sidecar.spark.source import SCHEMA

        return SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return FloorReader(int(self.options["records"]), int(self.options["perTrigger"]),
                           int(self.options.get("valueSize", "100")))


class FloorPartition(InputPartition):
    def __init__(self, partition: int, rows: int, first: int) -> None:
        super().__init__(None)
        self.partition, self.rows, self.first = partition, rows, first


class FloorReader(DataSourceStreamReader):
    """Offsets are a record counter; each batch is at most ``per_trigger`` of ``records``."""

    def __init__(self, records: int, per_trigger: int, value_size: int) -> None:
        self.records, self.per_trigger, self.value_size = records, per_trigger, value_size

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        at = int((start or {"n": 0})["n"])
        return {"n": min(at + self.per_trigger, self.records)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        lo, hi = int(start["n"]), int(end["n"])
        half = (hi - lo + 1) // 2
        return [FloorPartition(0, half, lo), FloorPartition(1, hi - lo - half, lo + half)]

    def read(self, partition: FloorPartition):
        import numpy as np
        import pyarrow as pa

        from kshare_sidecar.spark.read import arrow_schema

        n = partition.rows
        if not n:
            return
        schema = arrow_schema()  # the kshare source's default schema (includeHeaders=false)
        f = {field.name: field.type for field in schema}
        columns = {
            "key": pa.repeat(pa.scalar(b"k", f["key"]), n),
            "value": pa.repeat(pa.scalar(b"x" * self.value_size, f["value"]), n),
            "topic": pa.repeat(pa.scalar("floor", f["topic"]), n),
            "partition": pa.repeat(pa.scalar(partition.partition, f["partition"]), n),
            "offset": pa.array(np.arange(partition.first, partition.first + n, dtype=np.int64), type=f["offset"]),
            "timestamp": pa.nulls(n, f["timestamp"]),
            "timestampType": pa.repeat(pa.scalar(0, f["timestampType"]), n),
            "deliveryCount": pa.repeat(pa.scalar(1, f["deliveryCount"]), n),
        }
        yield pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def register(spark) -> None:
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(FloorSource)
