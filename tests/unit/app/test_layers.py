"""Data flows one way, ``wire → api → service → group/share → log/persist``: nothing below api/
(auth/, which api/ calls, included) imports wire/, api/ or the start-up wiring (kshare_sidecar/app.py),
not even inside a function (docs/architecture.md, "Layout and data flow")."""

from __future__ import annotations

import ast
from pathlib import Path

import kshare_sidecar

PACKAGE = Path(kshare_sidecar.__file__).parent
BELOW_API = ("service", "group", "share", "log", "persist", "cluster", "assignors", "auth")
UPPER = ("api", "wire", "app")


def _imported(path: Path) -> set[str]:
    """Absolute names of the kshare_sidecar modules ``path`` imports (relative imports resolved)."""
    package = ["kshare_sidecar", *path.relative_to(PACKAGE).parent.parts]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            out.add(module)
            out |= {f"{module}.{alias.name}" for alias in node.names}
    return {name for name in out if name.startswith("kshare_sidecar")}


def test_nothing_below_api_imports_api_wire_or_the_wiring():
    upward = []
    for package in BELOW_API:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            for name in _imported(path):
                parts = name.split(".")
                if len(parts) > 1 and parts[1] in UPPER:
                    upward.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert upward == []


def test_the_layer_check_sees_relative_imports():
    """The check itself: app.py's own imports of api/ and wire/ are found."""
    names = _imported(PACKAGE / "app.py")
    assert "kshare_sidecar.api" in names and "kshare_sidecar.wire.server" in names
    assert "kshare_sidecar.service.shares" in names
