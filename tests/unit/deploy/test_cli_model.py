"""The argv checker the deployment tests rely on rejects what the real CLI rejects."""

from __future__ import annotations

import pytest

from .cli_model import check_argv


@pytest.mark.parametrize("argv", [
    ["sidecar", "run"],
    ["sidecar", "run", "--bootstrap-server", "kafka:9092,kafka2:9092", "--listen=0.0.0.0:9192"],
    ["sidecar", "run", "--node-id", "3", "--persister", "memory", "--log-level", "debug"],
    ["sidecar", "run", "--help"],
    ["plugins", "--json"],
    ["demo", "--records", "10", "--consumers", "2"],
])
def test_accepts_real_invocations(argv):
    assert check_argv(argv) == []


@pytest.mark.parametrize("argv,expected", [
    (["sidecar", "runn"], "has no command 'runn'"),
    (["sidecars", "run"], "has no command 'sidecars'"),
    (["sidecar"], "is a command group"),
    (["sidecar", "run", "--bootstrap-servers", "k:9092"], "has no option --bootstrap-servers"),
    (["sidecar", "run", "--listen", "9192"], "expected host:port"),
    (["sidecar", "run", "--node-id", "one"], "is not int"),
    (["sidecar", "run", "--log-level", "LOUD"], "not a logging level"),
    (["sidecar", "run", "--listen"], "needs a value"),
    (["sidecar", "run", "extra"], "takes no argument"),
    (["plugins", "--json=yes"], "is a flag"),
])
def test_rejects_what_the_cli_rejects(argv, expected):
    problems = check_argv(argv)
    assert any(expected in p for p in problems), problems
