"""Kill a running query (SIGKILL, whole process group) mid-run and restart it from its checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import DRAIN_RECORDS
from .helpers import expected_keys, parquet_keys, produce_keyed, wait_for

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]


def _start(target, group: str, topic: str, out: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.query_proc", target.share, target.backend, group, topic, out, "2000"],
        cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def _kill(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)  # the driver, its JVM and Python workers: a session we created
    proc.wait(60)


def test_killed_query_restarts_from_checkpoint(spark, target, record_property):
    topic, group = target.topic(2), target.group()
    produce_keyed(target.backend, topic, DRAIN_RECORDS, batch_bytes=4096)
    out = tempfile.mkdtemp(prefix="kshare-spark-kill-")
    log = Path(out) / "query.log"
    data = f"{out}/data"

    first = _start(target, group, topic, out, log)
    try:
        wait_for(lambda: sum(parquet_keys(spark, data).values()) >= DRAIN_RECORDS // 5, timeout_s=180,
                 what="the first run to write a fifth of the records")
    finally:
        _kill(first)
    before = parquet_keys(spark, data)
    assert sum(before.values()) < DRAIN_RECORDS, "the first run finished before it was killed: raise the size"

    second = _start(target, group, topic, out, log)
    try:
        wait_for(lambda: set(parquet_keys(spark, data)) >= expected_keys(DRAIN_RECORDS), timeout_s=300,
                 what="the restarted query to cover every record")
    finally:
        _kill(second, signal.SIGTERM)
    seen = parquet_keys(spark, data)
    duplicates = sum(seen.values()) - len(seen)
    record_property("duplicates", duplicates)
    record_property("written_before_kill", sum(before.values()))
    print(f"[{target.name}] killed after {sum(before.values())} of {DRAIN_RECORDS}; after restart "
          f"{len(seen)} distinct, duplicates={duplicates}")
    assert set(seen) == expected_keys(DRAIN_RECORDS)
    # Duplicates come only from batches in flight at the kill: a few micro-batches at most.
    assert duplicates <= DRAIN_RECORDS // 2, (duplicates, Path(log).read_text()[-3000:])
