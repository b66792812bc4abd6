"""The persister as parts over a store: one protocol (cluster part included) for every persister,
one typed settings object for the topic persister, one write strategy chosen once per mode."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from kshare_sidecar.backend.clients import BackendClients
from kshare_sidecar.backend.security import BackendSecurity
from kshare_sidecar.config import load_config
from kshare_sidecar.persist import MemoryPersister, Persister
from kshare_sidecar.persist.settings import WRITE_MODES, TopicSettings
from kshare_sidecar.persist.topic import TopicPersister
from kshare_sidecar.persist.writers import for_mode
from kshare_sidecar.persist.writers.fenced import FencedWriters
from kshare_sidecar.persist.writers.idempotent import IdempotentWriters
from kshare_sidecar.persist.writers.transactional import TransactionalWriters


def test_every_persister_answers_the_whole_protocol_cluster_part_included():
    for persister in (MemoryPersister(partitions=2), TopicPersister(TopicSettings("127.0.0.1:1"))):
        assert isinstance(persister, Persister)
        assert not persister.cluster and persister.owner_epoch is None
        assert persister.owns(0) and persister.drop_connections() == 0
        assert persister.topic == "__kshare_state" and persister.transactional_id_prefix == "kshare-state"
        assert persister.home(("g", "group-1")) in range(persister.partitions)


def test_a_memory_persister_in_a_cluster_owns_what_it_acquires():
    async def run() -> None:
        p = MemoryPersister(partitions=2)
        p.enable_cluster(node_id=7)
        await p.start()
        assert p.cluster and p.owned == set() and not p.owns(1)
        epoch = await p.acquire(1)
        assert p.owned == {1} and p.epoch_of(1) == epoch and p.owns(1)
        await p.release(1)
        assert p.owned == set()
        await p.close()
    asyncio.run(run())


@pytest.mark.parametrize(("mode", "kind", "rule", "fences"), [
    ("fenced", FencedWriters, "owner", True),
    ("transactional", TransactionalWriters, "key", True),
    ("idempotent", IdempotentWriters, "owner", False),
])
def test_the_write_mode_chooses_the_writers_once(mode, kind, rule, fences):
    persister = TopicPersister(TopicSettings("127.0.0.1:1", write_mode=mode))
    writers = persister.topic_store.writers
    assert type(writers) is kind and type(for_mode(persister.settings)) is kind
    assert persister.replay_rule == rule and persister.store.fences_writers is fences
    assert set(WRITE_MODES) == {"fenced", "transactional", "idempotent"}


def test_topic_settings_refuse_what_no_state_topic_can_be():
    with pytest.raises(ValueError, match="write_mode must be one of fenced, transactional, idempotent"):
        TopicSettings("b:9092", write_mode="exactly-once")
    with pytest.raises(ValueError, match="cleanup.policy=compact"):
        TopicSettings("b:9092", topic_configs={"cleanup.policy": "delete"})
    with pytest.raises(ValueError, match="placement must be one of"):
        TopicSettings("b:9092", placement="by-the-moon")


def test_topic_settings_come_from_the_config():
    cfg = load_config(env={}, overrides={"bootstrap.servers": "b:9092", "state.topic": "__s",
                                         "state.write.mode": "transactional", "state.transaction.timeout.ms": 10_000})
    s = TopicSettings.from_config(cfg, BackendClients("b:9092", BackendSecurity.from_config(cfg)))
    assert (s.bootstrap_servers, s.topic, s.write_mode, s.transaction_timeout_ms) == ("b:9092", "__s", "transactional",
                                                                                      10_000)
    assert s.commit_timeout_s == 10.0  # past the transaction timeout a commit is settled by reading back
    twin = dataclasses.replace(s, partitions=8, create_topic=False)
    assert twin.transactional_id(3) == "kshare-state-__s-3"
