"""The backend check's pure half (backend/releases.py, backend/compat.py) on the ApiVersions answers of real
brokers: data/api_versions.json holds what each release the harness runs answered to ApiVersions v3
(``kshare dev broker --kafka V``, 2026-11-29; 2.4.1 is the too-old release of the refusal). The
live half runs in the backend matrix (tests/e2e/backends/) and tests/integration/test_backend_check.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kshare_sidecar.backend.compat import BackendProfile, refusal
from kshare_sidecar.backend.releases import FINGERPRINTS, metadata_mode, release

RECORDED = json.loads((Path(__file__).parent / "data" / "api_versions.json").read_text())


def profile(full: str, **changes: tuple[int, int] | None) -> BackendProfile:
    entry = RECORDED[full]
    versions = {int(k): (v[0], v[1]) for k, v in entry["api_versions"].items()}
    for key, value in changes.items():
        api = int(key.removeprefix("api"))
        if value is None:
            versions.pop(api)
        else:
            versions[api] = value
    return BackendProfile(versions, dict(entry["finalized_features"]))


@pytest.mark.parametrize("full", sorted(RECORDED))
def test_every_recorded_release_is_named_exactly(full):
    p = profile(full)
    assert release(p.versions) == f"Kafka {full.rsplit('.', 1)[0]}"
    assert metadata_mode(p.versions, p.finalized) == {"zookeeper": "ZooKeeper", "kraft": "KRaft"}[
        RECORDED[full]["metadata"]]


def test_every_fingerprint_has_a_recording():
    assert {f"{k}" for k in FINGERPRINTS} == {full.rsplit(".", 1)[0] for full in RECORDED}


def test_releases_in_between_and_beyond_are_ranges():
    assert release(profile("3.7.2", api1=(0, 17)).versions) == "between Kafka 3.7 and 3.9"
    assert release(profile("4.4.0", api0=(0, 14)).versions) == "Kafka 4.4 or newer"
    assert release(profile("2.4.1", api22=(0, 3)).versions) == "between Kafka 2.4 and 2.8"
    older = profile("2.4.1", api22=(0, 1), api1=(0, 10))
    assert release(older.versions) == "between Kafka 0.11 and 2.4"
    assert release(profile("2.4.1", api22=None, api1=(0, 3)).versions) == "older than Kafka 0.11"


@pytest.mark.parametrize("full", [f for f in sorted(RECORDED) if f != "2.4.1"])
@pytest.mark.parametrize("mode", ["fenced", "idempotent", "transactional", None])
def test_every_tested_release_serves_every_mode(full, mode):
    assert refusal(profile(full), mode, refresh=True) is None


def test_kafka_2_4_is_refused_for_fenced_writes_with_one_line():
    line = refusal(profile("2.4.1"), "fenced", refresh=True)
    assert line == ("backend Kafka 2.4 (ZooKeeper), from its ApiVersions: state.write.mode = 'fenced' needs "
                    "InitProducerId v3+ (the fenced writers' refresh, KIP-360's conditional epoch bump; Kafka 2.5+), "
                    "and the backend serves v0-v2: use state.write.mode = 'transactional', or upgrade the backend "
                    "(kshare is tested on Kafka 2.8 to 4.4); docs/compatibility.md, \"Backends\"")
    assert "\n" not in line


def test_kafka_2_4_serves_the_modes_that_need_no_epoch_bump():
    assert refusal(profile("2.4.1"), "fenced", refresh=False) is None  # state.write.refresh.ms = 0
    assert refusal(profile("2.4.1"), "transactional", refresh=True) is None
    assert refusal(profile("2.4.1"), "idempotent", refresh=True) is None


def test_a_backend_without_read_committed_fetches_is_refused_whatever_the_mode():
    old = profile("2.4.1", api1=(0, 3), api22=None)
    for mode in ("fenced", None):
        assert refusal(old, mode, refresh=True) == (
            "backend older than Kafka 0.11 (ZooKeeper), from its ApiVersions: kshare needs Fetch v4+ (read_committed "
            "reads of record format v2; Kafka 0.11+), and the backend serves v0-v3: upgrade the backend (kshare is "
            "tested on Kafka 2.8 to 4.4); docs/compatibility.md, \"Backends\"")


def test_a_backend_without_end_txn_gets_fenced_advice():
    """tansu 0.6.0 has no EndTxn (docs/compatibility.md, "Tansu"): the wording its test expects."""
    line = refusal(profile("3.9.2", api26=None), "transactional", refresh=True)
    assert ("state.write.mode = 'transactional' needs EndTxn, which the backend does not serve: use "
            "state.write.mode = 'fenced' (the default)") in line


def test_no_idempotent_producer_means_upgrade():
    line = refusal(profile("2.8.2", api22=None), "fenced", refresh=True)
    assert line.endswith("needs InitProducerId, which the backend does not serve: upgrade the backend (kshare is "
                         "tested on Kafka 2.8 to 4.4); docs/compatibility.md, \"Backends\"")


def test_a_backend_whose_lowest_version_is_above_kshares_is_refused():
    line = refusal(profile("4.4.0", api3=(13, 14)), None, refresh=True)
    assert "kshare needs Metadata v1-v12 (topic metadata; Kafka 0.10+), and the backend serves v13-v14" in line


def test_what_differs_per_release():
    assert profile("2.8.2").differences() == [
        "no DescribeTopicPartitions (clients describe topics with Metadata)",
        "no KIP-848 consumer groups (group.protocol=consumer)", "no Produce by topic id (clients name topics)"]
    assert profile("3.9.2").differences() == ["no KIP-848 consumer groups (group.protocol=consumer)",
                                              "no Produce by topic id (clients name topics)"]
    assert profile("4.0.1").differences() == ["no Produce by topic id (clients name topics)"]
    assert profile("4.1.1").differences() == []  # share APIs listed, share.version not finalized
    assert profile("4.4.0").differences() == [
        "the backend's own share groups are not reachable through kshare, which serves its own"]
    zero_ids = profile("2.8.2")
    zero_ids.topic_ids = False
    assert zero_ids.differences()[-1] == "topic ids minted by kshare (the backend has none)"
    assert "topic ids minted by kshare (the backend has none)" in profile("2.4.1").differences()  # Metadata v9


def test_kafka_4_0_early_access_share_groups_are_seen_by_their_v0_apis():
    assert profile("4.0.1", api76=(0, 0)).native_share_groups()
    assert not profile("4.0.1").native_share_groups()
