"""Options of the nemesis suite (tests/e2e/test_nemesis.py), loaded by ``make test-nemesis`` and
``make nemesis-schedule`` with ``-p tests.e2e.nemesis_options``; without it the suite's defaults
apply."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nemesis")
    group.addoption("--nemesis-repeat", type=int, default=5, help="runs of each fault class (default 5)")
    group.addoption("--nemesis-minutes", type=float, default=3.0, help="length of the seeded schedule (minutes)")
    group.addoption("--nemesis-seed", type=int, default=None, help="the schedule's seed (default: a new one)")
    group.addoption("--nemesis-brokers", type=int, default=1, help="backend brokers of the seeded schedule (1 or 3)")
