"""Options of the soak (tests/soak/test_soak.py); `make soak` passes them."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soak")
    group.addoption("--soak-minutes", default="60", help="length of the soak's load (minutes)")
    group.addoption("--soak-interval-minutes", default="10", help="report interval (minutes)")
    group.addoption("--soak-sidecars", default="2", help="sidecars in the cluster (node 1 is never restarted)")
    group.addoption("--soak-out", default="", help="directory for soak-report.json and soak-report.md")
