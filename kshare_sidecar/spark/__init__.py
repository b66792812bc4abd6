"""PySpark streaming source for Kafka share groups (KIP-932), natively or through kshare.

    from kshare_sidecar.spark import register
    register(spark)
    df = (spark.readStream.format("kshare")
          .option("kafka.bootstrap.servers", "sidecar:9092")
          .option("group", "etl").option("subscribe", "orders").load())

Install with ``pip install "kshare-sidecar[spark]"``.
"""

from __future__ import annotations

from .options import LockDurationWarning, OptionError, SourceOptions, parse_options

try:
    from .source import SCHEMA, SCHEMA_WITH_HEADERS, ShareGroupDataSource, ShareGroupStreamReader
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "kshare_sidecar.spark needs PySpark 4.x with its sql extra: pip install 'kshare-sidecar[spark]' "
        f"(or 'pyspark[sql]>=4.0,<5'); import failed: {exc}"
    ) from exc


def register(spark) -> None:
    """Register the ``kshare`` format with ``spark`` (idempotent)."""
    spark.dataSource.register(ShareGroupDataSource)


__all__ = [
    "SCHEMA",
    "SCHEMA_WITH_HEADERS",
    "LockDurationWarning",
    "OptionError",
    "ShareGroupDataSource",
    "ShareGroupStreamReader",
    "SourceOptions",
    "parse_options",
    "register",
]
