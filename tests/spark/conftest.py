"""Fixtures for the PySpark share-group source: a local SparkSession and two share-group targets.

``target`` runs each scenario twice: against native Kafka 4.x share groups (``kafka_4``) and
through an in-process kshare sidecar on Kafka 3.9 (``kafka_39``). Sizes are small by default
so the suite runs in minutes on two cores; ``KSHARE_SPARK_FULL=1`` runs the full 100k.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

# The Spark suite runs with `make test-spark`, which installs the `spark` extra; the default
# `make test` leaves tests/spark out explicitly rather than skipping it here.
import pyspark  # noqa: E402,F401

from tests.support import create_topic, set_group_config, unique  # noqa: E402

# Spark starts its Python workers (the source's driver-side process, executors, planners) with
# PYSPARK_PYTHON, else whatever `python3` is on PATH, which need not be this venv's (it then
# lacks pyarrow / confluent-kafka). Subprocesses started by the tests inherit this too.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

FULL = os.environ.get("KSHARE_SPARK_FULL") == "1"
#: Records in the drain and kill/restart scenarios.
DRAIN_RECORDS = 100_000 if FULL else 20_000
#: Delivery limit used by the poison scenario (a per-group config, below both targets' default 5).
POISON_LIMIT = 3
#: Acquisition lock for test groups: the highest Kafka allows, so a cold first batch (JVM + Python
#: worker start-up) cannot outlive it; failed members release their records on disconnect anyway.
LOCK_MS = 60_000


@dataclass
class Target:
    """Where a scenario consumes from: ``share`` serves the group, ``backend`` holds the log."""

    name: str
    share: str
    backend: str
    native: bool
    notes: dict = field(default_factory=dict)

    def topic(self, partitions: int = 2) -> str:
        topic = unique(f"spark-{self.name}")
        create_topic(self.backend, topic, partitions)
        return topic

    def group(self, **configs: str) -> str:
        """A fresh group reading from the earliest offset, with the test lock and share.* ``configs``.

        Per-group configs (IncrementalAlterConfigs on a GROUP resource) work the same way on
        Kafka 4.x and on the kshare sidecar, and can be set before the first member joins.
        """
        group = unique("spark-g")
        set_group_config(self.share, group, {
            "share.auto.offset.reset": "earliest",
            "share.record.lock.duration.ms": str(LOCK_MS),
            **configs,
        })
        return group

    def source_options(self, group: str, topic: str, **extra: str) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.share,
            "kafka.backend.servers": self.backend,
            "group": group,
            "subscribe": topic,
            "lockDurationMs": str(LOCK_MS),
            **extra,
        }


class SidecarThread:
    """A kshare sidecar on its own asyncio loop in a daemon thread (Spark tests are synchronous)."""

    def __init__(self, backend: str, **overrides) -> None:
        from kshare_sidecar.config import load_config
        from kshare_sidecar.app import Sidecar

        # Sidecar defaults otherwise: groups get earliest, the lock and the delivery limit as
        # per-group configs (Target.group), exactly as on native Kafka.
        config = load_config(env={}, overrides={
            "bootstrap.servers": backend,
            "listen": "127.0.0.1:0",
            "state.topic.replication.factor": 1,
            **overrides,
        })
        self.sidecar = Sidecar(config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kshare-sidecar", daemon=True)

    def __enter__(self) -> SidecarThread:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.sidecar.start(), self.loop).result(60)
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sidecar.port}"

    def __exit__(self, *exc) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.sidecar.stop(), self.loop).result(60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.fixture(scope="session")
def kshare_sidecar(kafka_39) -> Iterator[SidecarThread]:
    with SidecarThread(kafka_39.bootstrap) as sidecar:
        yield sidecar


@pytest.fixture(scope="session", params=["native", "kshare"])
def target(request) -> Target:
    if request.param == "native":
        kafka_4 = request.getfixturevalue("kafka_4")
        return Target("native", kafka_4.bootstrap, kafka_4.bootstrap, True)
    kafka_39 = request.getfixturevalue("kafka_39")
    sidecar = request.getfixturevalue("kshare_sidecar")
    return Target("kshare", sidecar.bootstrap, kafka_39.bootstrap, False)


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from kshare_sidecar.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("kshare-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
