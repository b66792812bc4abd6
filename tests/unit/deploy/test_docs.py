"""docs/configuration.md lists every setting (and is what the generator writes); docs name real settings."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib

import pytest

from kshare_sidecar.config import doc as configdoc
from kshare_sidecar.config import BY_KEY, GROUP_CONFIGS, SETTINGS, env_name, load_config

from .cli_model import check_argv
from .conftest import COMPOSE_DIR, REPO

CONFIG_DOC = REPO / "docs" / "configuration.md"
DEPLOY_DOC = REPO / "docs" / "deployment.md"
ENV_NAMES = {env_name(k) for k in BY_KEY}
#: KSHARE_* names the docs may use that are not settings: the sidecar image's name, a variable of the
#: compose files and of KShareContainer (kshare_sidecar/testing/containers.py), never read by the sidecar
NOT_SETTINGS = {"KSHARE_IMAGE"}


def _table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 6:
            rows[cells[0].strip("`")] = cells
    return rows


def test_configuration_table_lists_every_setting():
    rows = _table_rows(CONFIG_DOC.read_text())
    for s in SETTINGS:
        assert s.key in rows, f"docs/configuration.md does not list {s.key}"
        key, env, kind, default, allowed, meaning = rows[s.key][:6]
        assert env == f"`{env_name(s.key)}`"
        assert kind == s.kind.__name__
        shown = str(s.default).lower() if isinstance(s.default, bool) else str(s.default)
        assert shown in default or (s.default == "" and "empty" in default)
        if s.low is not None:
            assert str(s.low) in allowed and str(s.high) in allowed
        assert meaning
    stale = set(rows) - set(BY_KEY)
    assert not stale, f"docs/configuration.md lists settings that do not exist: {sorted(stale)}"


def test_configuration_doc_is_what_the_generator_writes():
    text = CONFIG_DOC.read_text()
    assert configdoc.splice(text) == text, "stale: run python -m kshare_sidecar.config.doc --write docs/configuration.md"
    result = subprocess.run([sys.executable, "-m", "kshare_sidecar.config.doc", "--check", str(CONFIG_DOC)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_generator_writes_into_its_markers_only(tmp_path):
    doc = tmp_path / "c.md"
    doc.write_text("# Title\n\nprose before\n")
    assert configdoc.main(["--check", str(doc)]) == 1
    assert configdoc.main(["--write", str(doc)]) == 0
    once = doc.read_text()
    assert once.startswith("# Title\n\nprose before\n") and configdoc.BEGIN in once
    doc.write_text(once + "\nprose after\n")
    assert configdoc.main(["--write", str(doc)]) == 0
    assert doc.read_text().endswith("prose after\n") and doc.read_text().count(configdoc.BEGIN) == 1
    assert configdoc.main(["--check", str(doc)]) == 0


def test_group_configs_are_documented():
    text = CONFIG_DOC.read_text()
    for key in GROUP_CONFIGS:
        assert f"`{key}`" in text


@pytest.mark.parametrize("path", [CONFIG_DOC, DEPLOY_DOC, COMPOSE_DIR / "README.md"], ids=lambda p: p.name)
def test_docs_name_only_real_env_vars_and_commands(path):
    text = path.read_text()
    for name in set(re.findall(r"\bKSHARE_[A-Z0-9_]*[A-Z0-9]\b", text)):
        assert name in ENV_NAMES | NOT_SETTINGS, f"{path.name} mentions {name}, which is not a setting"
    for argv in kshare_invocations(text):
        assert check_argv(argv) == [], f"{path.name}: kshare {' '.join(argv)}"


def kshare_invocations(text: str) -> list[list[str]]:
    """``kshare ...`` in shell code blocks and inline code, and the arguments after the image name in
    ``docker run ... kshare-sidecar:TAG ARGS``."""
    snippets = []
    for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", text, re.S):
        snippets += block.replace("\\\n", " ").splitlines()
    snippets += re.findall(r"`([^`\n]+)`", text)
    found = []
    for snippet in snippets:
        try:
            words = shlex.split(snippet, comments=True)
        except ValueError:
            continue
        if words[:1] == ["kshare"] and len(words) > 1:  # a bare `kshare` is the user or the program name
            found.append(words[1:])
        elif words[:2] == ["docker", "run"]:
            image = next((i for i, w in enumerate(words) if w.startswith("kshare-sidecar:")), None)
            if image is not None and words[image + 1:]:  # no arguments: the image's CMD, checked elsewhere
                found.append(words[image + 1:])
    return found


def test_doc_invocations_are_found():
    sample = "run `kshare sidecar run --listen 0.0.0.0:9192`\n```bash\nkshare demo \\\n  --records 5  # try\n" \
             "docker run --rm -p 9192:9192 kshare-sidecar:dev plugins\n```\n"
    assert kshare_invocations(sample) == [["demo", "--records", "5"], ["plugins"],
                                          ["sidecar", "run", "--listen", "0.0.0.0:9192"]]


def test_toml_examples_load(tmp_path):
    blocks = re.findall(r"```toml\n(.*?)```", CONFIG_DOC.read_text(), re.S)
    assert blocks, f"{CONFIG_DOC.name} shows no TOML example: nothing to check"
    for block in blocks:
        tomllib.loads(block)
        path = tmp_path / "kshare.toml"
        path.write_text(block)
        cfg = load_config(path, env={})
        assert cfg["bootstrap.servers"]


# --- code named in the docs exists (docs/architecture.md re-read against the code) -------------

PACKAGE = REPO / "kshare_sidecar"
#: Documents whose code paths are checked: every one (the README links them).
CODE_DOCS = sorted(p.name for p in (REPO / "docs").glob("*.md"))
_PATH = re.compile(r"`((?:kshare_sidecar|tests|benchmarks|plugins|compose)/[\w./*-]+|[a-z_]+/[\w/*-]+\.py)`")


def _repo_path_exists(name: str) -> bool:
    """A path as docs write it: from the repository root, or relative to kshare_sidecar/."""
    name = name.rstrip("/")
    for base in (REPO, PACKAGE):
        if "*" in name:
            if any(base.glob(name)):
                return True
        elif (base / name).exists():
            return True
    return False


@pytest.mark.parametrize("doc", CODE_DOCS)
def test_paths_named_in_the_docs_exist(doc):
    text = (REPO / "docs" / doc).read_text()
    missing = sorted({m for m in _PATH.findall(text) if not _repo_path_exists(m)})
    assert missing == [], f"docs/{doc} names paths that do not exist: {missing}"


def _layout_block() -> str:
    text = (REPO / "docs" / "architecture.md").read_text()
    start = text.index("```\nkshare_sidecar/\n")
    return text[start + 4:text.index("```", start + 4)]


def test_architecture_layout_names_real_modules():
    """Every top-level entry of the layout exists, and every `module.Class` it names is defined in
    a module of that name (in the entry's package first)."""
    missing = []
    package = PACKAGE
    for line in _layout_block().splitlines()[1:]:
        entry = re.match(r"  (\S.*?)\s{2,}", line)  # "  share/  ..." or "  hookspecs.py, plugins.py, ...  ..."
        if entry:
            names = re.findall(r"[\w.]+(?:/[\w.]+)*/?", entry.group(1))  # share/engine/: a folder in a room
            missing += [f"kshare_sidecar/{n}" for n in names if not (PACKAGE / n.rstrip("/")).exists()]
            package = PACKAGE / names[0].rstrip("/")
        elif re.match(r"\S", line):  # plugins/, tests/, ... at the repository root
            name = line.split()[0]
            if not (REPO / name).exists():
                missing.append(name)
            package = REPO / name
        for module, cls in re.findall(r"\b([a-z_]+)\.([A-Z]\w+)", line):
            candidates = [package / f"{module}.py", package / module / "__init__.py",
                          *PACKAGE.rglob(f"{module}.py"), *PACKAGE.rglob(f"{module}/__init__.py")]
            # an indented import counts: a package face that loads a class on first use imports
            # it under TYPE_CHECKING (client.ShareConsumer, persist.MemoryPersister)
            defined = re.compile(rf"^(class {cls}\b|{cls}\b.*=|\s*from .* import .*\b{cls}\b)", re.M)
            if not any(c.is_file() and defined.search(c.read_text()) for c in candidates):
                missing.append(f"{module}.{cls}")
    assert missing == [], f"docs/architecture.md's layout names what does not exist: {missing}"
