"""KShareContainer (kshare_sidecar.testing.containers) with a real Docker engine: a sidecar
container in front of a Kafka (Confluent, KRaft) or Redpanda testcontainer, used from the host
exactly as a user's pytest suite would. Skipped when no Docker engine answers a ping.

The image is the repo's Dockerfile, built once as ``kshare-sidecar:dev`` when missing (or
``KSHARE_IMAGE``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from kshare_sidecar.testing import docker_engine_available

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not docker_engine_available(),
                       reason="no Docker engine answers a ping (KShareContainer runs the sidecar in a container)"),
]

ROOT = Path(__file__).resolve().parents[2]
KAFKA_IMAGE = os.environ.get("KSHARE_TC_KAFKA_IMAGE", "confluentinc/cp-kafka:7.9.0")  # Kafka 3.9
REDPANDA_IMAGE = os.environ.get("KSHARE_TC_REDPANDA_IMAGE", "docker.redpanda.com/redpandadata/redpanda:v25.2.1")


@pytest.fixture(scope="module")
def kshare_image() -> str:
    import docker

    image = os.environ.get("KSHARE_IMAGE", "kshare-sidecar:dev")
    client = docker.from_env()
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        client.images.build(path=str(ROOT), tag=image, rm=True)
    finally:
        client.close()
    return image


def _backend(kind: str, network):
    from testcontainers.community.kafka import KafkaContainer

    from kshare_sidecar.testing.containers import NetworkedRedpandaContainer

    if kind == "kafka":
        return KafkaContainer(KAFKA_IMAGE).with_kraft().with_network(network).with_network_aliases("kafka")
    return NetworkedRedpandaContainer(REDPANDA_IMAGE).with_network(network).with_network_aliases("redpanda")


@pytest.mark.parametrize("kind", ["kafka", "redpanda"])
def test_share_group_through_the_container(kind, kshare_image):
    from testcontainers.core.network import Network

    from kshare_sidecar.client import ShareConsumer
    from kshare_sidecar.testing.containers import KShareContainer
    from tests.support import create_topic, produce

    with Network() as net, _backend(kind, net) as backend, \
            KShareContainer(backend, image=kshare_image,
                             settings={"share.auto.offset.reset": "earliest",
                                       "state.topic.replication.factor": 1}) as kshare:
        bootstrap = kshare.get_bootstrap_server()
        # the sidecar is the only bootstrap: topic creation and Produce pass through to the backend
        create_topic(bootstrap, "tc-orders", 2)
        values = produce(bootstrap, "tc-orders", 200, partitions=2)

        async def consume() -> list[bytes]:
            got: list[bytes] = []
            async with ShareConsumer("tc-orders", bootstrap_servers=bootstrap, group_id="tc-g",
                                     acknowledgement_mode="implicit") as c:
                async with asyncio.timeout(60):
                    while len(got) < len(values):
                        for records in (await c.getmany(timeout_ms=1000)).values():
                            got += [r.value for r in records]
                await c.commit()
            return got

        assert sorted(asyncio.run(consume())) == sorted(values)
