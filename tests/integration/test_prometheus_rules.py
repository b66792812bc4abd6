"""The shipped alert rules load and behave (promtool from Debian's `prometheus` package), and every
query of the shipped Grafana dashboard names metrics the sidecar exports. The live check of the
dashboard against a sidecar under load is tests/integration/test_prometheus_live.py (opt-in)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kshare_sidecar import metrics

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "compose" / "prometheus" / "kshare-alerts.yml"
RULE_TESTS = REPO / "compose" / "prometheus" / "kshare-alerts.test.yml"
DASHBOARD = REPO / "compose" / "grafana" / "kshare-dashboard.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed "
                                    "(flock /tmp/apt.lock apt-get install -y prometheus)")


@needs_promtool
def test_promtool_checks_the_rules():
    done = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


@needs_promtool
def test_promtool_unit_tests_of_every_alert_pass():
    done = subprocess.run([PROMTOOL, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert tested == set(re.findall(r"- alert: (\w+)", RULES.read_text()))


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p["targets"]]


def exported_names() -> set[str]:
    """Metric names the sidecar exports (collector families with their _total / histogram suffixes)."""
    source = Path(metrics.__file__).read_text()
    every = set(re.findall(r'"(kshare_[a-z_]+)"', source))
    gauges = set(re.findall(r'GaugeMetricFamily\(\s*"(kshare_\w+)"', source))
    histograms = set(re.findall(r'Histogram\(\s*"(kshare_\w+)"', source))
    counters = every - gauges - histograms
    return ({f"{c}_total" for c in counters} | gauges
            | {f"{h}_{s}" for h in histograms for s in ("bucket", "count", "sum")} | {"up"})


def test_every_dashboard_query_names_exported_metrics():
    names = exported_names()
    for expr in dashboard_queries():
        used = set(re.findall(r"\bkshare_\w+", expr)) | ({"up"} if re.search(r"\bup\{", expr) else set())
        assert used, expr
        assert used <= names, f"{expr}: {sorted(used - names)} not exported"
