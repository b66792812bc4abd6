"""Redrive under load (docs/console.md, "Redrive"): N dead letters go back to their source topic
through the console while producers and consumers keep working; the sidecar is killed (SIGKILL)
mid-redrive, starts again, resumes by itself, and every dead letter lands on the source topic
exactly once and is consumed again by the (fixed) share group. Opt-in: `make test-console`."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from kshare_sidecar.testing.kafka import free_port
from tests.e2e.conftest import SidecarProcess
from tests.e2e.console_support import ConsoleClient, Producing, ShareWorker, produce_values, read_topic, wait_for
from tests.support import create_topic, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.optin("console")]

N = 600
RATE = 60  # records/s: ten seconds of redrive, killed after about three


def test_a_redrive_under_load_killed_midway_resumes_and_lands_each_record_once(kafka_39, tmp_path):
    backend = kafka_39.bootstrap
    topic, dlq, group = unique("src"), unique("dlq.src"), unique("workers")
    create_topic(backend, topic, 2)
    port = free_port()
    sc = SidecarProcess(backend, tmp_path / "sidecar.log", env={
        "KSHARE_CONSOLE_LISTEN": f"127.0.0.1:{port}", "KSHARE_CONSOLE_ACTIONS_ENABLE": "true",
        "KSHARE_CONSOLE_SAMPLE_INTERVAL_MS": "1000"}).start()
    client = ConsoleClient(f"http://127.0.0.1:{port}")
    workers: list[ShareWorker] = []
    load = None
    try:
        # readers of the source at read_committed see each redriven record once (dlq/redrive.py);
        # the dead letters are headers-only (Kafka 4.4's default), so the redrive reads each
        # source record back from the offset its headers name
        # created through the sidecar with Kafka 4.4's opt-in, which the sidecar keeps for 3.9
        create_topic(sc.bootstrap, dlq, 1, config={"errors.deadletterqueue.group.enable": "true"})
        set_group_config(sc.bootstrap, group, {"errors.deadletterqueue.topic.name": dlq,
                                               "share.isolation.level": "read_committed"})
        produce_values(backend, topic, [f"rej-{i}".encode() for i in range(N)], partitions=2)
        buggy = ShareWorker(sc.bootstrap, group, topic).start()
        workers.append(buggy)
        wait_for(lambda: client.get(f"/api/deadletters?topic={dlq}")[1].get("total", 0) >= N, 180,
                 what=f"{N} dead letters", detail=lambda: (
                     f"{client.get(f'/api/deadletters?topic={dlq}')[1].get('total')} in the topic, "
                     f"{len(buggy.deliveries())} deliveries\n{client.get(f'/api/group?id={group}')[1]}\n"
                     f"{sc.log_tail(40)}"))
        buggy.stop()
        assert client.get(f"/api/group?id={group}")[1]["dead_lettered_total"] == N

        # the bug is fixed: a consumer that accepts, producers that keep producing, then the redrive
        fixed = ShareWorker(sc.bootstrap, group, topic, fixed=True).start()
        workers.append(fixed)
        load = Producing(backend, topic, rate=40).start()
        status, answer = client.post("/api/actions/redrive", {"group": group, "dlq_topic": dlq, "rate": RATE})
        assert status == 200, answer
        before_kill = wait_for(lambda: _examined(client, group) >= N // 5 and _examined(client, group), 60,
                               what="a fifth of the redrive")
        assert before_kill < N, "the redrive ended before the kill: nothing to resume"
        sc.stop(signal.SIGKILL)
        sc.start()
        resumed = client.wait_redrive(group, timeout_s=180)
        assert resumed["state"] == "done", resumed
        assert resumed["resumed"], "the restarted sidecar did not resume the redrive from its position"
        assert 0 < resumed["total"] <= N - before_kill + 60  # it went on near where it was killed
        sent = load.stop()
        load = None

        landed = Counter(dict(m.headers() or []).get("kshare.redrive.source") for m in read_topic(backend, topic))
        copies = {k: n for k, n in landed.items() if k is not None}
        expected = {f"{dlq}/0/{o}".encode() for o in range(N)}
        assert set(copies) == expected, (f"missing {sorted(expected - set(copies))[:5]}, unexpected "
                                         f"{sorted(set(copies) - expected)[:5]}\n{sc.log_tail()}")
        assert [k for k, n in copies.items() if n > 1] == [], "a dead letter landed twice"
        assert sum(landed.values()) == N + N + sent  # the originals, the copies, the load

        def consumed():
            got = {e["redriven"] for e in fixed.deliveries() if e["redriven"] is not None}
            return got if got == expected else None
        wait_for(consumed, 120, what="every redriven record consumed by the fixed group")
        first = Counter(e["redriven"] for e in fixed.deliveries() if e["redriven"] is not None and e["dc"] == 1)
        assert max(first.values()) == 1, "a redriven record was delivered twice as a first delivery"
        print(f"\n[kshare] redrive of {N} dead letters at {RATE}/s under load ({sent} records produced meanwhile): "
              f"killed at {before_kill}, resumed, each landed once and was consumed again")
    finally:
        if load is not None:
            load.stop()
        for w in workers:
            w.stop()
        sc.stop()


def _examined(client: ConsoleClient, group: str) -> int:
    status, view = client.get("/api/redrives")
    if status != 200:
        return 0
    mine = [s for s in view["redrives"] if s["request"]["group"] == group]
    return mine[0]["examined"] if mine else 0
