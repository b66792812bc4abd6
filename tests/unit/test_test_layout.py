"""Test modules are collected by basename (rootdir-relative imports, no packages): two modules with
the same file name in different folders break collection of the whole suite from a clean clone
(it happened twice: test_fencing.py, test_group_assignor.py)."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts
                    and not (p.parent / "__init__.py").exists())
    assert [n for n, c in names.items() if c > 1] == []


#: Folders of tests/unit that are not a kshare_sidecar package or module, and why.
NOT_MIRRORED = {
    "deploy": "the repository's deployment artefacts (compose/, Dockerfile, docs/, the CLI reference)",
    "faust_driver": "tests of kshare_sidecar/faust; a folder named faust would shadow the faust library",
}


def test_unit_test_folders_mirror_the_package():
    """tests/unit/<name>/ tests kshare_sidecar/<name>/ (a package) or kshare_sidecar/<name>*.py (a
    top-level module, e.g. config for config.py, config_sections.py, config_settings.py)."""
    package = TESTS.parent / "kshare_sidecar"
    names = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.stem.split("_")[0] for p in package.glob("*.py")}
    folders = {p.name for p in (TESTS / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert sorted(folders - names - set(NOT_MIRRORED)) == []
