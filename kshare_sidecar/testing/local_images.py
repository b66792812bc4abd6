"""Images built on this machine, from Debian's packages, for engines that reach no image registry.

- ``kshare-local/debian:bookworm``: ``debootstrap --variant=minbase bookworm`` from the Debian mirror
  apt already uses, imported with ``docker import`` (about 40 s, once: cached by tag).
- ``kshare-local/python:3.11``: Debian's python3 (3.11) with venv, standing in for ``python:3.11-slim``
  as the base of **the project's own Dockerfile** (build argument ``PYTHON_IMAGE``).
- ``kshare-sidecar:dev``: the project's Dockerfile built on that base (rebuilt every run; the classic
  builder's layer cache makes an unchanged tree a no-op).
- ``kshare-local/kafka:<version>``: Debian's Java 17 and the Kafka jars the harness caches from
  Maven Central (``~/.cache/kshare/kafka-<version>/libs``), configured like ``apache/kafka``.
- ``kshare-local/prometheus:2.42``: Debian's Prometheus, standing in for ``prom/prometheus``.
  Grafana is not packaged by Debian, so no Grafana image can be made here.

Every build uses the classic builder (the Docker SDK's build API; BuildKit's frontend image would
need a registry) with host networking (apt and pip reach their mirrors from the build's RUN steps,
and the engine has no bridge). The Dockerfiles are under ``images/local/`` in the repository.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import HarnessError
from .kafka import _LOG4J1, _LOG4J2, resolve_version  # the harness brokers' logging, in the image too
from .maven import kafka_libs

BASE_IMAGE = "kshare-local/debian:bookworm"
PYTHON_IMAGE = "kshare-local/python:3.11"
KSHARE_IMAGE = "kshare-sidecar:dev"
PROMETHEUS_IMAGE = "kshare-local/prometheus:2.42"
SUITE = "bookworm"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")


def kafka_image(version: str = "3.9") -> str:
    return f"kshare-local/kafka:{resolve_version(version)}"


@dataclass
class Built:
    """One image: its tag, size in bytes, seconds spent here (0 when it was cached) and whether built now."""

    tag: str
    size: int
    seconds: float
    built: bool

    def line(self) -> str:
        how = f"built in {self.seconds:.1f} s" if self.built else "cached"
        return f"{self.tag}: {self.size / 1e6:.0f} MB ({how})"


# -- the Debian mirror --------------------------------------------------------------------------

def debian_mirror(apt_dir: Path = Path("/etc/apt"), suite: str = SUITE) -> str:
    """The first mirror apt uses for ``suite`` (one-line ``deb URI SUITE ...`` or deb822 ``.sources``)."""
    files = [apt_dir / "sources.list"] + sorted((apt_dir / "sources.list.d").glob("*.list")) + \
        sorted((apt_dir / "sources.list.d").glob("*.sources"))
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.strip().startswith("#") or ":" not in line:
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
                if "deb" in fields.get("types", "").split() and suite in fields.get("suites", "").split():
                    return fields.get("uris", "").split()[0]
        else:
            for line in text.splitlines():
                parts = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite:
                    return parts[1]
    raise HarnessError(f"no Debian {suite} mirror in {apt_dir}/sources.list*: debootstrap needs one")


# -- building -----------------------------------------------------------------------------------

def _image(client, tag: str):
    import docker

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def _build(client, context: Path, tag: str, *, dockerfile: str = "Dockerfile",
           buildargs: dict[str, str] | None = None) -> Built:
    import docker

    started = time.monotonic()
    try:
        image, _ = client.images.build(path=str(context), dockerfile=dockerfile, tag=tag, buildargs=buildargs or {},
                                       network_mode="host", rm=True, forcerm=True, pull=False)
    except docker.errors.BuildError as exc:
        tail = "".join(str(item.get("stream", item.get("error", ""))) for item in list(exc.build_log)[-15:])
        raise HarnessError(f"building {tag} failed: {exc.msg}\n{tail}") from exc
    return Built(tag, image.attrs["Size"], time.monotonic() - started, True)


def _cached(client, tag: str) -> Built | None:
    image = _image(client, tag)
    return None if image is None else Built(tag, image.attrs["Size"], 0.0, False)


def base_image(client, docker_host: str, tag: str = BASE_IMAGE) -> Built:
    """``debootstrap --variant=minbase`` into a temporary root, then ``docker import`` (once)."""
    if cached := _cached(client, tag):
        return cached
    debootstrap = shutil.which("debootstrap") or _install("debootstrap")
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise HarnessError("the docker CLI is needed to import the base image (docker.io installs it)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kshare-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        proc = subprocess.run([debootstrap, "--variant=minbase", SUITE, str(root), debian_mirror()],
                              capture_output=True, text=True, timeout=1200, check=False)
        if proc.returncode != 0:
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            raise HarnessError(f"debootstrap failed (exit {proc.returncode}): {tail}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (root / junk).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run([docker_cli, "-H", docker_host, "import", "-", tag], stdin=tar.stdout,
                                  capture_output=True, text=True, timeout=600, check=False)
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0:
            raise HarnessError(f"docker import of {tag} failed: {imported.stderr.strip()}")
    image = client.images.get(tag)
    return Built(tag, image.attrs["Size"], time.monotonic() - started, True)


def _install(package: str) -> str:
    proc = subprocess.run(["flock", "/tmp/apt.lock", "apt-get", "install", "-y", "-q", package],
                          capture_output=True, text=True, timeout=900, check=False)
    path = shutil.which(package)
    if proc.returncode != 0 or path is None:
        raise HarnessError(f"installing {package} failed: {(proc.stdout + proc.stderr).strip().splitlines()[-1:]}")
    return path


def python_image(client, repo: Path, tag: str = PYTHON_IMAGE, ca_dir: Path = HOST_CA_DIR) -> Built:
    """Debian's Python, trusting the host's own certificate authorities as well (``ca_dir``)."""
    if cached := _cached(client, tag):
        return cached
    with tempfile.TemporaryDirectory(prefix="kshare-python-image-") as tmp:
        context = Path(tmp)
        shutil.copy2(repo / "images/local/python/Dockerfile", context / "Dockerfile")
        (context / "ca").mkdir()
        for cert in sorted(ca_dir.glob("*.crt")) if ca_dir.is_dir() else []:
            shutil.copy2(cert, context / "ca" / cert.name)
        return _build(client, context, tag, buildargs={"BASE": BASE_IMAGE})


def prometheus_image(client, repo: Path, tag: str = PROMETHEUS_IMAGE) -> Built:
    return _cached(client, tag) or _build(client, repo / "images/local/prometheus", tag,
                                          buildargs={"BASE": BASE_IMAGE})


def kshare_image(client, repo: Path, tag: str = KSHARE_IMAGE, python: str = PYTHON_IMAGE) -> Built:
    """The project's own Dockerfile, on ``python`` instead of python:3.11-slim; rebuilt every time."""
    return _build(client, repo, tag, buildargs={"PYTHON_IMAGE": python})


def kafka_image_built(client, repo: Path, version: str = "3.9") -> Built:
    """Kafka ``version`` (KRaft) from the harness's jar cache (resolved with Maven first if missing)."""
    full = resolve_version(version)
    tag = kafka_image(full)
    if cached := _cached(client, tag):
        return cached
    libs = kafka_libs(full)
    with tempfile.TemporaryDirectory(prefix="kshare-kafka-image-") as tmp:
        context = Path(tmp)
        for name in ("Dockerfile", "kafka-run", "kafka-broker-api-versions.sh"):
            shutil.copy2(repo / "images/local/kafka" / name, context / name)
        shutil.copytree(libs, context / "libs")
        config = context / "config"
        config.mkdir()
        for name, text in (("log4j.properties", _LOG4J1), ("log4j2.properties", _LOG4J2)):
            (config / name).write_text(text)
            (config / f"tools-{name}").write_text(text.replace("INFO", "WARN"))
        api_versions = "kafka.admin.BrokerApiVersionsCommand" if full.startswith("3.") else \
            "org.apache.kafka.tools.BrokerApiVersionsCommand"
        return _build(client, context, tag, buildargs={"BASE": BASE_IMAGE, "KAFKA_VERSION": full,
                                                        "API_VERSIONS_CLASS": api_versions})


def build_all(client, docker_host: str, repo: Path, kafka_versions: tuple[str, ...] = ("3.9",),
              prometheus: bool = True) -> dict[str, Built]:
    """Every local image the container suites use, by role: base, python, kshare, kafka-<v>, prometheus."""
    built = {"base": base_image(client, docker_host), "python": python_image(client, repo)}
    built["kshare"] = kshare_image(client, repo)
    for version in kafka_versions:
        built[f"kafka-{resolve_version(version)}"] = kafka_image_built(client, repo, version)
    if prometheus:
        built["prometheus"] = prometheus_image(client, repo)
    return built
