"""The Faust transport: a Faust app (faust-streaming) whose stateless agent consumes a share group through the
``kshare://`` transport, on kshare over Kafka 3.9 and natively on Kafka 4.3, side by side.

Two ``faust worker`` processes (tests/e2e/faust_worker.py) share the group: on kshare one uses
``broker=kshare://sidecar`` for everything, the other ``broker_consumer=kshare://sidecar`` with
``broker_producer=kafka://backend``. The agent fails on the first delivery of every 100th record —
worker 0 lets the exception crash the agent (Faust restarts it), worker 1 catches it with
``release_on_error()`` — and those records must come back (delivery count 2); every record must be
processed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support import create_topic, produce, set_group_config, unique

pytest.importorskip("faust", reason="faust-streaming is not installed (pip install 'kshare-sidecar[faust]')")

pytestmark = pytest.mark.kafka

WORKER = str(Path(__file__).with_name("faust_worker.py"))
#: KSHARE_FAUST_RECORDS=50000 for the full size (the default suite keeps to 3,000)
TOTAL, FAIL_EVERY = int(os.environ.get("KSHARE_FAUST_RECORDS", "3000")), 100


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip().endswith("}")]


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_faust_agents_share_a_group(target, tmp_path):
    topic, group = unique("faust"), unique("fapp")
    create_topic(target.backend, topic, 3)
    # the lock outlasts a worker's start-up hiccups; earliest: the records exist before the group
    set_group_config(target.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                               "share.record.lock.duration.ms": "15000"})
    out = tmp_path / "events.jsonl"
    procs = []
    for i in range(2):
        env = {**os.environ, "KS_BROKER": f"kshare://{target.bootstrap}", "KS_TOPIC": topic, "KS_GROUP": group,
               "KS_OUT": str(out), "KS_FAIL_EVERY": str(FAIL_EVERY), "KS_DATADIR": str(tmp_path / f"data{i}"),
               # 2 ms a record: one worker alone cannot drain 3,000 before the other has joined
               "KS_SLOW_MS": "2" if TOTAL <= 10_000 else "0"}
        if i == 1 or TOTAL > 10_000:
            # beyond ~100 crashes a second mode's supervisor gives up on the agent: at the full size
            # both workers catch failures with release_on_error(); by default worker 0 crashes
            env["KS_ON_ERROR"] = "context"
        if i == 1:
            env["KS_PRODUCER"] = f"kafka://{target.backend}"
        log = open(tmp_path / f"worker{i}.log", "wb")
        procs.append(subprocess.Popen([sys.executable, WORKER], env=env, stdout=log, stderr=subprocess.STDOUT,
                                      cwd=tmp_path))
    try:
        # both apps running (joined or joining the group) before the records exist
        assert _wait(lambda: sum(e["ev"] == "start" for e in _events(out)) >= 2, 30), "workers did not start"
        produce(target.backend, topic, TOTAL, partitions=3)
        deadline = time.monotonic() + 60 + TOTAL / 500
        while time.monotonic() < deadline:
            if len({e["n"] for e in _events(out) if e["ev"] == "rec"}) >= TOTAL:
                break
            assert all(p.poll() is None for p in procs), (tmp_path / "worker0.log").read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(1.0)  # let late duplicates (if any) show up before counting
    finally:
        for p in procs:
            p.terminate()
        rcs = [p.wait(30) for p in procs]
    events = _events(out)
    recs = [e for e in events if e["ev"] == "rec"]
    fails = [e for e in events if e["ev"] == "fail"]
    done = {e["n"] for e in recs}
    logs = "\n".join((tmp_path / f"worker{i}.log").read_text(errors="replace")[-2000:] for i in range(2))
    assert len(done) == TOTAL, f"{TOTAL - len(done)} records never processed\n{logs}"
    # every record the agent raised on came back (RELEASE) and was then processed on delivery 2+
    failing = {n for n in range(TOTAL) if n % FAIL_EVERY == 0}
    assert {e["n"] for e in fails} == failing
    assert all(e["dc"] == 1 for e in fails)
    assert {e["n"] for e in recs if e["dc"] >= 2} >= failing
    # the other records were accepted once (a redelivery would mean an ACCEPT went missing)
    dups = [n for n, c in Counter(e["n"] for e in recs).items() if c > 1]
    assert len(dups) <= TOTAL // 100, f"{len(dups)} records processed twice: {sorted(dups)[:20]}"
    # both workers took part
    by_pid = Counter(e["pid"] for e in recs)
    assert len(by_pid) == 2 and min(by_pid.values()) > 0, by_pid
    assert rcs == [0, 0] or all(rc in (0, -15) for rc in rcs), rcs
