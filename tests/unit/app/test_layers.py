"""The import rules of docs/architecture.md ("Layout and data flow"), checked on every import a
reader meets: at module level, inside functions and under ``TYPE_CHECKING``.

- The rooms of the package stand in layers (``LAYERS``, top first): a room imports only rooms of
  lower layers (and its own modules). An import that runs up or sideways is against the order.
- No modules import each other, directly or round a loop, at any level: an import inside a
  function only hides a circle from the interpreter, not from a reader.
- The share engine (``share/engine/``) is pure: it imports no event loop, clock, socket or backend
  client, and of kshare_sidecar only itself and the plain data it shares with the persister.
- A package's face (its ``__init__``) does not drag in more than the module asked for: importing the
  pure ``share.engine`` does not load a persister, and ``share/`` reading ``client.records`` does not
  load the whole ShareConsumer.

The analysis runs in a fresh interpreter and prints its counts: ``python tests/unit/app/test_layers.py``.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kshare_sidecar

PACKAGE = Path(kshare_sidecar.__file__).parent

#: The rooms of kshare_sidecar from the top layer down; a room is a package (a folder) or a
#: top-level module. Rooms in one tuple stand side by side and do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("demo",),
    ("testing",),
    ("app",),
    ("console", "migrate"),
    ("passthrough",),
    ("api",),
    ("wire",),
    ("faust", "spark"),
    ("group",),
    ("share",),
    ("cluster",),
    ("share.engine",),
    ("default_plugins",),
    ("plugins",),
    ("hookspecs",),
    ("persist",),
    ("assignors",),
    ("client",),
    ("quota",),
    ("auth",),
    ("dlq",),
    ("backend",),
    ("config",),
    ("metrics",),
    ("ratelog", "states", "timeutil", "capacity"),
    ("protocol",),
)

#: Rooms that are a folder inside a room: its modules stand in their own layer (the pure engine
#: under the share-partition services around it).
SUB_ROOMS = ("share.engine",)

#: A face and the modules a fresh interpreter must not hold after importing it.
LIGHT_FACES: dict[str, tuple[str, ...]] = {
    "kshare_sidecar.share.engine": ("kshare_sidecar.persist.base", "kshare_sidecar.persist.memory"),
    "kshare_sidecar.share.key_order": ("kshare_sidecar.client.consumer",),
    "kshare_sidecar.share.dead_letter": ("kshare_sidecar.client.consumer",),
}


def _module_name(path: Path) -> str:
    parts = ["kshare_sidecar", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    parts = module.split(".")
    if ".".join(parts[1:3]) in SUB_ROOMS:
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else "__init__"


def imports(source: str, name: str, is_package: bool, modules: set[str]) -> list[tuple[str, int, str]]:
    """(imported kshare_sidecar module, line, where) for every import of ``source``: ``where`` is
    "module", "function" (inside a def or lambda) or "type_checking" (under ``if TYPE_CHECKING``).
    ``from pkg import sub`` names ``pkg.sub`` when that is a module; relative imports resolved."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    out: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                here = "function"
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and where == "module":
                for part in child.body:
                    visit(ast.Module(body=[part], type_ignores=[]), "type_checking")
                for part in child.orelse:
                    visit(ast.Module(body=[part], type_ignores=[]), where)
                continue
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, here) for a in child.names if a.name.startswith("kshare_sidecar"))
            elif isinstance(child, ast.ImportFrom):
                base = package[: len(package) - child.level + 1] if child.level else []
                module = ".".join([*base, *(child.module or "").split(".")]).strip(".")
                if module.startswith("kshare_sidecar"):
                    for alias in child.names:
                        target = f"{module}.{alias.name}"
                        out.append((target if target in modules else module, child.lineno, here))
            visit(child, here)

    visit(ast.parse(source), "module")
    return out


def _graph() -> dict[str, list[tuple[str, int, str]]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {m: sorted({(t, line, where) for t, line, where in imports(p.read_text(), m, p.name == "__init__.py",
                                                                     modules) if t != m})
            for m, p in paths.items()}


def _against_the_order(graph: dict[str, list[tuple[str, int, str]]]) -> list[str]:
    tier = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
    out = []
    for m, edges in sorted(graph.items()):
        src = _room(m)
        for target, line, where in edges:
            dst = _room(target)
            if dst == src or "__init__" in (src, dst):  # kshare_sidecar/__init__.py, the face: the
                continue  # version and hookimpl, read by plugins and clients alike
            if src not in tier or dst not in tier:
                out.append(f"{m}:{line} imports {target} ({where}): room {src if src not in tier else dst} "
                           f"is in no layer")
            elif tier[dst] <= tier[src]:
                out.append(f"{m}:{line} imports {target} ({where}): {src} is not above {dst}")
    return out


def _circles(graph: dict[str, list[tuple[str, int, str]]]) -> list[list[str]]:
    edges = {m: sorted({t for t, _, _ in e if t in graph}) for m, e in graph.items()}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    circles: list[list[str]] = []

    def walk(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in edges[m]:
            if state.get(n) == 1:
                circles.append(path[path.index(n):] + [n])
            elif n not in state:
                walk(n, [*path, n])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            walk(m, [m])
    return circles


def _heavy_faces() -> list[str]:
    out = []
    for face, forbidden in LIGHT_FACES.items():
        code = f"import sys, {face}; print([m for m in {list(forbidden)!r} if m in sys.modules])"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        out.extend(f"importing {face} loads {m}" for m in json.loads(done.stdout.replace("'", '"')))
    return out


def analysis() -> dict:
    graph = _graph()
    kinds = [where for edges in graph.values() for _, _, where in edges]
    return {"against": _against_the_order(graph), "circles": _circles(graph), "heavy_faces": _heavy_faces(),
            "imports": {k: kinds.count(k) for k in ("module", "function", "type_checking")},
            "app": sorted({t for t, _, _ in graph["kshare_sidecar.app"]})}


@functools.cache
def _analysis() -> dict:
    """Computed in a fresh interpreter: after some earlier tests of a full run, CPython 3.11.7's
    ``ast.parse`` raised ``SystemError: AST constructor recursion depth mismatch`` on a plain
    module (a bug in CPython's recursion bookkeeping, not in the parsed code); a new process has
    clean bookkeeping."""
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _report(kind: str) -> str:
    found = _analysis()[kind]
    counted = _analysis()["imports"]
    lines = [" -> ".join(c) if isinstance(c, list) else c for c in found]
    return (f"{len(found)} {kind} (imports read: {counted['module']} at module level, {counted['function']} "
            f"inside functions, {counted['type_checking']} under TYPE_CHECKING):\n  " + "\n  ".join(lines))


def test_no_import_runs_against_the_layer_order():
    assert _analysis()["against"] == [], _report("against")


def test_no_import_circles():
    assert _analysis()["circles"] == [], _report("circles")


def test_package_faces_load_only_what_is_asked_for():
    assert _analysis()["heavy_faces"] == [], _report("heavy_faces")


#: What the pure engine may import of kshare_sidecar besides itself (plain data and error codes).
ENGINE_MAY_IMPORT = ("kshare_sidecar.states", "kshare_sidecar.persist.model", "kshare_sidecar.protocol.errors",
                     "kshare_sidecar.protocol.types")
#: Libraries that do I/O or read a clock: the engine is handed the time and never waits.
IMPURE = {"asyncio", "time", "socket", "selectors", "threading", "aiokafka", "kio.static", "logging"}


def test_the_engine_is_pure():
    found = []
    for path in sorted((PACKAGE / "share" / "engine").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if isinstance(node, ast.ImportFrom) and node.level:
                names = ["kshare_sidecar." + ".".join(
                    ["share", "engine"][: 3 - node.level] + ([node.module] if node.module else []))]
            for name in names:
                own = name.startswith("kshare_sidecar.share.engine") or name.startswith(ENGINE_MAY_IMPORT)
                if (name.startswith("kshare_sidecar") and not own) or any(
                        name == bad or name.startswith(bad + ".") for bad in IMPURE):
                    found.append(f"{path.name}:{node.lineno} imports {name}")
    assert found == []


def test_every_room_stands_in_a_layer():
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    rooms |= {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    rooms |= {r for r in SUB_ROOMS if (PACKAGE / r.replace(".", "/") / "__init__.py").exists()}
    assert sorted(rooms - {r for rooms in LAYERS for r in rooms}) == []


def test_the_check_reads_every_kind_of_import():
    """The check itself: relative imports resolved; imports inside functions and under
    TYPE_CHECKING are read and told apart; app.py's own imports of api/ and wire/ are found."""
    source = textwrap.dedent("""
        from typing import TYPE_CHECKING
        from ..wire import server
        if TYPE_CHECKING:
            from ..api.context import RequestContext
        def f():
            from kshare_sidecar.share.engine import partition
    """)
    modules = {"kshare_sidecar.wire.server", "kshare_sidecar.share.engine.partition"}
    found = imports(source, "kshare_sidecar.share.x", False, modules)
    assert found == [("kshare_sidecar.wire.server", 3, "module"),
                     ("kshare_sidecar.api.context", 5, "type_checking"),
                     ("kshare_sidecar.share.engine.partition", 7, "function")]
    names = set(_analysis()["app"])
    assert "kshare_sidecar.api" in names and "kshare_sidecar.wire.server" in names
    assert _analysis()["imports"]["function"] > 0 and _analysis()["imports"]["type_checking"] > 0


def test_the_order_check_sees_an_upward_import():
    graph = {"kshare_sidecar.share.engine.partition": [("kshare_sidecar.api.context", 1, "function")]}
    assert _against_the_order(graph) == ["kshare_sidecar.share.engine.partition:1 imports kshare_sidecar.api.context "
                                         "(function): share.engine is not above api"]
    assert _circles({"a": [("b", 1, "function")], "b": [("a", 2, "type_checking")]}) == [["a", "b", "a"]]


if __name__ == "__main__":
    print(json.dumps(analysis()))
