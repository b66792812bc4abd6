"""The container suite (`make test-containers`, docs/testing.md "Containers"): a Docker engine
provided for the session — the one that answers, else Debian's docker.io installed if missing and a
private dockerd started here and stopped at the end — and the local images built on it (cached
by tag; the project's Dockerfile rebuilt every run). Every test is marked optin("containers"): the
default suite skips them with one reason and never starts an engine."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORT: list[str] = []


@dataclass
class Docker:
    """The session's engine, its client and the images by role (base, python, kshare, kafka-3.9.2, prometheus)."""

    engine: object
    client: object
    images: dict = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    report: list[str] = field(default_factory=lambda: REPORT)  # lines for the terminal summary

    def image(self, role: str) -> str:
        return self.images[role].tag


@pytest.fixture(scope="session")
def docker() -> Iterator[Docker]:
    from testcontainers.core.config import testcontainers_config

    from kshare_sidecar.testing import local_images
    from kshare_sidecar.testing.docker_engine import docker_engine

    started = time.monotonic()
    with docker_engine() as engine:
        if engine.started:
            REPORT.append(f"engine: none answered; started a private dockerd at {engine.host} in "
                          f"{engine.started_in_s:.1f} s" + (" (docker.io installed first)" if engine.installed else ""))
        else:
            REPORT.append(f"engine: used the one answering at {engine.host}")
        client = engine.client()
        built = local_images.build_all(client, engine.host, ROOT)
        REPORT.extend(f"image {b.line()}" for b in built.values())
        REPORT.append(f"engine and images ready in {time.monotonic() - started:.1f} s")
        env = {"DOCKER_HOST": engine.host,
               # Ryuk, testcontainers' reaper, is an image from Docker Hub and needs a bridge network: off;
               # every container here is removed by its context manager (and the engine is private)
               "TESTCONTAINERS_RYUK_DISABLED": "true",
               "KAFKA_IMAGE": built["kafka-3.9.2"].tag, "KSHARE_IMAGE": built["kshare"].tag,
               "PROMETHEUS_IMAGE": built["prometheus"].tag}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        testcontainers_config.ryuk_disabled = True
        try:
            yield Docker(engine, client, built, env)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            from testcontainers.core.labels import LABEL_SESSION_ID, SESSION_ID

            # on the private engine everything is this run's (the docs example runs in a pytest of its
            # own, another testcontainers session); on a shared one only this session's containers
            label = "org.testcontainers=true" if engine.started else f"{LABEL_SESSION_ID}={SESSION_ID}"
            left = client.containers.list(all=True, filters={"label": label})
            for container in left:
                container.remove(force=True)
            if left:
                REPORT.append(f"removed {len(left)} testcontainers left behind")
            client.close()
            stopping = time.monotonic()
    if engine.started:
        REPORT.append(f"engine: the private dockerd stopped in {time.monotonic() - stopping:.1f} s")


def pytest_terminal_summary(terminalreporter) -> None:
    for line in REPORT:
        terminalreporter.write_line(f"containers: {line}")
