from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from kshare_sidecar.plugins import PluginHost


@pytest.fixture
def host():
    """A fresh plugin host: tests never depend on what happens to be installed."""
    return PluginHost()


@pytest.fixture
def fake_dists(tmp_path, monkeypatch):
    """make(dist_name, entry_name, module_source) -> a distribution with a kshare_sidecar entry point."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    created: list[str] = []

    def make(dist: str, entry: str, source: str, version: str = "1.2.3") -> Path:
        module = dist.replace("-", "_")
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        info = site / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[kshare_sidecar]\n{entry} = {module}\n")
        created.append(module)
        importlib.invalidate_caches()
        return site

    yield make
    for module in created:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()
