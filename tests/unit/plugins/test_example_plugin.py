"""The example distribution under plugins/ installs with pip and its assignor is used."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import typer
from typer.testing import CliRunner

from kshare_sidecar.assignors import AssignmentSpec, MemberSpec, TopicMetadata
from kshare_sidecar.plugins import PluginHost

EXAMPLE = Path(__file__).resolve().parents[3] / "plugins" / "kshare-assignor-example"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """pip-install the example (offline, no deps, no build isolation) into a target dir."""
    work = tmp_path_factory.mktemp("example")
    src = work / "src"
    shutil.copytree(EXAMPLE, src)  # pip builds in-tree; keep the repository clean
    target = work / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        "pip could not build the example plugin offline (needs setuptools>=61 and `wheel`, or "
        f"setuptools>=70.1):\n{proc.stdout}\n{proc.stderr}")
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    yield target
    sys.path.remove(str(target))
    sys.modules.pop("kshare_assignor_example", None)
    importlib.invalidate_caches()


def test_installed_example_is_listed_and_used(installed):
    assert (installed / "kshare_assignor_example-0.1.0.dist-info").is_dir()
    host = PluginHost()
    host.load_plugins()
    entry = next(p for p in host.get_plugins() if p["name"] == "range-assignor")
    assert entry["distribution"] == "kshare-assignor-example" and entry["version"] == "0.1.0"
    assert entry["registers"] == {"assignors": ["range"]}
    assignor = host.get_assignor("range")
    spec = AssignmentSpec(members={m: MemberSpec(frozenset({"t"})) for m in ("a", "b")},
                          topics={"t": TopicMetadata("t", 5)})
    assert assignor.assign(spec).members == {"a": {"t": {0, 1, 2}}, "b": {"t": {3, 4}}}


def test_cli_lists_the_example(installed, monkeypatch):
    from kshare_sidecar import plugins as plugin_mod
    from kshare_sidecar.cli import plugins as cli_plugins

    monkeypatch.setenv("COLUMNS", "250")  # rich reads the width from the environment
    monkeypatch.setattr(plugin_mod, "host", PluginHost())
    root = typer.Typer()
    root.add_typer(cli_plugins.app, name="plugins")

    @root.command()
    def version() -> None:  # a second command so "plugins" stays a sub-command
        pass

    result = CliRunner().invoke(root, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.output)
    assert "range" in data["assignors"] and data["assignors"]["range"]["plugin"] == "range-assignor"
    assert {"simple", "uniform"} <= set(data["assignors"]) and {"memory", "topic"} == set(data["persisters"])
    assert data["failures"] == []
    table = CliRunner().invoke(root, ["plugins"], terminal_width=200)
    assert table.exit_code == 0
    assert "range-assignor" in table.output and "kshare-assignor-example" in table.output


def test_cli_exits_1_and_shows_failures(monkeypatch, fake_dists):
    from kshare_sidecar import plugins as plugin_mod
    from kshare_sidecar.cli import plugins as cli_plugins

    fake_dists("kshare-broken", "broken", "raise ImportError('no such thing')")
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(plugin_mod, "host", PluginHost())
    root = typer.Typer()
    root.add_typer(cli_plugins.app, name="plugins")

    @root.command()
    def version() -> None:
        pass

    result = CliRunner().invoke(root, ["plugins"], terminal_width=200)
    assert result.exit_code == 1
    assert "failed plugins" in result.output and "ImportError: no such thing" in result.output
