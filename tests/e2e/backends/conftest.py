"""The backend matrix's fixtures and its result file (``make test-backends``; docs/compatibility.md).

One backend at a time: ``backend`` is module-scoped and parametrized over the releases, so pytest
runs every cell of one release before it starts the next (two JVMs at most: the broker and, for
2.8/3.5, its ZooKeeper). Each cell's outcome is recorded per release and written to
:data:`RESULTS` when the session ends — merged per release, so re-running one release replaces
its row only — and ``python -m kshare_sidecar.testing.matrix`` renders the table into
docs/compatibility.md from it.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
from collections.abc import Iterator

import pytest

from kshare_sidecar.backend.compat import BackendProfile, _ask, refusal
from kshare_sidecar.testing.kafka import BACKEND_VERSIONS, KafkaBroker
from kshare_sidecar.testing.matrix import RESULTS, cell_of
from tests.e2e.conftest import SidecarProcess

#: What one run found, per release: {"cells": {cell: {...}}, "profile": {...}}.
FOUND: dict[str, dict] = {}


def backend_profile(bootstrap: str) -> BackendProfile:
    from kshare_sidecar.backend.security import BackendSecurity

    return asyncio.run(_ask(bootstrap, BackendSecurity(), 30.0))


@pytest.fixture(scope="session")
def matrix_found() -> dict[str, dict]:
    """:data:`FOUND`, for tests that record more than their outcome (this conftest's own copy:
    pytest imports a conftest under its own name, so a test importing it would get another)."""
    return FOUND


@pytest.fixture(scope="module", params=BACKEND_VERSIONS)
def backend(request) -> Iterator[KafkaBroker]:
    """One release of the matrix, its default metadata mode (ZooKeeper for 2.8 and 3.5), share
    groups as the release ships them (off on 4.0 and 4.1)."""
    broker = KafkaBroker(request.param, heap="768m")
    try:
        broker.start()
    except Exception as exc:
        FOUND.setdefault(request.param, {}).setdefault("cells", {})["start"] = {"outcome": "failed",
                                                                                 "note": str(exc)[:300]}
        raise
    try:
        profile = backend_profile(broker.bootstrap)
        FOUND.setdefault(broker.version, {})["profile"] = {
            "metadata": broker.metadata, "release": profile.release, "mode": profile.mode,
            "differences": profile.differences(), "share_groups": broker.share_groups,
            "refusals": {mode: refusal(profile, mode, True) for mode in ("fenced", "idempotent", "transactional")}}
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def matrix_sidecar(backend, tmp_path_factory) -> Iterator[SidecarProcess]:
    """A sidecar in front of ``backend`` with the default state write mode (fenced)."""
    sc = SidecarProcess(backend.bootstrap, tmp_path_factory.mktemp(f"sidecar-{backend.version}") / "sidecar.log",
                        env={"KSHARE_STATE_TOPIC": "__kshare_state_matrix"}).start()
    yield sc
    sc.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A matrix cell's outcome: its call, or a setup that failed or skipped for a reason of its own
    (not the opt-in switch)."""
    report = (yield).get_result()
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec else {}
    cell = cell_of(item.originalname + (f"_{params['mode']}" if "mode" in params else ""))
    version = params.get("backend") or params.get("version") or getattr(item.function, "matrix_version", None)
    if cell is None or version is None or (report.when != "call" and report.passed):
        return
    if report.skipped and "opt-in suite" in str(report.longrepr):
        return
    note = ""
    if report.failed and report.longreprtext:  # the first "E   ..." line says what failed
        lines = report.longreprtext.strip().splitlines()
        note = next((line[1:].strip() for line in lines if line.startswith("E ")), lines[-1])[:300]
    state = "failed" if report.failed else "skipped" if report.skipped else "passed"
    FOUND.setdefault(version, {}).setdefault("cells", {})[cell] = {
        "outcome": state, "seconds": round(report.duration, 1), "note": note}


def pytest_sessionfinish(session) -> None:
    """Merge this run's cells into :data:`RESULTS`, cell by cell (each stamped with its run)."""
    ran = {v: found for v, found in FOUND.items() if found.get("cells")}
    if not ran:
        return
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"backends": {}}
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    for version, found in ran.items():
        entry = previous["backends"].setdefault(version, {})
        entry.update({k: v for k, v in found.items() if k != "cells"})
        cells = entry.setdefault("cells", {})
        for cell, outcome in found["cells"].items():
            cells[cell] = {**outcome, "run": stamp, "load": load}
    RESULTS.write_text(json.dumps(previous, indent=1, sort_keys=True) + "\n")
