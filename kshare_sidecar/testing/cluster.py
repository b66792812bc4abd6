"""Where a test's Kafka comes from: an existing cluster, a container, or an embedded broker.

Order of choice for a Kafka fixture:
1. ``KSHARE_TEST_BOOTSTRAP`` (the backend, 3.9-like) / ``KSHARE_TEST_NATIVE_BOOTSTRAP`` (a 4.x
   cluster with share groups): use that cluster, after checking that it answers Metadata;
2. ``KSHARE_TEST_DOCKER=1`` and a Docker engine that answers a ping: testcontainers;
3. otherwise the embedded `KafkaBroker` from Maven Central jars (the default here and in CI).
Redpanda only exists as a container, so its fixture skips when no engine answers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

from ..protocol.address import first_server, parse_host_port
from .errors import HarnessError
from .kafka import KafkaBroker, resolve_version
from .probe import broker_ready

ENV_BOOTSTRAP = {"3.9": "KSHARE_TEST_BOOTSTRAP", "4": "KSHARE_TEST_NATIVE_BOOTSTRAP"}


@dataclass(frozen=True)
class Cluster:
    """What a test gets: where to connect and what it is."""

    bootstrap: str
    version: str
    kind: str  # "embedded" | "external" | "container"
    share_groups: bool
    startup_seconds: float = 0.0
    product: str = "Kafka"  # or "Redpanda", "tansu": what the harness summary names
    metadata: str = "kraft"  # or "zookeeper" (Kafka 2.8 and 3.x)

    @property
    def host_port(self) -> tuple[str, int]:
        return parse_host_port(self.bootstrap)


@cache
def docker_engine_available() -> bool:
    """Ping the engine itself: a docker client binary on PATH proves nothing."""
    try:
        import docker  # installed with testcontainers

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no SDK, no socket, refused, timeout: all mean "no engine"
        return False


def external_cluster(alias: str) -> Cluster | None:
    var = ENV_BOOTSTRAP[alias]
    bootstrap = os.environ.get(var)
    if not bootstrap:
        return None
    try:
        host, port = first_server(bootstrap)
    except ValueError:
        raise HarnessError(f"{var}={bootstrap!r} is not host:port: set it like 127.0.0.1:9092 or unset it") from None
    if not broker_ready(host, port, timeout=5):
        raise HarnessError(f"{var}={bootstrap} does not answer Kafka Metadata: start that cluster or unset {var}")
    return Cluster(bootstrap, os.environ.get(f"{var}_VERSION", "external"), "external", alias != "3.9")


@contextmanager
def kafka_cluster(alias: str, *, extra_config: dict[str, str] | None = None, zookeeper: bool | None = None,
                  share_groups: bool | None = None) -> Iterator[Cluster]:
    """Provide a Kafka of line ``alias`` ("3.9", "4", or any release the harness pins: "2.8",
    "4.4", ...) for the duration of the block. An external cluster or a container stands in for
    the lines "3.9" and "4" only; the other releases are always embedded brokers."""
    resolve_version(alias)  # reject unknown versions before anything starts
    if alias in ENV_BOOTSTRAP:
        if (external := external_cluster(alias)) is not None:
            yield external
            return
        if os.environ.get("KSHARE_TEST_DOCKER") == "1" and docker_engine_available():
            with _kafka_container(alias) as cluster:
                yield cluster
            return
    with KafkaBroker(alias, extra_config=extra_config, zookeeper=zookeeper, share_groups=share_groups) as broker:
        yield Cluster(broker.bootstrap, broker.version, "embedded", broker.share_groups,
                      broker.startup_seconds or 0.0, metadata=broker.metadata)


@contextmanager
def _kafka_container(alias: str) -> Iterator[Cluster]:
    """Apache Kafka's own image in KRaft mode (testcontainers' KafkaContainer needs Confluent images)."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    version = resolve_version(alias)
    started = time.monotonic()
    container = (
        DockerContainer(f"apache/kafka:{version}")
        .with_exposed_ports(9092)
        .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR", "1")
    )
    with container:
        wait_for_logs(container, "Kafka Server started", timeout=120)
        host, port = container.get_container_host_ip(), container.get_exposed_port(9092)
        yield Cluster(f"{host}:{port}", version, "container", alias == "4", time.monotonic() - started)


@contextmanager
def redpanda_cluster(image: str = "docker.redpanda.com/redpandadata/redpanda:v25.2.1") -> Iterator[Cluster]:
    """Redpanda via testcontainers; raises HarnessError when no Docker engine answers."""
    if not docker_engine_available():
        raise HarnessError("no Docker engine answers a ping: Redpanda needs one (set DOCKER_HOST or start dockerd)")
    from testcontainers.community.kafka import RedpandaContainer

    started = time.monotonic()
    with RedpandaContainer(image) as container:
        yield Cluster(container.get_bootstrap_server(), image.rsplit(":", 1)[-1], "container", False,
                      time.monotonic() - started, product="Redpanda")
