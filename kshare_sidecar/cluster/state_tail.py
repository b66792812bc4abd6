"""The state topic as every sidecar of a cluster reads it: one read_committed tail of all its
partitions (cluster/membership.py starts it before joining the sidecars' group).

What it keeps, and for whom:

* every share group's per-group configs (``["g", ...]`` records) — a sidecar leading
  share-partitions of a group another sidecar coordinates applies the group's lock duration,
  delivery count limit, offset reset and isolation level too;
* the newest share-partition snapshot of every key, undecoded — the group's coordinator
  describes the offsets of share-partitions other sidecars lead;
* the newest owner record of every state partition (``["o", p]``: epoch, node, released) — a new
  owner waits for its predecessor's handover mark before fencing it (:meth:`wait_released`), and
  a sidecar that sees a newer owner of a partition it still serves drops it at once
  (``on_owner``) instead of at its next fenced write: the second line of defence behind the lease
  (cluster/lease.py), for a sidecar whose group coordinator kept answering it while another one
  gave its partitions away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer

from ..backend.clients import BackendClients
from ..persist import codec
from ..persist.ownership import share_partition_home

log = logging.getLogger("kshare.cluster")

#: an owner record: (owner epoch, node id or None, released)
OwnerMark = tuple[int, "int | None", bool]

#: How the tail batches its reads (GroupConfigTail.start).
TAIL_MIN_BYTES = 1024 * 1024
TAIL_MAX_WAIT_MS = 1000


def _let_go(mark: OwnerMark, epoch: int, holds: Callable[[int | None], bool] | None) -> bool:
    at, node, released = mark
    if at < epoch or at == epoch and not released:
        return False
    return released or holds is None or not holds(node)


class GroupConfigTail:
    """The tail (see the module docstring). ``configs``: group id -> its configs; ``snapshots``:
    group id -> {SharePartitionKey: raw value}; ``owners``: state partition -> its newest
    :data:`OwnerMark`."""

    PREFIX = b'["g",'
    SNAPSHOT_PREFIX = b'["p",'
    OWNER_PREFIX = b'["o",'

    def __init__(self, *, clients: BackendClients, topic: str, partitions: int) -> None:
        self.clients = clients
        self.topic = topic
        self.partitions = partitions
        self.configs: dict[str, dict[str, str]] = {}
        self.snapshots: dict[str, dict] = {}  # group id -> {SharePartitionKey: raw value}
        self.owners: dict[int, OwnerMark] = {}
        #: told of every owner record read: ``(state partition, mark)``
        self.on_owner: Callable[[int, OwnerMark], None] | None = None
        #: called with a group id when its configs change: the share-partitions this sidecar leads
        #: take them (SharePartitionCache.reconfigure_group), as every broker's do on Kafka
        self.listeners: list[Callable[[str], object]] = []
        self._owner_events: dict[int, asyncio.Event] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        from aiokafka import TopicPartition

        # Batched reads: the broker answers once a second (or at 1 MiB), not at each state write.
        # Every sidecar tails every state write; answered one write at a time, each tail made a
        # fetch round per acknowledgement batch of the whole cluster (~0.3 ms of CPU each), so
        # the cluster's CPU per record grew with each sidecar (benchmarks/cluster.py). A changed
        # group config or owner record reaches the other sidecars within about a second.
        self._consumer = self.clients.consumer(
            group_id=None, enable_auto_commit=False,
            isolation_level="read_committed", auto_offset_reset="earliest", client_id="kshare-cluster-groups",
            fetch_min_bytes=TAIL_MIN_BYTES, fetch_max_wait_ms=TAIL_MAX_WAIT_MS)
        await self._consumer.start()
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._tail(), name="kshare-cluster-group-configs")

    async def wait_released(self, p: int, epoch: int, timeout_s: float,
                            holds: Callable[[int | None], bool] | None = None) -> bool:
        """Until state partition ``p``'s owner at ``epoch`` has written its handover mark, or a later
        owner took it — and, given ``holds`` (may that node hold ``p`` now?), that later owner has
        let go too: a newer record may be the same holder's, who took ``p`` back and serves it
        still. False after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            mark = self.owners.get(p)
            if mark is not None and _let_go(mark, epoch, holds):
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            event = self._owner_events.setdefault(p, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return False

    async def _tail(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                batches = await self._consumer.getmany(timeout_ms=1000, max_records=10_000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep tailing through backend trouble
                log.warning("cluster: reading group records failed: %r", exc)
                await asyncio.sleep(1)
                continue
            for messages in batches.values():
                for m in messages:
                    self._read(m.partition, m.key, m.value)

    def _read(self, partition: int, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        if key.startswith(self.SNAPSHOT_PREFIX):
            try:
                _kind, ident = codec.decode_key(key)
            except codec.CodecError:
                return
            if partition != share_partition_home(ident.topic_id, ident.partition, self.partitions):
                return  # an older layout's record, or its tombstone once moved home (persist/layout.py)
            if value is None:
                self.snapshots.get(ident.group_id, {}).pop(ident, None)
            else:
                self.snapshots.setdefault(ident.group_id, {})[ident] = value
        elif key.startswith(self.OWNER_PREFIX):
            if value is not None:
                self._owner(partition, value)
        elif key.startswith(self.PREFIX):
            try:
                _kind, group_id, record = codec.decode(key, value)
            except codec.CodecError:
                return  # logged by the owner's replay
            before = self.configs.get(group_id)
            if record is None:
                self.configs.pop(group_id, None)
            else:
                self.configs[group_id] = dict(record.configs)
            if self.configs.get(group_id) != before:
                self._changed(group_id)

    def _changed(self, group_id: str) -> None:
        for listener in self.listeners:
            try:
                listener(group_id)
            except Exception:  # noqa: BLE001 - one listener must not stop the tail
                log.exception("cluster: applying group %s's changed configs failed", group_id)

    def _owner(self, p: int, value: bytes) -> None:
        try:
            mark = codec.decode_owner_mark(value)
        except codec.CodecError:
            return
        self.owners[p] = mark
        event = self._owner_events.pop(p, None)
        if event is not None:
            event.set()
        if self.on_owner is not None:
            try:
                self.on_owner(p, mark)
            except Exception:
                log.exception("state partition %d: owner record listener failed", p)

    def summary(self, key):
        """The newest snapshot of ``key`` as a StateSummary (None: none read)."""
        from ..persist.codec import CodecError, decode_partition
        from ..persist.records import summarize

        raw = self.snapshots.get(key.group_id, {}).get(key)
        try:
            return summarize(decode_partition(raw).state) if raw is not None else None
        except CodecError:
            return None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
