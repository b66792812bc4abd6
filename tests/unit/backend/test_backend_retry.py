"""Backend routing and its single retry after stale metadata, against a scripted fake cluster."""

from __future__ import annotations

import asyncio
import datetime
import types
import uuid

import pytest
from aiokafka.errors import KafkaConnectionError
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import response as f12
from kio.schema.metadata.v12 import response as md12

from kshare_sidecar.backend import Backend, BackendUnavailableError, PartitionRead
from tests.unit.backend.test_batches import aiokafka_batch

VERSIONS = {1: (4, 16), 2: (1, 8), 3: (1, 12)}
TOPIC_ID = uuid.uuid4()
ZERO = datetime.timedelta(0)


class FakeCluster:
    """Scripted broker answers; ``leader`` is what Metadata reports, ``serving`` who really leads."""

    def __init__(self) -> None:
        self.leader = 1
        self.serving = 2
        self.sent: list[tuple[int, int]] = []  # (api key, node)
        self.broken: set[int] = set()
        self.cluster = types.SimpleNamespace(
            brokers=lambda: [types.SimpleNamespace(nodeId=1), types.SimpleNamespace(nodeId=2)],
            broker_metadata=lambda n: object(),
        )

    def force_metadata_update(self):
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(True)
        return fut

    async def send(self, node, request, *, group=0):
        entity = request.prepare(VERSIONS).entity
        self.sent.append((request.API_KEY, node))
        if node in self.broken:
            raise KafkaConnectionError("boom")
        if request.API_KEY == 3:
            return self._metadata()
        if request.API_KEY == 1:
            return self._fetch(node, entity)
        raise AssertionError(request.API_KEY)

    def _metadata(self):
        part = md12.MetadataResponsePartition(error_code=ErrorCode.none, partition_index=0, leader_id=self.leader)
        topic = md12.MetadataResponseTopic(error_code=ErrorCode.none, name="t", topic_id=TOPIC_ID, partitions=(part,))
        return md12.MetadataResponse(throttle_time=ZERO, brokers=(), topics=(topic,))

    def _fetch(self, node, entity):
        ok = node == self.serving
        fetch_offset = entity.topics[0].partitions[0].fetch_offset
        part = f12.PartitionData(
            partition_index=0,
            error_code=ErrorCode.none if ok else ErrorCode.not_leader_or_follower,
            high_watermark=3 if ok else -1,
            aborted_transactions=None,
            records=aiokafka_batch(fetch_offset, 3) if ok else None,
        )
        return f12.FetchResponse(throttle_time=ZERO, error_code=ErrorCode.none,
                                 responses=(f12.FetchableTopicResponse(topic="t", partitions=(part,)),))


@pytest.fixture
async def setup():
    fake = FakeCluster()
    backend = Backend("unused:1")
    backend._client = fake
    await backend.refresh()
    return backend, fake


async def test_not_leader_refreshes_metadata_and_retries_on_the_new_leader(setup):
    backend, fake = setup
    fake.sent.clear()
    fake.leader, fake.serving = 1, 2  # the cached metadata names broker 1; broker 2 leads now
    original = fake._metadata
    fake._metadata = lambda: (setattr(fake, "leader", 2), original())[1]  # a refresh learns it
    result = await backend.fetch("t", 0, 0, max_bytes=1000)
    assert result.error_code == 0 and result.batches[0].last_offset == 2
    fetches = [node for key, node in fake.sent if key == 1]
    assert fetches == [1, 2] and [key for key, _ in fake.sent].count(3) == 1


async def test_persistent_error_is_reported_after_one_retry(setup):
    backend, fake = setup
    fake.sent.clear()
    fake.leader, fake.serving = 1, 2  # metadata keeps naming the wrong broker
    with pytest.raises(BackendUnavailableError) as info:
        await backend.fetch("t", 0, 0, max_bytes=1000)
    assert info.value.code == 6 and info.value.retriable
    assert [k for k, _ in fake.sent].count(1) == 2  # the first try and exactly one retry
    results = await backend.fetch_many([read("t")])
    assert results[("t", 0)].error_code == 6 and results[("t", 0)].records == b""


async def test_broken_connection_maps_to_network_exception(setup):
    backend, fake = setup
    fake.leader = fake.serving = 1
    fake.broken = {1}
    results = await backend.fetch_many([read("t")])
    assert results[("t", 0)].error_code == 13  # NETWORK_EXCEPTION, no aiokafka exception leaks
    fake.broken = set()
    assert (await backend.fetch("t", 0, 0, max_bytes=100)).batches


def read(topic):
    return PartitionRead(topic, 0, 0, 1000)


async def test_named_describe_uses_the_cache_until_entries_age(setup):
    backend, fake = setup
    fake.sent.clear()
    info = (await backend.describe_topics(["t"]))["t"]
    assert info.topic_id == TOPIC_ID and fake.sent == []  # fresh: no I/O
    backend._max_age = 0.0
    await backend.describe_topics(["t"])
    assert [key for key, _ in fake.sent] == [3]  # aged: one targeted Metadata request
