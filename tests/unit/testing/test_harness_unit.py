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


# -- the backends of the compatibility matrix: ZooKeeper or KRaft, share groups per release ------

def test_backend_releases_are_pinned_and_the_old_aliases_stay():
    from kshare_sidecar.testing.kafka import BACKEND_VERSIONS

    assert [resolve_version(v.rsplit(".", 1)[0]) for v in BACKEND_VERSIONS] == list(BACKEND_VERSIONS)
    assert (resolve_version("3.9"), resolve_version("4.3"), resolve_version("4.4")) == ("3.9.2", "4.3.1", "4.4.0")
    assert resolve_version("4") in ("4.3.1", "4.4.0")


@pytest.mark.parametrize(("version", "asked", "zookeeper"), [
    ("2.8.2", None, True), ("2.4.1", None, True), ("3.5.2", None, True), ("3.5.2", False, False),
    ("3.7.2", None, False), ("3.7.2", True, True), ("3.9.2", True, True), ("4.4.0", None, False)])
def test_metadata_mode_per_release(version, asked, zookeeper):
    from kshare_sidecar.testing.kafka import KafkaBroker

    assert KafkaBroker(version, zookeeper=asked).zookeeper is zookeeper


def test_a_mode_the_release_does_not_have_is_one_line():
    from kshare_sidecar.testing.kafka import KafkaBroker

    with pytest.raises(HarnessError, match=r"^Kafka 4\.0\.1 runs in KRaft mode only .*drop --zookeeper"):
        KafkaBroker("4.0", zookeeper=True)
    with pytest.raises(HarnessError, match=r"^Kafka 2\.8\.2 runs with ZooKeeper here .*drop --kraft"):
        KafkaBroker("2.8", zookeeper=False)
    with pytest.raises(HarnessError, match=r"^Kafka 3\.9\.2 has no share groups"):
        KafkaBroker("3.9", share_groups=True)


def test_share_groups_on_for_4_3_and_4_4_only_when_asked_on_4_0_and_4_1(tmp_path):
    from kshare_sidecar.testing.kafka import KafkaBroker

    assert [KafkaBroker(v).share_groups for v in ("3.9", "4.0", "4.1", "4.3", "4.4")] == [False, False, False, True,
                                                                                          True]
    early = KafkaBroker("4.0", share_groups=True)
    early.workdir = tmp_path
    props = early._properties()
    assert props["group.share.enable"] == "true" and props["unstable.api.versions.enable"] == "true"
    preview = KafkaBroker("4.1", share_groups=True)
    preview.workdir = tmp_path
    assert "group.share.enable" not in preview._properties()  # 4.1: share.version=1 at format time
    off = KafkaBroker("4.0")
    off.workdir = tmp_path
    assert "group.share.enable" not in off._properties()


def test_zookeeper_mode_properties(tmp_path):
    from kshare_sidecar.testing.kafka import KafkaBroker

    broker = KafkaBroker("2.8")
    broker.workdir, broker.port, broker.zk_connect = tmp_path, 9999, "127.0.0.1:2181"
    props = broker._properties()
    assert props["zookeeper.connect"] == "127.0.0.1:2181" and props["broker.id"] == "1"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9999"
    assert not any(key.startswith(("process.roles", "controller.", "node.id")) for key in props)


def test_cluster_nodes_share_one_zookeeper_or_one_quorum():
    from kshare_sidecar.testing.multibroker import KafkaCluster

    zk = KafkaCluster("3.5", brokers=3)
    assert zk.zookeeper and all(n.controller_port == 0 for n in zk.nodes)
    kraft = KafkaCluster("3.5", brokers=3, zookeeper=False)
    assert not kraft.zookeeper and len({n.controller_port for n in kraft.nodes}) == 3
    with pytest.raises(HarnessError, match="at least one broker"):
        KafkaCluster("3.9", brokers=0)
