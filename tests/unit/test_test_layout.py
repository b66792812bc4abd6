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
