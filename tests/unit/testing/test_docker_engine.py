"""The container harness's pure parts, without an engine: dockerd's command line, the install step,
which engine is used, the Debian mirror read from apt's sources, and the local images' tags."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kshare_sidecar.testing import docker_engine, local_images
from kshare_sidecar.testing.errors import HarnessError


def test_dockerd_runs_privately_without_a_bridge_or_firewall_rules(tmp_path):
    argv = docker_engine.dockerd_args(tmp_path / "run", tmp_path / "data")
    joined = " ".join(argv)
    assert argv[0] == "dockerd"
    assert f"--host unix://{tmp_path / 'run' / 'docker.sock'}" in joined  # never Docker's default socket
    assert f"--data-root {tmp_path / 'data'}" in joined and f"--pidfile {tmp_path / 'run' / 'docker.pid'}" in joined
    assert "--bridge none" in joined
    for flag in ("--iptables=false", "--ip-masq=false", "--ip-forward=false"):
        assert flag in argv


def test_install_is_debians_docker_io_under_the_apt_lock():
    assert docker_engine.install_command() == ["flock", "/tmp/apt.lock", "apt-get", "install", "-y", "-q", "docker.io"]


def test_ensure_dockerd_installs_only_when_missing(monkeypatch):
    calls = []
    found = iter([None, "/usr/sbin/dockerd"])
    monkeypatch.setattr(docker_engine.shutil, "which",
                        lambda name: "/usr/bin/apt-get" if name == "apt-get" else next(found))

    def run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    assert docker_engine.ensure_dockerd(run) == ("/usr/sbin/dockerd", True)
    assert calls == [docker_engine.install_command()]
    monkeypatch.setattr(docker_engine.shutil, "which", lambda name: "/usr/sbin/dockerd")
    assert docker_engine.ensure_dockerd(run) == ("/usr/sbin/dockerd", False)


def test_a_failed_install_says_so(monkeypatch):
    monkeypatch.setattr(docker_engine.shutil, "which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else None)
    run = lambda argv, **kw: subprocess.CompletedProcess(argv, 100, "", "E: Unable to locate package docker.io")
    with pytest.raises(HarnessError, match="installing docker.io failed \\(exit 100\\): E: Unable to locate"):
        docker_engine.ensure_dockerd(run)


def test_a_configured_docker_host_that_does_not_answer_is_an_error(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    monkeypatch.setattr(docker_engine, "engine_answers", lambda host=None, timeout=3: False)
    with pytest.raises(HarnessError, match="DOCKER_HOST=tcp://127.0.0.1:1 does not answer"):
        docker_engine.running_engine()


def test_the_engine_that_answers_is_used_and_left_running(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(docker_engine, "engine_answers", lambda host=None, timeout=3: host == docker_engine.DEFAULT_SOCKET)
    monkeypatch.setattr(docker_engine, "start_engine", lambda: pytest.fail("must not start an engine"))
    with docker_engine.docker_engine() as engine:
        assert engine.host == docker_engine.DEFAULT_SOCKET and not engine.started
    engine.stop()  # a no-op: not ours


def test_starting_an_engine_needs_root(monkeypatch, tmp_path):
    monkeypatch.setattr(docker_engine.os, "geteuid", lambda: 1000)
    with pytest.raises(HarnessError, match="needs root"):
        docker_engine.start_engine(tmp_path)


def test_mirror_from_deb822_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "nodesource.sources").write_text(
        "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\nURIs: http://deb.debian.org/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n")
    assert local_images.debian_mirror(tmp_path) == "http://deb.debian.org/debian"


def test_mirror_from_one_line_sources(tmp_path):
    (tmp_path / "sources.list").write_text("# deb http://old.example/debian bookworm main\n"
                                           "deb-src http://src.example/debian bookworm main\n"
                                           "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n")
    assert local_images.debian_mirror(tmp_path) == "http://mirror.example/debian"


def test_no_mirror_is_an_error(tmp_path):
    (tmp_path / "sources.list").write_text("deb http://deb.debian.org/debian trixie main\n")
    with pytest.raises(HarnessError, match="no Debian bookworm mirror"):
        local_images.debian_mirror(tmp_path)


def test_this_machines_apt_names_a_mirror():
    if not Path("/etc/apt").is_dir():
        pytest.skip("not a Debian machine")
    assert local_images.debian_mirror().startswith("http")


def test_image_tags():
    assert local_images.kafka_image("3.9") == "kshare-local/kafka:3.9.2"
    assert local_images.kafka_image("4.3.1") == "kshare-local/kafka:4.3.1"
    assert local_images.KSHARE_IMAGE == "kshare-sidecar:dev"  # the tag users build, on a local base
    built = local_images.Built("kshare-sidecar:dev", 324_000_000, 61.2, True)
    assert built.line() == "kshare-sidecar:dev: 324 MB (built in 61.2 s)"
    assert local_images.Built("x:1", 5_000_000, 0, False).line() == "x:1: 5 MB (cached)"


def test_the_local_dockerfiles_exist():
    repo = Path(__file__).resolve().parents[3]
    for name in ("python/Dockerfile", "kafka/Dockerfile", "kafka/kafka-run", "kafka/kafka-broker-api-versions.sh",
                 "prometheus/Dockerfile"):
        assert (repo / "images/local" / name).is_file(), name
