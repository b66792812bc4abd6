"""Data flows one way, ``wire → api → service → group/share → log/persist``: nothing below api/
(auth/, which api/ calls, included) imports wire/, api/ or the start-up wiring (kshare_sidecar/app.py),
not even inside a function (docs/architecture.md, "Layout and data flow")."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
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


def _upward() -> list[str]:
    upward = []
    for package in BELOW_API:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            for name in _imported(path):
                parts = name.split(".")
                if len(parts) > 1 and parts[1] in UPPER:
                    upward.append(f"{path.relative_to(PACKAGE)} imports {name}")
    return upward


@functools.cache
def _analysis() -> dict:
    """Every check of this module, computed in a fresh interpreter: after some earlier tests of a
    full run, CPython 3.11.7's ``ast.parse`` raised ``SystemError: AST constructor recursion depth
    mismatch`` on a plain module (a bug in CPython's recursion bookkeeping, not in the parsed code);
    a new process has clean bookkeeping."""
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_nothing_below_api_imports_api_wire_or_the_wiring():
    assert _analysis()["upward"] == []


def test_the_layer_check_sees_relative_imports():
    """The check itself: app.py's own imports of api/ and wire/ are found."""
    names = set(_analysis()["app"])
    assert "kshare_sidecar.api" in names and "kshare_sidecar.wire.server" in names
    assert "kshare_sidecar.service.shares" in names


def _module_name(path: Path) -> str:
    parts = ["kshare_sidecar", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(path: Path, modules: set[str]) -> set[str]:
    """kshare_sidecar modules ``path`` imports outside functions (TYPE_CHECKING blocks included: a
    circle of annotations is still a circle to a reader); ``from pkg import sub`` names ``sub``."""
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names if a.name in modules)
            elif isinstance(child, ast.ImportFrom):
                base = package[: len(package) - child.level + 1] if child.level else []
                module = ".".join([*base, *(child.module or "").split(".")]).strip(".")
                for alias in child.names:
                    target = f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                    if target in modules:
                        out.add(target)
            visit(child)

    visit(ast.parse(path.read_text()))
    out.discard(name)
    return out


def _circles() -> list[list[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: _module_level_imports(p, set(paths)) for m, p in paths.items()}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    circles: list[list[str]] = []

    def walk(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                circles.append(path[path.index(n):] + [n])
            elif n not in state:
                walk(n, [*path, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            walk(m, [m])
    return circles


def test_no_import_circles():
    """No two modules import each other, directly or round a loop (issue 20: share/acks.py and
    share/partition.py did). Imports inside functions are allowed to break a loop at import time."""
    assert _analysis()["circles"] == []


if __name__ == "__main__":
    print(json.dumps({"upward": _upward(), "app": sorted(_imported(PACKAGE / "app.py")), "circles": _circles()}))
