"""docs/compatibility.md's backend table is the committed matrix result, rendered
(kshare_sidecar/testing/matrix.py); and the renderer's cells say what ran."""

from __future__ import annotations

import json

import pytest

from kshare_sidecar.testing.matrix import DOC, END, RESULTS, START, cell_of, main, render, update


def test_the_doc_matches_the_committed_matrix_result():
    """Re-render with `python -m kshare_sidecar.testing.matrix` after `make test-backends`."""
    assert RESULTS.exists(), f"{RESULTS} is missing: run make test-backends"
    assert main(["--check"]) == 0


def test_every_row_of_the_committed_result_ran_every_cell_or_was_refused():
    results = json.loads(RESULTS.read_text())["backends"]
    assert {"2.8.2", "3.5.2", "3.7.2", "3.9.2", "4.0.1", "4.1.1", "4.4.0", "2.4.1"} <= set(results)
    for version, entry in results.items():
        cells = entry.get("cells", {})
        assert cells, version
        if version == "2.4.1":
            assert cells["refused"]["outcome"] == "passed" and entry["line"].startswith("backend Kafka 2.4")


def _results(**cells: str) -> dict:
    return {"backends": {"3.9.2": {"profile": {"metadata": "kraft", "release": "Kafka 3.9",
                                               "differences": ["no KIP-848 consumer groups (group.protocol=consumer)"]},
                                   "cells": {c: {"outcome": o, "seconds": 1.0, "note": "boom" if o == "failed" else "",
                                                 "run": "2026-11-29 05:00 UTC", "load": "1.00 1.00 1.00"}
                                             for c, o in cells.items()}}}}


def test_a_row_sums_up_its_cells_and_lists_failures():
    text = render(_results(share_drain="passed", share_lock_expiry="passed", mode_fenced="passed",
                           mode_transactional="failed", beside_native="skipped"))
    row = next(line for line in text.splitlines() if line.startswith("| Kafka 3.9.2"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[:4] == ["Kafka 3.9.2", "KRaft", "Kafka 3.9", "2/2 pass"]
    assert cols[4] == "pass" and cols[5] == "—" and cols[6] == "**FAIL**"
    assert cols[-2] == "—"  # skipped: the backend has no share groups to be beside
    assert cols[-1] == "no KIP-848 consumer groups (group.protocol=consumer)"
    assert "- Kafka 3.9.2, mode_transactional: boom" in text
    assert "From `make test-backends` of 2026-11-29 05:00 UTC (load 1.00 1.00 1.00)." in text


def test_update_replaces_only_the_block():
    doc = f"before\n{START}\nold table\n{END}\nafter\n"
    new = update(doc, _results(mode_fenced="passed"))
    assert new.startswith(f"before\n{START}\n| backend |") and new.endswith(f"{END}\nafter\n")
    assert "old table" not in new
    with pytest.raises(ValueError, match="no"):
        update("no markers", {})


def test_cells_are_the_matrix_tests():
    assert cell_of("test_share_drain") == "share_drain"
    assert cell_of("test_mode_fenced") == "mode_fenced"
    assert cell_of("test_something_else") is None
    assert START in DOC.read_text() and END in DOC.read_text()
