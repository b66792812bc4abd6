"""Pure parts of the harness: version pinning and the Docker check."""

import pytest

from kshare_sidecar.testing import KAFKA_VERSIONS, HarnessError, docker_engine_available, resolve_version


def test_versions_are_pinned_per_line():
    assert resolve_version("3.9").startswith("3.9.")
    assert resolve_version("4").startswith("4.")
    assert resolve_version(KAFKA_VERSIONS["4"]) == KAFKA_VERSIONS["4"]


def test_unknown_version_names_the_allowed_ones():
    with pytest.raises(HarnessError, match=r"unknown Kafka version '5'.*3\.9.*4"):
        resolve_version("5")


def test_docker_check_pings_the_engine(monkeypatch, tmp_path):
    # The client binary may exist; only an engine that answers counts. Point at a dead socket.
    docker_engine_available.cache_clear()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nope.sock")
    try:
        assert docker_engine_available() is False
    finally:
        docker_engine_available.cache_clear()


def test_cluster_ids_never_look_like_options():
    from kshare_sidecar.testing.kafka import _cluster_id

    ids = {_cluster_id() for _ in range(5000)}
    assert len(ids) == 5000 and not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)
