"""franz-go's own integration suite (`pkg/kgo`) with the sidecar as its one bootstrap, beside native
Kafka 4.3 (opt-in: ``make test-franz``; ~10 minutes per target on 2 cores).

The suite is a third party's, written for Kafka 4.x, and uses one ``KGO_SEEDS`` bootstrap for
everything: produce, plain and KIP-848 consumer groups, transactions, admin, share groups (its
share tests need ShareFetch/ShareAcknowledge v2 and run only when ApiVersions offers them). It is
fetched from the Go module proxy at a pinned version and built here (nothing of it is committed).

Differential: every test that passes against native Kafka 4.3.1 must pass through kshare, on a
Kafka 3.9 backend (no share groups, no KIP-848) and on a Kafka 4.3 backend (where the sidecar
serves share groups itself and forwards everything else, Produce v13 by topic id included); the
share tests must run (not skip) through kshare. What fails natively is reported, not asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kshare_sidecar.testing import kafka_cluster
from kshare_sidecar.testing.kafka import free_port
from kshare_sidecar.testing.maven import cache_root

from tests.e2e.conftest import SidecarProcess

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.optin("franz")]

FRANZ = "github.com/twmb/franz-go"
VERSION = os.environ.get("KSHARE_FRANZ_VERSION", "v1.22.3")
RECORDS = os.environ.get("KSHARE_FRANZ_RECORDS", "20000")  # KGO_TEST_RECORDS; the suite's default is 500k
CACHE = cache_root() / f"franz-go-{VERSION}"
RESULT = re.compile(r"^--- (PASS|FAIL|SKIP): (\S+) \(")
#: Kafka's defaults where the test sidecar's fixture shortens them (the suite sets what it needs
#: per group, as it does on a native broker).
KAFKA_DEFAULTS = {"KSHARE_SHARE_AUTO_OFFSET_RESET": "latest", "KSHARE_GROUP_SHARE_RECORD_LOCK_DURATION_MS": "30000",
                  "KSHARE_GROUP_SHARE_HEARTBEAT_INTERVAL_MS": "5000"}


def _go() -> str:
    go = shutil.which("go")
    assert go, "the Go toolchain is required for franz-go's suite (https://go.dev/dl/)"
    return go


@pytest.fixture(scope="module")
def kgo_suite() -> Path:
    """franz-go's ``pkg/kgo`` test binary, built once per version into the cache."""
    binary = CACHE / "kgo.test"
    if binary.exists():
        return binary
    go = _go()
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    info = json.loads(subprocess.run([go, "mod", "download", "-json", f"{FRANZ}@{VERSION}"], env=env, cwd=CACHE.parent,
                                     check=True, capture_output=True, text=True, timeout=600).stdout)
    src = CACHE / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(info["Dir"], src)  # the module cache is read-only; the build writes go.sum
    for path in src.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    subprocess.run([go, "test", "-c", "-o", str(binary), "./pkg/kgo"], cwd=src, env=env, check=True,
                   capture_output=True, timeout=1800)
    return binary


def run_suite(binary: Path, seeds: str, log: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Run the whole suite against ``seeds``: {test name: PASS | FAIL | SKIP} (top-level tests)."""
    env = {**os.environ, "KGO_SEEDS": seeds, "KGO_TEST_RF": "1", "KGO_TEST_RECORDS": RECORDS, "KGO_LOG_LEVEL": "none",
           **(extra or {})}
    args = [str(binary), "-test.v", "-test.timeout", "40m"]
    if os.environ.get("KSHARE_FRANZ_RUN"):
        args += ["-test.run", os.environ["KSHARE_FRANZ_RUN"]]
    with open(log, "w") as out:
        subprocess.run(args, cwd=binary.parent / "src" / "pkg" / "kgo", env=env, stdout=out,
                       stderr=subprocess.STDOUT, timeout=45 * 60)
    results: dict[str, str] = {}
    for line in log.read_text(errors="replace").splitlines():
        found = RESULT.match(line)
        if found:
            results[found.group(2)] = found.group(1)
    assert results, f"no test results in {log}"
    return results


def _through_sidecar(binary: Path, backend: str, tmp_path: Path, name: str) -> dict[str, str]:
    """The suite through a sidecar with a PLAINTEXT listener (``KGO_SEEDS``) and a SASL_PLAINTEXT
    one with a SCRAM-SHA-256 user (``KGO_TEST_SCRAM_SEEDS``: the suite's SCRAM tests, which the
    native reference skips)."""
    users = tmp_path / f"users-{name}"
    users.write_text("franz:franz-secret\n")
    port, sasl_port = free_port(), free_port()
    env = {**KAFKA_DEFAULTS, "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-256",
           "KSHARE_SASL_AUTHENTICATOR": "static", "KSHARE_SASL_CREDENTIALS_FILE": str(users)}
    sc = SidecarProcess(backend, tmp_path / f"sidecar-{name}.log", port=port, env=env,
                        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}").start()
    try:
        return run_suite(binary, sc.bootstrap, tmp_path / f"franz-{name}.log",
                         {"KGO_TEST_SCRAM": "franz:franz-secret:256", "KGO_TEST_SCRAM_SEEDS": f"127.0.0.1:{sasl_port}"})
    finally:
        sc.stop()


def test_franz_go_suite_through_the_sidecar_as_natively(kgo_suite, kafka_39, tmp_path):
    with kafka_cluster("4") as native:
        reference = run_suite(kgo_suite, native.bootstrap, tmp_path / "franz-native.log")
        on_43 = _through_sidecar(kgo_suite, native.bootstrap, tmp_path, "kshare-on-4.3")
    on_39 = _through_sidecar(kgo_suite, kafka_39.bootstrap, tmp_path, "kshare-on-3.9")

    def count(results: dict[str, str]) -> str:
        return ", ".join(f"{sum(v == k for v in results.values())} {k.lower()}" for k in ("PASS", "FAIL", "SKIP"))

    print(f"\n[franz-go {VERSION}, KGO_TEST_RECORDS={RECORDS}] native 4.3.1: {count(reference)}; "
          f"kshare on 4.3.1: {count(on_43)}; kshare on 3.9.2: {count(on_39)}", file=sys.stderr)
    for name, results in (("native", reference), ("kshare on 4.3", on_43), ("kshare on 3.9", on_39)):
        failed = sorted(t for t, r in results.items() if r == "FAIL")
        print(f"  {name} failed: {failed or 'none'}; logs in {tmp_path}", file=sys.stderr)
    share = sorted(t for t in reference if "Share" in t and reference[t] == "PASS")
    assert share, "the native run ran no share test: is ShareFetch v2 offered?"
    # on 4.3 the backend has everything native has: all of it must pass; a 3.9 backend lacks
    # KIP-848 (and what else the suite probes for), so its tests may skip there
    for name, results, allowed in (("kshare on 4.3", on_43, ("PASS",)), ("kshare on 3.9", on_39, ("PASS", "SKIP"))):
        regressions = sorted(t for t, r in reference.items() if r == "PASS" and results.get(t) not in allowed)
        assert not regressions, f"{name}: passes natively, not through kshare: {regressions} (logs in {tmp_path})"
        skipped_share = [t for t in share if results.get(t) != "PASS"]
        assert not skipped_share, f"{name}: share tests not passing through kshare: {skipped_share}"
        if not os.environ.get("KSHARE_FRANZ_RUN"):
            scram = {t: results.get(t) for t in ("TestSCRAMAuth", "TestSCRAMAuthBadCredentials")}
            assert set(scram.values()) == {"PASS"}, f"{name}: the SCRAM tests on the SASL listener: {scram}"
