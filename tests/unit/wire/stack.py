"""The whole request path without sockets or brokers: every API the sidecar registers, over the
real services, the memory persister and an in-memory log. Used by the dispatcher fuzz tests."""

from __future__ import annotations

import asyncio
import time
import uuid

from kshare_sidecar.api import Dispatcher, NodeIdentity, build_registry
from kshare_sidecar.api import admin as admin_api
from kshare_sidecar.api import configs as configs_api
from kshare_sidecar.api import heartbeat as heartbeat_api
from kshare_sidecar.api import shares as shares_api
from kshare_sidecar.assignors.simple import SimpleAssignor
from kshare_sidecar.config import load_config
from kshare_sidecar.group.assign import assign_with
from kshare_sidecar.group.coordinator import ShareGroupCoordinator
from kshare_sidecar.backend.types import BatchInfo, FetchResult, TopicInfo
from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.group.admin import AdminService
from kshare_sidecar.group.service import GroupService
from kshare_sidecar.share.cache import SharePartitionCache
from kshare_sidecar.share.manager import SharePartitionManager
from kshare_sidecar.share.engine.sessions import ShareSessionCache

TOPICS = (TopicInfo("orders", uuid.UUID(int=0xA), 3), TopicInfo("events", uuid.UUID(int=0xB), 1))
NODE = NodeIdentity(node_id=1, host="127.0.0.1", port=9192)


class FakeConn:
    """The ConnectionHandle the dispatcher sees, without a socket (the fuzz and hostile tests)."""

    conn_id = 1
    peer_host = "127.0.0.1"
    peer_port = 40000

    def add_close_callback(self, callback) -> None:
        pass


class MemoryBackend:
    """Two topics of 10-record batches; every read answers at once (fuzzing wants no waiting)."""

    def __init__(self) -> None:
        self.by_name = {t.name: t for t in TOPICS}
        self.by_id = {t.topic_id: t for t in TOPICS}

    def topic_by_id(self, topic_id):
        return self.by_id.get(topic_id)

    async def resolve_topic_id(self, topic_id):
        return self.by_id.get(topic_id)

    async def describe_topics(self, names=None, stale_ok=False):
        if names is None:
            return dict(self.by_name)
        return {n: self.by_name[n] for n in names if n in self.by_name}

    async def list_offsets(self, topic, partition, spec, *, isolation_level=0):
        return 0 if spec == "earliest" else 30

    async def high_watermark(self, topic, partition):
        return 30

    async def fetch(self, topic, partition, offset, *, max_bytes, max_wait_ms=0, isolation_level=0):
        buf, infos = b"", []
        for first in range(0, 30, 10):
            if first + 9 >= offset:
                data = f"{first};".encode()
                infos.append(BatchInfo(first, first + 9, -1, False, False, len(buf), len(buf) + len(data)))
                buf += data
        return FetchResult(buf, tuple(infos), 30, 30, 0)


class Stack:
    async def start(self) -> Dispatcher:
        cfg = load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:1"})
        self.persister = MemoryPersister()
        await self.persister.start()
        backend = MemoryBackend()
        clock = lambda: int(time.monotonic() * 1000)  # noqa: E731
        coordinator = ShareGroupCoordinator(assign=assign_with(SimpleAssignor()), clock=clock)

        def group_config(group_id):
            group = coordinator.groups.get(group_id)
            return cfg.group_config(group.configs if group is not None else None)

        self.partitions = SharePartitionCache(persister=self.persister, backend=backend, clock=clock,
                                                group_config=group_config)
        self.partitions.start()
        groups = GroupService(coordinator=coordinator, partitions=self.partitions, backend=backend,
                              persister=self.persister)
        shares = SharePartitionManager(sessions=ShareSessionCache(100), partitions=self.partitions, backend=backend,
                              group_config=group_config)

        class Catalog:
            async def describe_topics(self, names, stale_ok=False):
                return await backend.describe_topics(list(names) if names is not None else None)

            async def topic_by_id(self, topic_id):
                return backend.topic_by_id(topic_id)

        registry = build_registry(Catalog())
        heartbeat_api.register(registry, groups)
        shares_api.register(registry, shares)
        admin = AdminService(config=cfg, coordinator=coordinator, groups=groups, partitions=self.partitions,
                             persister=self.persister, backend=backend)
        admin_api.register(registry, admin, backend)
        configs_api.register(registry, admin)
        self.dispatcher = Dispatcher(registry, NODE)
        return self.dispatcher

    async def stop(self) -> None:
        await self.partitions.close()
        await self.persister.close()
        await asyncio.sleep(0)
