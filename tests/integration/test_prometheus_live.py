"""The shipped dashboard and alert rules against a real Prometheus (Debian's `prometheus`
package, run here on a free loopback port with a temporary config and storage) scraping a live
sidecar under load: every query of compose/grafana/kshare-dashboard.json returns series, and the
rules of compose/prometheus/kshare-alerts.yml load and evaluate. Opt-in: `make test-console`."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from kshare_sidecar.testing.kafka import free_port
from tests.e2e.conftest import SidecarProcess
from tests.e2e.console_support import Producing, ShareWorker, wait_for
from tests.integration.test_prometheus_rules import RULES, dashboard_queries
from tests.support import create_topic, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.optin("console")]

PROMETHEUS = shutil.which("prometheus")


def _value(i: int) -> bytes:
    """Mostly accepted; every 10th released once (redeliveries), every 25th rejected (dead letters)."""
    return (b"rej-" if i % 25 == 0 else b"relonce-" if i % 10 == 0 else b"ok-") + str(i).encode()


def _query(port: int, expr: str, over_s: int = 0) -> list:
    """The series ``expr`` gives now, or (``over_s``) at any second of the last ``over_s`` seconds,
    as a Grafana panel asks for its time range (query_range)."""
    if over_s:
        now = time.time()
        url = f"http://127.0.0.1:{port}/api/v1/query_range?" + urllib.parse.urlencode(
            {"query": expr, "start": now - over_s, "end": now, "step": 1})
    else:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        answer = json.loads(r.read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_every_dashboard_query_returns_series_from_a_live_sidecar(kafka_39, tmp_path):
    assert PROMETHEUS, "prometheus not installed (flock /tmp/apt.lock apt-get install -y prometheus)"
    backend = kafka_39.bootstrap
    topic, dlq, group = unique("load"), unique("dlq.load"), unique("busy")
    create_topic(backend, topic, 2)
    create_topic(backend, dlq, 1)
    metrics_port, prom_port = free_port(), free_port()
    # a one-sidecar cluster, so that kshare_cluster_members (the cluster panel) has a series too
    sc = SidecarProcess(backend, tmp_path / "sidecar.log", env={
        "KSHARE_METRICS_PORT": str(metrics_port), "KSHARE_CLUSTER_NAME": unique("prom")}).start(timeout_s=120)
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ["{RULES}"]
scrape_configs:
  - job_name: kshare
    static_configs: [{{targets: ["127.0.0.1:{metrics_port}"]}}]
""")
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                            stdout=open(tmp_path / "prometheus.log", "wb"), stderr=subprocess.STDOUT)
    load = worker = None
    try:
        set_group_config(sc.bootstrap, group, {"errors.deadletterqueue.topic.name": dlq})
        load = Producing(backend, topic, rate=200, value_of=_value).start()
        worker = ShareWorker(sc.bootstrap, group, topic).start()
        wait_for(lambda: _ready(prom_port), 60, what="prometheus scraping the sidecar")
        time.sleep(40)  # rates over the dashboard's window need samples, the groups dead letters
        empty = []
        for expr in dashboard_queries():
            q = expr.replace("$__rate_interval", "30s").replace("$group", ".*")
            # over the panel's time range: a share-partition's in-flight and lag series exist only
            # while it has records in flight or behind, which a worker keeping up has only now and then
            if not _query(prom_port, q, over_s=30):
                empty.append(expr)
        assert not empty, f"queries without series: {empty}"
        with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/rules", timeout=10) as r:
            groups = json.loads(r.read())["data"]["groups"]
        rules = [rule for g in groups for rule in g["rules"]]
        assert len(rules) == 8 and all(rule["health"] == "ok" for rule in rules), rules
        # the dead-letter topic was created without the opt-in: its dead letters are archived
        # unwritten, and the alert made for that fires for the group
        with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/alerts", timeout=10) as r:
            alerts = json.loads(r.read())["data"]["alerts"]
        assert any(a["labels"]["alertname"] == "KshareDeadLettersNotWritten" and a["labels"].get("group") == group
                   and a["state"] == "firing" for a in alerts), alerts
        print(f"\n[kshare] {len(dashboard_queries())} dashboard queries returned series; {len(rules)} rules healthy "
              f"(prometheus {_version()})")
    finally:
        for part in (worker, load):
            if part is not None:
                part.stop()
        prom.terminate()
        prom.wait(30)
        sc.stop()


def _ready(port: int) -> bool:
    try:
        return bool(_query(port, 'up{job="kshare"} == 1'))
    except OSError:
        return False


def _version() -> str:
    done = subprocess.run([PROMETHEUS, "--version"], capture_output=True, text=True, timeout=30)
    return (done.stdout or done.stderr).split("\n")[0]
