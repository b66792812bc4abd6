"""The sidecar stopped (SIGTERM) and started again mid-run: consumption resumes, nothing
acknowledged is redelivered, nothing unacknowledged is lost, and the members are kept (the
restarted sidecar restores them from the state topic, as a restarted Kafka broker replays its
coordinator's members: the ShareConsumers never rejoin). kshare only (native Kafka has no sidecar
to restart). :func:`restart_mid_run` is the scenario; tests/e2e/test_tansu.py runs it with SIGKILL
on tansu."""

from __future__ import annotations

import signal
import time

import pytest

from tests.e2e.conftest import SidecarProcess, Target, Worker, rdkafka_membership, wait_until
from tests.support import create_topic, produce, unique

pytestmark = pytest.mark.kafka


# Every state write mode (the default, fenced; with a Kafka transaction per write; without fencing
# by the backend) with the zombie-sidecar fault suite, `make test-fencing` (about a minute each);
# the default suite restarts a sidecar mid-run in tests/e2e/test_asyncio_client.py.
@pytest.mark.optin("fencing")
@pytest.mark.parametrize("write_mode", ["fenced", "transactional", "idempotent"])
def test_restart_mid_run_loses_nothing_and_redelivers_no_acked_record(kafka_39, tmp_path, write_mode):
    """Every state write mode (docs/persistence.md)."""
    restart_mid_run(kafka_39.bootstrap, tmp_path, write_mode)


def restart_mid_run(backend: str, tmp_path, write_mode: str, *, sig: int = signal.SIGTERM, total: int = 20_000,
                    label: str = "kshare", env: dict[str, str] | None = None, idle_s: float = 15) -> None:
    """Two ShareConsumer processes on ``total`` records; the sidecar stopped with ``sig`` after a
    quarter and started again on the same port; every record delivered, none acknowledged twice.
    ``idle_s``: how long a consumer waits without records before it ends, so longer than the
    sidecar is down (its restart took 17-25 s on a machine at load 15-24)."""
    sc = SidecarProcess(backend, tmp_path / "sidecar.log",
                        env={**(env or {}), "KSHARE_STATE_WRITE_MODE": write_mode}).start()
    try:
        target = Target("kshare", sc.bootstrap, backend)
        topic, group = unique("restart"), unique("g")
        create_topic(backend, topic, 2)
        produce(backend, topic, total, partitions=2)
        workers = [Worker(target, group, topic, tmp_path / f"w{i}.jsonl", mode="explicit", max_poll_records=100,
                          work_ms=0.5, idle_s=idle_s, max_s=200, debug="cgrp") for i in range(2)]

        def delivered() -> int:
            return len({(r["p"], r["o"]) for w in workers for r in w.records()})

        assert wait_until(lambda: delivered() > total // 4, 60), sc.log_tail()
        rc = sc.stop(sig)
        assert rc == (0 if sig == signal.SIGTERM else -sig), f"{signal.Signals(sig).name}: exit code {rc}"
        stopped_at = delivered()
        time.sleep(1)
        sc.start()
        for w in workers:
            assert w.wait(240) == 0, w.stderr()
        assert stopped_at < total, "the restart happened after everything was consumed: test proves nothing"
    finally:
        sc.stop()
    events = [e for w in workers for e in w.events()]
    records = [e for e in events if e["ev"] == "rec"]
    acked = [e for e in events if e["ev"] == "ack" and e["ok"]]
    assert len({(r["p"], r["o"]) for r in records}) == total, "an unacknowledged record was lost"
    # a record whose acknowledgement succeeded is never delivered again (order-free check:
    # no delivery of it carries a higher delivery count than the acknowledged one)
    acked_count = {(a["p"], a["o"]): a["dc"] for a in acked}
    redelivered_acked = [(r["p"], r["o"], r["dc"]) for r in records
                         if (r["p"], r["o"]) in acked_count and r["dc"] > acked_count[(r["p"], r["o"])]]
    assert acked, "no acknowledgement succeeded: the test proves nothing"
    assert redelivered_acked == [], f"acknowledged records were redelivered: {redelivered_acked[:5]}"
    for i in range(2):  # the members were restored: no UNKNOWN_MEMBER_ID, no rejoin at epoch 0
        epochs, lost = rdkafka_membership(tmp_path / f"w{i}.jsonl.rdkafka.log")
        assert not lost, f"worker {i} lost its membership across the restart: {lost[:3]}"
        assert epochs.count(0) == 1 and max(epochs) > 0, f"worker {i} rejoined (member epochs it sent: {epochs})"
    print(f"\n[{label}, {write_mode} state writes] {signal.Signals(sig).name} and restart after {stopped_at} of "
          f"{total} records: all delivered, {len(records) - total} redeliveries of unacknowledged records")

