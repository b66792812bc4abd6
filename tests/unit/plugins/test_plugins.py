"""The plugin system: built-ins, entry points, allowlist/disable, failures reported by name."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from kshare_sidecar import hookspecs
from kshare_sidecar.assignors import AssignmentSpec, GroupAssignment, SimpleAssignor, UniformAssignor
from kshare_sidecar.hookspecs import hookimpl
from kshare_sidecar.persist import MemoryPersister
from kshare_sidecar.plugins import DEFAULT_PLUGINS, PluginHost, UnknownPluginObjectError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "plugins" / "hooks.md"

GOOD_PLUGIN = """
from kshare_sidecar.hookspecs import hookimpl

class Reverse:
    name = "reverse"
    def assign(self, spec):
        raise NotImplementedError

@hookimpl
def register_assignors(register):
    register("reverse", Reverse, description="test plugin")
"""


def _spec_names():
    return sorted(name for name in dir(hookspecs) if name.startswith("register_"))


# ----------------------------------------------------------------- meta: docs and tests per hook
@pytest.mark.parametrize("hook_name", _spec_names())
def test_every_hook_is_documented_with_its_signature(hook_name):
    h = PluginHost()
    caller = getattr(h.pm.hook, hook_name)
    signature = f"{hook_name}({', '.join(caller.spec.argnames)})"
    assert re.search(rf"^#+ +`?{re.escape(signature)}`?\s*$", DOCS.read_text(), re.M), \
        f"docs/plugins/hooks.md needs a heading '{signature}'"


@pytest.mark.parametrize("hook_name", _spec_names())
def test_every_hook_has_a_test(hook_name):
    assert f"test_hook_{hook_name}" in globals(), f"write test_hook_{hook_name}"


def test_hookspecs_match_the_plugin_manager():
    h = PluginHost()
    assert sorted(n for n in dir(h.pm.hook) if not n.startswith("_")) == _spec_names()


# ------------------------------------------------------------------------------- the hooks
def test_hook_register_assignors(host):
    class Plugin:
        @hookimpl
        def register_assignors(self, register):
            register("noop", lambda: _Noop(), description="assigns nothing")

    host.load_plugins(entry_points=False)
    assert host.register_plugin(Plugin(), "noop-plugin")
    assignors = host.get_assignors()
    assert set(assignors) == {"simple", "uniform", "noop"}
    noop = host.get_assignor("noop")
    assert noop.assign(AssignmentSpec(members={}, topics={})).members == {}
    assert isinstance(host.get_assignor("simple"), SimpleAssignor)
    assert isinstance(host.get_assignor("uniform"), UniformAssignor)
    entry = next(p for p in host.get_plugins() if p["name"] == "noop-plugin")
    assert entry["hooks"] == ["register_assignors"] and entry["registers"] == {"assignors": ["noop"]}
    host.unregister_plugin("noop-plugin")
    assert "noop" not in host.get_assignors()


class _Noop:
    name = "noop"

    def assign(self, spec):
        return GroupAssignment({m: {} for m in spec.members})


async def test_hook_register_persisters(host):
    made = []

    class Plugin:
        @hookimpl
        def register_persisters(self, register):
            def factory(**options):
                made.append(options)
                return MemoryPersister(**options)
            register("scratch", factory)

    host.load_plugins(entry_points=False)
    host.register_plugin(Plugin(), "scratch-plugin")
    assert set(host.get_persisters()) == {"memory", "topic", "scratch"}
    p = host.get_persister("scratch", partitions=2)
    assert made == [{"partitions": 2}] and p.partitions == 2
    await p.start()
    assert p.ready
    await p.close()
    mem = host.get_persister("memory")
    assert isinstance(mem, MemoryPersister)


async def test_hook_register_authenticators(host, tmp_path):
    from kshare_sidecar.auth.authenticators import StaticAuthenticator
    from kshare_sidecar.config import load_config

    class AllowAlice:
        mechanisms = frozenset({"PLAIN"})

        async def verify_plain(self, username, password):
            return (username, password) == ("alice", "pw")

        async def scram_credential(self, mechanism, username):
            return None

        async def close(self):
            pass

    made = []

    class Plugin:
        @hookimpl
        def register_authenticators(self, register):
            def factory(**options):
                made.append(sorted(options))
                return AllowAlice()
            register("alice-only", factory)

    host.load_plugins(entry_points=False)
    host.register_plugin(Plugin(), "alice-plugin")
    assert set(host.get_authenticators()) == {"static", "delegate", "alice-only"}
    auth = host.get_authenticator("alice-only", config=None, backend_security=None)
    assert made == [["backend_security", "config"]]
    assert await auth.verify_plain("alice", "pw") and not await auth.verify_plain("alice", "nope")
    users = tmp_path / "users"
    users.write_text("alice:pw\n")
    cfg = load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092", "sasl.credentials.file": str(users)})
    static = host.get_authenticator("static", config=cfg, backend_security=None)
    assert isinstance(static, StaticAuthenticator) and await static.verify_plain("alice", "pw")


# ------------------------------------------------------------------------------- behaviour
def test_builtins_register_through_the_hooks(host):
    host.load_plugins(entry_points=False)
    builtins = [p for p in host.get_plugins() if p["builtin"]]
    assert [p["name"] for p in builtins] == list(DEFAULT_PLUGINS)
    assert all(p["version"] and p["distribution"] == "kshare-sidecar" for p in builtins)


def test_unknown_names_list_the_allowed_values(host):
    host.load_plugins(entry_points=False)
    with pytest.raises(UnknownPluginObjectError) as exc:
        host.get_assignor("sticky")
    assert str(exc.value) == "unknown assignor 'sticky'; allowed values: simple, uniform"
    with pytest.raises(UnknownPluginObjectError, match="allowed values: memory, topic"):
        host.get_persister("redis")


def test_load_plugins_is_idempotent(host, fake_dists):
    fake_dists("kshare-good", "good", GOOD_PLUGIN)
    host.load_plugins()
    host.load_plugins()
    names = [p["name"] for p in host.get_plugins()]
    assert names.count("good") == 1
    good = next(p for p in host.get_plugins() if p["name"] == "good")
    assert (good["distribution"], good["version"], good["registers"]) == ("kshare-good", "1.2.3",
                                                                           {"assignors": ["reverse"]})


def test_a_broken_plugin_is_reported_by_name_and_others_load(host, fake_dists, caplog):
    fake_dists("kshare-good", "good", GOOD_PLUGIN)
    fake_dists("kshare-broken", "broken", "raise RuntimeError('boom at import')")
    fake_dists("kshare-exits", "exits", "import sys; sys.exit(3)")
    with caplog.at_level(logging.ERROR, logger="kshare_sidecar.plugins"):
        host.load_plugins()
    failures = {f.name: f for f in host.get_failures()}
    assert set(failures) == {"broken", "exits"}
    assert failures["broken"].error == "RuntimeError: boom at import"
    assert failures["broken"].stage == "load" and failures["broken"].distribution == "kshare-broken"
    assert "'broken' failed" in caplog.text
    assert "reverse" in host.get_assignors()


def test_a_raising_hook_and_a_misspelled_hook_are_reported(host, fake_dists):
    fake_dists("kshare-raises", "raises", """
        from kshare_sidecar.hookspecs import hookimpl
        @hookimpl
        def register_assignors(register):
            register("half", object)
            raise ValueError("bad config")
    """)
    fake_dists("kshare-typo", "typo", """
        from kshare_sidecar.hookspecs import hookimpl
        @hookimpl
        def register_assignor(register):
            pass
    """)
    fake_dists("kshare-dup", "dup", """
        from kshare_sidecar.hookspecs import hookimpl
        @hookimpl
        def register_assignors(register):
            register("simple", object)
    """)
    host.load_plugins()
    assert set(host.get_assignors()) >= {"simple", "uniform"}
    failures = {f.name: f for f in host.get_failures()}
    assert failures["raises"].stage == "hook:register_assignors"
    assert "ValueError: bad config" in failures["raises"].error
    assert failures["typo"].stage == "validate" and "register_assignor" in failures["typo"].error
    assert "already registered by 'kshare_sidecar.default_plugins.assignors'" in failures["dup"].error
    assert not any(p["name"] == "typo" for p in host.get_plugins())
    assert host.get_assignors()["simple"] is SimpleAssignor


def test_allowlist_by_argument_and_setting(fake_dists):
    fake_dists("kshare-good", "good", GOOD_PLUGIN)
    fake_dists("kshare-broken", "broken", "raise RuntimeError('boom')")
    h = PluginHost()
    h.load_plugins(load=["kshare-good"])  # by distribution name
    assert "reverse" in h.get_assignors() and h.get_failures() == []
    h = PluginHost()
    h.load_plugins(load=[])  # no outside plugin at all; built-ins stay
    assert set(h.get_assignors()) == {"simple", "uniform"} and h.get_failures() == []
    h = PluginHost()
    h.load_plugins(load=["good"])  # by entry-point name
    assert "reverse" in h.get_assignors() and h.get_failures() == []


def test_one_switch_the_plugin_settings(fake_dists, monkeypatch):
    """plugins.load / plugins.disable / plugins.trace are the one switch: empty load = all installed,
    the same from the environment (KSHARE_PLUGINS_*) as from a file; no other variable counts."""
    from kshare_sidecar import plugins as plugin_mod
    from kshare_sidecar.config import load_config

    fake_dists("kshare-good", "good", GOOD_PLUGIN)
    fake_dists("kshare-other", "other", GOOD_PLUGIN.replace("reverse", "other"))
    for stale in ("KSHARE_LOAD_PLUGINS", "KSHARE_DISABLE_PLUGINS"):  # the old variables mean nothing
        monkeypatch.setenv(stale, "")
    seen = {}
    for env in ({}, {"KSHARE_PLUGINS_LOAD": "good"}, {"KSHARE_PLUGINS_DISABLE": "kshare-good"}):
        h = PluginHost()
        monkeypatch.setattr(plugin_mod, "host", h)
        plugin_mod.load_configured(load_config(env={"KSHARE_BOOTSTRAP_SERVERS": "localhost:9092", **env}).plugins)
        seen[tuple(env.values())] = {"reverse", "other"} & set(h.get_assignors())
    assert seen == {(): {"reverse", "other"}, ("good",): {"reverse"}, ("kshare-good",): {"other"}}


def test_disable_by_argument(fake_dists):
    fake_dists("kshare-good", "good", GOOD_PLUGIN)
    h = PluginHost()
    h.load_plugins(disable=["good", "kshare_sidecar.default_plugins.persisters"])
    assert "reverse" not in h.get_assignors() and h.get_persisters() == {}
    h = PluginHost()
    h.load_plugins(disable=["kshare-good"])  # by distribution name
    assert "reverse" not in h.get_assignors() and "simple" in h.get_assignors()


def test_trace_logs_hook_calls(caplog):
    h = PluginHost()
    with caplog.at_level(logging.INFO, logger="kshare_sidecar.plugins"):
        h.load_plugins(entry_points=False, trace=True)
        h.get_assignors()
    assert "registered assignor 'simple'" in caplog.text
    assert "hook call register_assignors" in caplog.text
