"""The sidecar image built from the project's Dockerfile, run for real: the CLI's help, a non-root
user, a start-up measured from `docker start` to the first Metadata answer, and Docker's own
health status turning healthy through the image's HEALTHCHECK."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.optin("containers")

#: seconds from `docker start` to a listener that answers Metadata, backend already up (the figure is
#: printed; measured well under this on a loaded 2-core machine)
STARTUP_LIMIT_S = 60


def test_docker_run_help_prints_the_cli_help(docker):
    out = docker.client.containers.run(docker.image("kshare"), ["--help"], remove=True, network_mode="host")
    text = out.decode()
    assert "Usage: kshare" in text and "sidecar" in text and "Run the share-group sidecar" in text


def test_runs_as_a_non_root_user(docker):
    image = docker.client.images.get(docker.image("kshare"))
    assert image.attrs["Config"]["User"] == "kshare"
    out = docker.client.containers.run(docker.image("kshare"), ["-u"], entrypoint="id", remove=True,
                                       network_mode="host")
    assert out.decode().strip() == "10001"
    docker.report.append(f"image {docker.image('kshare')}: user kshare (uid 10001), {image.attrs['Size'] / 1e6:.0f} MB, "
                  f"base {docker.image('python')}")


def test_starts_and_turns_healthy(docker):
    from kshare_sidecar.testing.containers import ApacheKafkaContainer, KShareContainer

    with ApacheKafkaContainer(docker.image("kafka-3.9.2")) as kafka:
        kshare = KShareContainer(kafka, image=docker.image("kshare"),
                                 settings={"state.topic.replication.factor": 1})
        started = time.monotonic()
        with kshare:
            answered = time.monotonic() - started
            container = kshare.get_wrapped_container()
            deadline = time.monotonic() + 90  # start period 30 s, interval 10 s
            while True:
                container.reload()
                health = container.attrs["State"]["Health"]
                if health["Status"] == "healthy" or time.monotonic() > deadline:
                    break
                time.sleep(1)
            healthy = time.monotonic() - started
            assert health["Status"] == "healthy", health["Log"][-3:]
            assert health["Log"][-1]["ExitCode"] == 0
    docker.report.append(f"sidecar container: Metadata answered {answered:.1f} s after `docker start`, "
                  f"`docker inspect` healthy after {healthy:.1f} s (first check runs 10 s after start)")
    assert answered < STARTUP_LIMIT_S
