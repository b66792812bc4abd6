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


def test_tansu_binary_location_install_command_and_skip_reason(monkeypatch, tmp_path):
    from kshare_sidecar.testing import tansu

    monkeypatch.setenv("KSHARE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KSHARE_TANSU_BIN", raising=False)
    root = tmp_path / f"tansu-{tansu.TANSU_VERSION}"
    assert tansu.tansu_root() == root
    assert tansu.install_command() == ["cargo", "install", "tansu", "--version", tansu.TANSU_VERSION, "--locked",
                                       "--features", "dynostore,libsql", "--root", str(root)]
    assert tansu.tansu_binary() is None
    reason = tansu.missing_reason()
    assert str(root / "bin" / "tansu") in reason and "make test-tansu" in reason and "cargo install" in reason
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tansu").write_text("#!/bin/sh\necho tansu 0.6.0\n")
    assert tansu.tansu_binary() is None  # not executable
    (root / "bin" / "tansu").chmod(0o755)
    assert tansu.tansu_binary() == root / "bin" / "tansu"
    assert tansu._version(root / "bin" / "tansu") == "0.6.0"


def test_tansu_bin_override_must_exist_and_storage_must_be_known(monkeypatch, tmp_path):
    from kshare_sidecar.testing import tansu

    monkeypatch.setenv("KSHARE_TANSU_BIN", str(tmp_path / "nope"))
    with pytest.raises(HarnessError, match=r"KSHARE_TANSU_BIN=.*nope is not an executable file"):
        tansu.tansu_binary()
    with pytest.raises(HarnessError, match=r"unknown tansu storage engine 's3': use one of sqlite, memory"):
        tansu.TansuBroker(storage="s3")
    assert tansu.TansuBroker().storage_url == "sqlite://tansu.db"
    assert tansu.TansuBroker(storage="memory").storage_url == "memory://tansu/"
