"""Membership of a cluster of sidecars, through the backend's consumer-group protocol.

Every sidecar of cluster ``<name>`` joins the consumer group ``kshare-cluster-<name>`` on the
backend, subscribed to the state topic; the group's assignment of the state topic's partitions
*is* the ownership: owning state partition *p* means leading every share-partition and
coordinating every group whose state is on *p* (persist/ownership.py's placement). The group
leader assigns with :func:`kshare_sidecar.cluster.assign.sticky_assign` (members report what
they hold, so only what the balance needs moves) and hands everyone the whole map
(:class:`~kshare_sidecar.cluster.view.ClusterView`) for routing.

Liveness is the backend's: a sidecar that stops heartbeating is dropped after
``cluster.session.timeout.ms``; one that stops cleanly leaves the group at once (aiokafka sends
LeaveGroup), after giving its partitions up. No consensus of our own: the backend's group
coordinator decides who is in, the state topic's transactional writers fence whoever is out
(persist/cluster.py).

aiokafka implements the eager protocol (every member revokes at each rebalance); revocation
is ignored here and only the difference between what is held and the new assignment is acted
on, which with a sticky assignment is the cooperative behaviour: partitions that stay do not
pause. A partition given to B while A still serves it is safe: B's takeover fences A's writer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from ..cluster.assign import (
    ClusterMap,
    CodecError,
    MemberInfo,
    cluster_map,
    decode_map,
    decode_member,
    duplicate_node_ids,
    encode_map,
    encode_member,
    sticky_assign,
)
from ..cluster.view import ClusterView
from ..persist.ownership import share_partition_home

log = logging.getLogger("kshare.cluster")

ASSIGNOR_NAME = "kshare-sticky"


class StickyOwnerAssignor(AbstractPartitionAssignor):
    """aiokafka assignor (an instance, not the class: it reports this sidecar's holdings)."""

    name = ASSIGNOR_NAME
    version = 0

    def __init__(self, membership: ClusterMembership) -> None:
        self.membership = membership
        self.generation = 0

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), encode_member(self.membership.info()))

    def assign(self, cluster, members: Mapping[str, ConsumerProtocolMemberMetadata]
               ) -> dict[str, ConsumerProtocolMemberAssignment]:
        topic = self.membership.topic
        infos: dict[str, MemberInfo] = {}
        for member_id, meta in members.items():
            try:
                infos[member_id] = decode_member(meta.user_data)
            except CodecError as exc:  # another version: it gets nothing rather than breaking the group
                log.error("cluster member %s sent metadata this sidecar does not understand (%s); it is "
                          "assigned nothing", member_id, exc)
        for node_id, ids in duplicate_node_ids(infos).items():
            log.error("cluster members %s all use node.id %d: give every sidecar its own node.id", ids, node_id)
        partitions = sorted(cluster.partitions_for_topic(topic) or ())
        assignment = sticky_assign(infos, partitions)
        self.generation += 1
        shared = encode_map(cluster_map(self.generation, infos, assignment))
        out = {}
        for member_id in members:
            ps = assignment.get(member_id, [])
            out[member_id] = ConsumerProtocolMemberAssignment(self.version, [(topic, ps)] if ps else [], shared)
        log.info("cluster assignment (generation %d of this leader): %s", self.generation,
                 {infos[m].node_id: ps for m, ps in assignment.items()})
        return out

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        try:
            self.membership.view.update(decode_map(assignment.user_data))
        except CodecError as exc:
            log.error("cluster assignment not understood: %s", exc)


class ClusterMembership(ConsumerRebalanceListener):
    """Joins the sidecars' group and takes over / gives up state partitions as it assigns them."""

    def __init__(self, *, name: str, persister, view: ClusterView, bootstrap_servers, client_options: dict,
                 session_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        self.name = name
        self.group_id = f"kshare-cluster-{name}"
        self.persister = persister
        self.view = view
        self.topic = persister.topic
        self.bootstrap_servers = bootstrap_servers
        self.client_options = client_options
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.target: set[int] = set()
        self.assignments = 0
        self._changed = asyncio.Event()
        self._settled = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False

    def info(self) -> MemberInfo:
        return MemberInfo(self.view.node_id, self.view.endpoints,
                          {p: e for p in sorted(self.persister.owned)
                           if (e := self.persister.epoch_of(p)) is not None})

    # -- aiokafka rebalance listener ---------------------------------------------------------
    def on_partitions_revoked(self, revoked) -> None:
        """Eager protocol: everything is 'revoked' at each rebalance. Keep serving; the new
        assignment says what really moves."""

    def on_partitions_assigned(self, assigned) -> None:
        assert self._consumer is not None
        if assigned:
            self._consumer.pause(*assigned)  # membership only: never fetch the state topic here
        self.target = {tp.partition for tp in assigned if tp.topic == self.topic}
        self.assignments += 1
        log.info("cluster %s: this sidecar (node %d) is assigned state partitions %s", self.name,
                 self.view.node_id, sorted(self.target))
        self._settled.clear()
        self._changed.set()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, wait_s: float) -> None:
        """Join; wait (up to ``wait_s``) until the first assignment is taken over."""
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, group_id=self.group_id, enable_auto_commit=False,
            client_id=f"kshare-cluster-{self.view.node_id}", session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms, rebalance_timeout_ms=self.session_timeout_ms,
            max_poll_interval_ms=2**31 - 1, partition_assignment_strategy=(StickyOwnerAssignor(self),),
            **self.client_options)
        await self._consumer.start()
        self._consumer.subscribe([self.topic], listener=self)
        self._tasks = [asyncio.create_task(self._poll(), name="kshare-cluster-poll"),
                       asyncio.create_task(self._reconcile(), name="kshare-cluster-reconcile")]
        try:
            await asyncio.wait_for(self._settled.wait(), wait_s)
        except TimeoutError:
            log.warning("cluster %s: no assignment taken over within %.0f s; serving what is owned so far",
                        self.name, wait_s)

    async def _poll(self) -> None:
        """aiokafka runs the group from a consumer that is being polled; every partition is paused."""
        assert self._consumer is not None
        while True:
            try:
                await self._consumer.getmany(timeout_ms=1000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the membership must outlive backend trouble
                log.warning("cluster %s: membership poll failed: %r", self.name, exc)
                await asyncio.sleep(1)

    async def _reconcile(self) -> None:
        """Release what is no longer assigned, then take over what is newly assigned."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            target = set(self.target)
            held = set(self.persister.owned) | {p for p, r in self.persister.blocked.items() if r == "acquiring"}
            gone, new = held - target, target - set(self.persister.owned)
            if gone:
                await asyncio.gather(*(self.persister.release(p) for p in sorted(gone)))
            if new:
                started = time.monotonic()
                results = await asyncio.gather(*(self.persister.acquire(p) for p in sorted(new)),
                                               return_exceptions=True)
                failed = [p for p, r in zip(sorted(new), results) if isinstance(r, BaseException)]
                for p, r in zip(sorted(new), results):
                    if isinstance(r, BaseException):
                        log.warning("cluster %s: taking state partition %d over failed: %r; retrying", self.name,
                                    p, r)
                log.info("cluster %s: took over state partitions %s in %.2f s", self.name,
                         sorted(set(new) - set(failed)), time.monotonic() - started)
                if failed:
                    await asyncio.sleep(0.5)
                    self._changed.set()
                    continue
            if not self._changed.is_set():
                self._settled.set()

    def owned_and_ready(self) -> bool:
        """Readiness (docs/deployment.md): assigned, and everything assigned is taken over."""
        return self.assignments > 0 and self._settled.is_set()

    async def stop(self) -> None:
        """Give every partition up first (writes in flight finish), then leave the group, so the
        others take over at once instead of after the session timeout."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(self.persister.release(p) for p in sorted(self.persister.owned)),
                             return_exceptions=True)
        if self._consumer is not None:
            try:
                await asyncio.wait_for(self._consumer.stop(), 10)  # LeaveGroup
            except Exception as exc:  # noqa: BLE001
                log.warning("cluster %s: leaving the group failed: %r", self.name, exc)
            self._consumer = None
        log.info("cluster %s: node %d left", self.name, self.view.node_id)

    async def close(self) -> None:
        await self.stop()


__all__ = ["ClusterMembership", "ClusterMap", "StickyOwnerAssignor"]


#: How the state-topic tail of a cluster's sidecar batches its reads (GroupConfigTail.start).
TAIL_MIN_BYTES = 1024 * 1024
TAIL_MAX_WAIT_MS = 1000


class GroupConfigTail:
    """Every share group's per-group configs, read-only, for a sidecar that leads share-partitions of
    groups another sidecar coordinates: the lock duration, delivery count limit, offset reset and
    isolation level of a group apply on every sidecar, not only at its coordinator.

    Tails the group records (``["g", ...]`` keys) of every state partition, read_committed, and
    keeps the newest share-partition snapshot of every key undecoded (``snapshots``), so the group's
    coordinator can describe the offsets of share-partitions other sidecars lead."""

    PREFIX = b'["g",'
    SNAPSHOT_PREFIX = b'["p",'

    def __init__(self, *, bootstrap_servers, topic: str, partitions: int, client_options: dict) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.partitions = partitions
        self.client_options = client_options
        self.configs: dict[str, dict[str, str]] = {}
        self.snapshots: dict[str, dict] = {}  # group id -> {SharePartitionKey: raw value}
        #: called with a group id when its configs change: the share-partitions this sidecar leads
        #: take them (SharePartitionManager.reconfigure_group), as every broker's do on Kafka
        self.listeners: list[Callable[[str], object]] = []
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        from aiokafka import TopicPartition

        # Batched reads: the broker answers once a second (or at 1 MiB), not at each state write.
        # Every sidecar tails every state write; answered one write at a time, each tail made a
        # fetch round per acknowledgement batch of the whole cluster (~0.3 ms of CPU each), so
        # the cluster's CPU per record grew with each sidecar (benchmarks/cluster.py). A changed
        # group config reaches the other sidecars within about a second.
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, group_id=None, enable_auto_commit=False,
            isolation_level="read_committed", auto_offset_reset="earliest", client_id="kshare-cluster-groups",
            fetch_min_bytes=TAIL_MIN_BYTES, fetch_max_wait_ms=TAIL_MAX_WAIT_MS, **self.client_options)
        await self._consumer.start()
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._tail(), name="kshare-cluster-group-configs")

    async def _tail(self) -> None:
        from ..persist import codec

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
                    if m.key is not None and m.key.startswith(self.SNAPSHOT_PREFIX):
                        try:
                            _kind, key = codec.decode_key(m.key)
                        except codec.CodecError:
                            continue
                        if m.partition != share_partition_home(key.topic_id, key.partition, self.partitions):
                            continue  # an older layout's record, or its tombstone once moved home (persist/layout.py)
                        if m.value is None:
                            self.snapshots.get(key.group_id, {}).pop(key, None)
                        else:
                            self.snapshots.setdefault(key.group_id, {})[key] = m.value
                        continue
                    if m.key is None or not m.key.startswith(self.PREFIX):
                        continue
                    try:
                        _kind, group_id, record = codec.decode(m.key, m.value)
                    except codec.CodecError:
                        continue  # logged by the owner's replay
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


#: client.id of one sidecar's requests to another (a forwarded request is never forwarded again)
PEER_CLIENT_ID = "kshare-cluster-peer"


class PeerConfigs:
    """Per-group config changes made at a sidecar that does not coordinate the group go to the one
    that does: admin clients send IncrementalAlterConfigs for GROUP resources to any broker
    (Kafka keeps group configs in its cluster metadata), while kshare keeps them in the group's
    record, which only its coordinator writes. Sent over the coordinator's listener named
    ``listener`` (a PLAINTEXT one: the sidecars do not authenticate to each other)."""

    def __init__(self, view: ClusterView, listener: str | None) -> None:
        self.view = view
        self.listener = listener

    async def alter(self, group_id: str, changes: Mapping[str, object | None], text) -> tuple[int, str | None]:
        from kio.schema.incremental_alter_configs.v0 import request as alter_req
        from kio.static.primitive import i8

        from ..client import protocol
        from ..protocol.constants import AlterConfigOp, ConfigResourceType
        from ..backend.brokerconn import BrokerConn

        owner = self.view.coordinator(group_id)
        node = self.view.node(owner, self.listener) if owner is not None and self.listener else None
        if node is None or owner == self.view.node_id:
            return 15, "the group's coordinator is not known yet; retry"  # COORDINATOR_NOT_AVAILABLE
        request = alter_req.IncrementalAlterConfigsRequest(resources=(alter_req.AlterConfigsResource(
            resource_type=i8(ConfigResourceType.GROUP), resource_name=group_id, configs=tuple(
                alter_req.AlterableConfig(name=k, config_operation=i8(AlterConfigOp.DELETE if v is None
                                                                      else AlterConfigOp.SET),
                                          value=None if v is None else text(v)) for k, v in changes.items())),),
            validate_only=False)
        conn = BrokerConn(node.host, node.port, node_id=node.node_id, connect_timeout_s=5)
        try:
            payload = await conn.request(protocol.encode(request, PEER_CLIENT_ID), timeout_s=15)
        except Exception as exc:  # noqa: BLE001 - the caller answers a retriable error
            return 15, f"the group's coordinator (node {owner}) did not answer: {exc!r}"
        finally:
            await conn.close()
        (answer,) = protocol.decode(request, payload).responses
        log.info("share group %s: config change forwarded to its coordinator, node %d: %s", group_id, owner,
                 getattr(answer.error_code, "name", answer.error_code))
        return int(answer.error_code), answer.error_message
