"""The backend broker killed (SIGKILL) and restarted under load: the sidecar survives, says so in
a handful of lines (down, a reminder every 10 s, up again — not thousands of aiokafka errors),
and consumption resumes. kshare only. Counts lines, not time."""

from __future__ import annotations

import re
import urllib.request

import pytest

from kshare_sidecar.testing.kafka import KafkaBroker, free_port
from tests.e2e.conftest import SidecarProcess, Target, Worker, wait_until
from tests.support import create_topic, produce, unique

# a broker restarted under load: the opt-in fault suite, `make test-faults` (about a minute)
pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400), pytest.mark.optin("faults")]


def backend_up(port: int) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found = re.search(r"^kshare_backend_up (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def test_backend_restart_under_load_is_a_handful_of_log_lines(tmp_path, monkeypatch):
    total = 6000
    metrics_port = free_port()
    monkeypatch.setenv("KSHARE_METRICS_PORT", str(metrics_port))
    with KafkaBroker("3.9") as broker:
        topic, group = unique("outage"), unique("g")
        create_topic(broker.bootstrap, topic, 2)
        produce(broker.bootstrap, topic, total, partitions=2)
        sc = SidecarProcess(broker.bootstrap, tmp_path / "sidecar.log").start()
        try:
            target = Target("kshare", sc.bootstrap, broker.bootstrap)
            workers = [Worker(target, group, topic, tmp_path / f"w{i}.jsonl", mode="explicit",
                              max_poll_records=50, work_ms=2, idle_s=40, max_s=300) for i in range(2)]

            def delivered() -> int:
                return len({(r["p"], r["o"]) for w in workers for r in w.records()})

            assert wait_until(lambda: delivered() > 200, 90), sc.log_tail()
            assert backend_up(metrics_port) == 1.0
            mark = sc.log_path.stat().st_size
            before = delivered()
            broker.kill()
            assert wait_until(lambda: "backend unreachable (" in sc.log_path.read_text()[mark:], 30)
            assert backend_up(metrics_port) == 0.0
            broker.restart(down_s=4)  # start it again on the same ports and data (KRaft recovery)
            assert wait_until(lambda: "backend reachable again" in sc.log_path.read_text()[mark:], 90), \
                sc.log_path.read_text()[mark:][-3000:]
            outage_log = sc.log_path.read_text(errors="replace")[mark:]
            assert wait_until(lambda: delivered() > before + 200, 120), "consumption did not resume"
            assert sc.proc.poll() is None, "the sidecar died"
            assert backend_up(metrics_port) == 1.0
        finally:
            for w in workers:
                w.proc.kill()
            sc.stop()
    lines = outage_log.splitlines()
    warnings = [line for line in lines if re.search(r" (WARNING|ERROR|CRITICAL) ", line)]
    health = [line for line in warnings if "kshare.backend:" in line]
    print(f"\n[kshare] backend outage: {len(lines)} log lines, {len(warnings)} WARNING+, "
          f"health lines: {[h.split(': ', 1)[-1] for h in health]}")
    assert any("backend unreachable (" in h for h in health)
    assert sum("backend reachable again" in h for h in health) == 1
    assert "Traceback" not in outage_log
    assert len(warnings) <= 15, "\n".join(warnings[:60])  # measured: 9 and 10 for 18-19 s outages
