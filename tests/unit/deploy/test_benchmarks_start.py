"""Every benchmark script starts: imports resolve and its options parse (``--help``). A benchmark is
run by hand, rarely: one had stopped importing after a helper it shared changed (the other broken by
the same change failed only at run time, which this does not catch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
#: the scripts a person runs (a load-generator child process such as scale_load.py has no options)
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py")
                 if "__main__" in (text := p.read_text()) and ("base_parser(" in text or "argparse" in text))
#: optional extras a benchmark may need; without them it cannot start here, and says so
OPTIONAL = ("pyspark", "pyarrow", "matplotlib")


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_the_benchmark_starts(script: Path) -> None:
    run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                         cwd=BENCHMARKS.parent)
    missing = [m for m in OPTIONAL if f"No module named '{m}" in run.stderr]
    if run.returncode and missing:
        pytest.skip(f"needs the optional {missing[0]}")
    assert run.returncode == 0, run.stderr[-2000:]
