"""pytest fixtures for real brokers, registered through the ``pytest11`` entry point.

Any project with kshare-sidecar installed gets ``kafka_39`` (a backend without share groups),
``kafka_4`` (native KIP-932 share groups), ``kafka_28_zk`` (the oldest backend, Kafka 2.8 with
ZooKeeper), ``redpanda`` (Docker only) and ``tansu`` (a non-Apache Kafka-compatible broker; skipped
without its binary) as session fixtures, ``kafka_39_cluster3`` (three 3.9 brokers, module-scoped)
for multi-broker routing, ``kafka_backend`` (a factory for any pinned release, ZooKeeper or KRaft,
one broker or several; what it starts is stopped when the test ends), and ``kshare_container``
(Docker only: a sidecar container in front of a Kafka container). Start-up times are printed in
the terminal summary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .cluster import Cluster, kafka_cluster, redpanda_cluster
from .errors import HarnessError

_started: list[Cluster] = []


def _provide(factory, *args) -> Iterator[Cluster]:
    try:
        ctx = factory(*args)
        cluster = ctx.__enter__()
    except HarnessError as exc:
        pytest.fail(f"kshare harness: {exc}", pytrace=False)
    _started.append(cluster)
    try:
        yield cluster
    finally:
        ctx.__exit__(None, None, None)


@pytest.fixture(scope="session")
def kafka_39() -> Iterator[Cluster]:
    """Apache Kafka 3.9 (no share groups): the backend kshare serves share groups on."""
    yield from _provide(kafka_cluster, "3.9")


@pytest.fixture(scope="session")
def kafka_4() -> Iterator[Cluster]:
    """Apache Kafka 4.x with share groups enabled: the native reference."""
    yield from _provide(kafka_cluster, "4")


@pytest.fixture(scope="session")
def kafka_28_zk() -> Iterator[Cluster]:
    """Apache Kafka 2.8 with its own ZooKeeper: the oldest backend kshare supports."""
    yield from _provide(kafka_cluster, "2.8")


@pytest.fixture
def kafka_backend() -> Iterator[Callable[..., Any]]:
    """A factory for any release the harness pins (``KAFKA_VERSIONS``)::

        broker = kafka_backend("2.8")                      # ZooKeeper (2.8 has no other mode)
        broker = kafka_backend("3.7", zookeeper=True)      # 3.x: either mode; None picks the default
        broker = kafka_backend("4.1", share_groups=True)   # 4.0/4.1: share groups only when asked
        cluster = kafka_backend("3.5", brokers=3)          # a KafkaCluster

    Returns the started :class:`~.kafka.KafkaBroker` (``brokers=1``) or
    :class:`~.multibroker.KafkaCluster`; everything it started is stopped when the test ends.
    A harness error fails the test with its one line."""
    from .kafka import KafkaBroker
    from .multibroker import KafkaCluster

    started: list[Any] = []

    def start(version: str, *, brokers: int = 1, zookeeper: bool | None = None, share_groups: bool | None = None,
              extra_config: dict[str, str] | None = None, heap: str | None = None) -> Any:
        try:
            if brokers == 1:
                backend: Any = KafkaBroker(version, zookeeper=zookeeper, share_groups=share_groups,
                                           extra_config=extra_config, heap=heap or "1g")
            else:
                backend = KafkaCluster(version, brokers=brokers, zookeeper=zookeeper, share_groups=share_groups,
                                       extra_config=extra_config, heap=heap or "512m")
            started.append(backend)
            return backend.start()
        except HarnessError as exc:
            pytest.fail(f"kshare harness: {exc}", pytrace=False)

    try:
        yield start
    finally:
        for backend in reversed(started):
            backend.stop()


@pytest.fixture(scope="module")
def kafka_39_cluster3():
    """Three Kafka 3.9 KRaft nodes (:class:`~kshare_sidecar.testing.multibroker.KafkaCluster`),
    module-scoped: three JVMs are not kept alive for the whole session, and fault tests may kill
    nodes (``cluster.nodes[i].kill()``)."""
    from .multibroker import KafkaCluster

    try:
        cluster = KafkaCluster("3.9", brokers=3).start()
    except HarnessError as exc:
        pytest.fail(f"kshare harness: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redpanda() -> Iterator[Cluster]:
    """Redpanda in a container; skipped when no Docker engine answers a ping."""
    from .cluster import docker_engine_available

    if not docker_engine_available():
        pytest.skip("no Docker engine answers a ping (Redpanda runs only in a container)")
    yield from _provide(redpanda_cluster)


@pytest.fixture(scope="session")
def tansu() -> Iterator[Cluster]:
    """Tansu (:mod:`~kshare_sidecar.testing.tansu`; libSQL storage in a temporary directory unless
    ``KSHARE_TANSU_STORAGE=memory``); skipped, naming the path looked at and the build command, when
    its binary is absent."""
    from .tansu import missing_reason, tansu_binary, tansu_cluster

    try:
        binary = tansu_binary()
    except HarnessError as exc:  # KSHARE_TANSU_BIN names nothing runnable
        pytest.fail(f"kshare harness: {exc}", pytrace=False)
    if binary is None:
        pytest.skip(missing_reason())
    yield from _provide(tansu_cluster)


@pytest.fixture(scope="session")
def kshare_container():
    """A kshare sidecar container in front of a Kafka 3.9 container (testcontainers;
    :func:`~.containers.kafka_with_kshare`): ``kshare_container.get_bootstrap_server()``.
    Skipped when no Docker engine answers a ping. Image: ``KSHARE_IMAGE`` or kshare-sidecar:dev."""
    from .cluster import docker_engine_available

    if not docker_engine_available():
        pytest.skip("no Docker engine answers a ping (KShareContainer runs the sidecar in a container)")
    from .containers import kafka_with_kshare

    with kafka_with_kshare() as kshare:
        yield kshare


def pytest_terminal_summary(terminalreporter) -> None:
    for cluster in _started:
        terminalreporter.write_line(
            f"kshare harness: {cluster.product} {cluster.version} ({cluster.kind}"
            f"{', with ZooKeeper' if cluster.metadata == 'zookeeper' else ''}) at {cluster.bootstrap}, "
            f"ready in {cluster.startup_seconds:.1f} s"
        )
