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
LeaveGroup), after handing its partitions over. No consensus of our own: the backend's group
coordinator decides who is in, the state topic's transactional writers fence whoever is out
(persist/cluster.py).

Ownership is a **lease** (cluster/lease.py): every group request the coordinator answers as from
a member in good standing (Heartbeat, JoinGroup, SyncGroup answered NONE) renews it from the
request's send time; it lasts the session timeout less a safety margin. A sidecar whose lease
runs out — cut off from the backend, or its coordinator silent — drops everything it owns at
once, writing nothing, names no leader or coordinator for it (cluster/view.py), and takes its
assignment back only once a renewal comes: all before the coordinator can have dropped it and
given its partitions to others. Measured without it: a sidecar cut off from the backend served
its partitions for 12 s after the others had them (and, cut off for good, forever).

aiokafka implements the eager protocol (every member revokes at each rebalance); revocation
is ignored here and only the difference between what is held and the new assignment is acted
on, which with a sticky assignment is the cooperative behaviour: partitions that stay do not
pause. A partition that moves between two members of the same generation is a planned
handover: the old owner stops serving it, writes its in-flight delivery counts and a released
mark (persist/cluster.py), and the new owner waits for that mark (read by the state tail,
cluster/state_tail.py) before fencing it — at most a session timeout, after which the old owner's
lease has run out whatever happened to it. A partition whose holder left the group (crashed,
expired, stopped) is taken over at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from .assign import (
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
from .lease import Lease, safety_margin_ms
from .peers import PeerProbe
from .view import ClusterView
from ..backend.clients import BackendClients
from ..backend.health import drop_connections
from .state_tail import GroupConfigTail, OwnerMark

log = logging.getLogger("kshare.cluster")

ASSIGNOR_NAME = "kshare-sticky"
#: group requests whose NONE answer renews the lease (JoinGroup, Heartbeat, SyncGroup)
HEARTBEAT = 12
RENEWING = frozenset({11, HEARTBEAT, 14})


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

    def __init__(self, *, name: str, persister, view: ClusterView, clients: BackendClients,
                 session_timeout_ms: int, heartbeat_interval_ms: int, tail: GroupConfigTail | None = None,
                 clock=time.monotonic) -> None:
        self.name = name
        self.group_id = f"kshare-cluster-{name}"
        self.persister = persister
        self.view = view
        self.topic = persister.topic
        self.clients = clients
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.target: set[int] = set()
        self.assignments = 0
        self._changed = asyncio.Event()
        self._settled = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self.clock = clock
        self.margin_ms = safety_margin_ms(session_timeout_ms, heartbeat_interval_ms)
        self.lease = Lease(session_timeout_ms - self.margin_ms, clock)
        persister.lease = self.lease
        #: the state tail (handover marks, newer owners); set before start()
        self.tail = tail
        self._lease_changed = asyncio.Event()
        #: the target is this generation's assignment: false from a lapse until a Heartbeat answered
        #: NONE (same generation: still ours) or a new assignment (a JoinGroup alone proves neither)
        self._confirmed = False
        persister.released_listeners.append(self._released)
        #: called when the lease lapses and when a renewal ends the lapse (app.py: the backend
        #: reader fails fast while lapsed)
        self.on_lapse: list = []
        self.on_renew: list = []
        #: while lapsed, which peers can be reached: the only ones clients are sent to (cluster/view.py)
        self.peers = PeerProbe(view)

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
        self._confirmed = True
        for p in [p for p, reason in self.persister.blocked.items() if reason == "acquiring" and p not in self.target]:
            self.persister.abandon(p)
        self.assignments += 1
        log.info("cluster %s: this sidecar (node %d) is assigned state partitions %s", self.name,
                 self.view.node_id, sorted(self.target))
        self._settled.clear()
        self._changed.set()

    # -- the lease ---------------------------------------------------------------------------
    def _watch_requests(self, coordinator) -> None:
        """Renew the lease from the coordinator's answers: wraps aiokafka's one entry for group
        requests (``GroupCoordinator._send_req``, used by the heartbeat task and the join/sync
        steps alike; aiokafka 0.14)."""
        send = coordinator._send_req

        async def send_req(request):
            sent = self.clock()
            response = await send(request)
            key = getattr(request, "API_KEY", None)
            if key in RENEWING and getattr(response, "error_code", None) == 0:
                self.renewed(sent, same_generation=key == HEARTBEAT)
            return response

        coordinator._send_req = send_req

    def renewed(self, sent_at: float, same_generation: bool = True) -> None:
        """A renewal; ``same_generation`` (a Heartbeat's): the assignment held is still ours."""
        if self.lease.renew(sent_at) and self.view.lapsed:
            log.warning("cluster %s: lease renewed; %s", self.name,
                        f"taking the assignment {sorted(self.target)} back" if same_generation
                        else "waiting for the group's new assignment")
            for resume in self.on_renew:
                resume()
        if same_generation and not self.lease.lapsed and not self._confirmed:
            self._confirmed = True
            self._changed.set()
        if not self.lease.lapsed:
            if self.view.lapsed:
                self.peers.stop()
            self.view.lapsed = False
        self._lease_changed.set()

    async def _watch_lease(self) -> None:
        """Stop serving when the lease runs out (the persister also checks it on every use)."""
        while True:
            self._lease_changed.clear()
            if self.lease.check():
                self._lapse()
            remaining = self.lease.remaining_s()
            try:
                await asyncio.wait_for(self._lease_changed.wait(), remaining if remaining > 0 else None)
            except TimeoutError:
                pass

    def _lapse(self) -> None:
        silent = self.clock() - self.lease.renewed_at
        self.view.lapsed = True
        self.peers.start()
        self._confirmed = False
        self._settled.clear()
        dropped = self.persister.drop_all(f"cluster {self.name}: lease lapsed (no answer from the group coordinator "
                                          f"for {silent:.1f} s; session timeout {self.session_timeout_ms} ms, "
                                          f"safety margin {self.margin_ms} ms)")
        log.error("cluster %s: node %d stopped serving state partitions %s: it cannot know whether the group gave "
                  "them away; they are taken back once the group coordinator answers", self.name, self.view.node_id,
                  dropped)
        # Stalled connections to the backend: requests on them fail now rather than at their
        # timeout, and a healed link is used at once rather than at TCP's next retransmission.
        clients = [getattr(self._consumer, "_client", None), getattr(getattr(self.tail, "_consumer", None), "_client", None)]
        closed = sum(drop_connections(c) for c in clients)
        for drop in [self.persister.drop_connections, *self.on_lapse]:
            if drop is not None:
                try:
                    closed += drop()
                except Exception:  # noqa: BLE001 - best effort
                    log.exception("cluster %s: dropping backend connections failed", self.name)
        log.info("cluster %s: %d backend connections closed", self.name, closed)

    def _released(self, p: int, _keys) -> None:
        """A partition still assigned to us was lost (fenced, or a newer owner read from the state
        topic): take it back once whoever took it lets go (``_take_over`` waits) — never leave a
        partition with no one serving it."""
        if p in self.target and self._confirmed and not self._stopping and not self.lease.lapsed:
            log.warning("cluster %s: state partition %d, still assigned to node %d, was lost; taking it back",
                        self.name, p, self.view.node_id)
            self._changed.set()

    def _newer_owner(self, p: int, mark: OwnerMark) -> None:
        """The state tail read an owner record: a newer owner of a partition we serve wins now."""
        epoch, node, _released = mark
        ours = self.persister.epoch_of(p) if p in self.persister.owned else None
        if ours is not None and epoch > ours and node != self.view.node_id:
            self.persister.lose(p, epoch)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, wait_s: float) -> None:
        """Join; wait (up to ``wait_s``) until the first assignment is taken over."""
        self._consumer = self.clients.consumer(
            group_id=self.group_id, enable_auto_commit=False,
            client_id=f"kshare-cluster-{self.view.node_id}", session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms, rebalance_timeout_ms=self.session_timeout_ms,
            max_poll_interval_ms=2**31 - 1, partition_assignment_strategy=(StickyOwnerAssignor(self),))
        await self._consumer.start()
        self._watch_requests(self._consumer._coordinator)
        if self.tail is not None:
            self.tail.on_owner = self._newer_owner
        self._consumer.subscribe([self.topic], listener=self)
        self._tasks = [asyncio.create_task(self._poll(), name="kshare-cluster-poll"),
                       asyncio.create_task(self._reconcile(), name="kshare-cluster-reconcile"),
                       asyncio.create_task(self._watch_lease(), name="kshare-cluster-lease")]
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
        """Release what is no longer assigned, then take over what is newly assigned (while the
        lease holds: a lapsed sidecar takes nothing until it is renewed)."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            if self.lease.lapsed or not self._confirmed:
                continue  # renewed() or the next assignment wakes this again
            target = set(self.target)
            held = set(self.persister.owned) | {p for p, r in self.persister.blocked.items() if r == "acquiring"}
            gone, new = held - target, target - set(self.persister.owned)
            if gone:
                await asyncio.gather(*(self.persister.release(p) for p in sorted(gone)))
            if new:
                started = self.clock()
                results = await asyncio.gather(*(self._take_over(p) for p in sorted(new)),
                                               return_exceptions=True)
                failed = [p for p, r in zip(sorted(new), results) if isinstance(r, BaseException)]
                for p, r in zip(sorted(new), results):
                    if isinstance(r, BaseException):
                        log.warning("cluster %s: taking state partition %d over failed: %r; retrying", self.name,
                                    p, r)
                log.info("cluster %s: took over state partitions %s in %.2f s", self.name,
                         sorted(set(new) - set(failed)), self.clock() - started)
                if failed:
                    await asyncio.sleep(0.5)
                    self._changed.set()
                    continue
            if not self._changed.is_set():
                self._settled.set()

    async def _take_over(self, p: int) -> int:
        """A planned move (its holder is a member of this generation): wait for the holder's
        handover mark first — at most a session timeout, by when the holder's lease has run out
        whatever became of it."""
        holder = self._holder(p)
        if holder is not None and self.tail is not None:
            node, epoch = holder
            started = self.clock()
            if await self.tail.wait_released(p, epoch, self.session_timeout_ms / 1000, holds=self._may_hold):
                log.info("cluster %s: state partition %d handed over by node %d (owner epoch %d) after %.2f s",
                         self.name, p, node, epoch, self.clock() - started)
            else:
                log.warning("cluster %s: no handover of state partition %d from node %d within %d ms; taking it "
                            "over without one", self.name, p, node, self.session_timeout_ms)
        if self.lease.lapsed or p not in self.target:
            raise RuntimeError(f"state partition {p}: lease lapsed or assignment changed before its takeover")
        return await self.persister.acquire(p)

    def _holder(self, p: int) -> tuple[int, int] | None:
        """Who of this generation's members holds ``p`` now (node, owner epoch): the newer of what
        its members claimed when they joined and the newest owner record read — a member that took
        ``p`` (back) after the claim holds it at the record's epoch — unless that record is released
        or names no member (a crashed or expelled holder has let go)."""
        claim = self.view.map.claims.get(p)
        mark = self.tail.owners.get(p) if self.tail is not None else None
        if mark is not None and (claim is None or mark[0] >= claim[1]):
            epoch, node, released = mark
            return (node, epoch) if node is not None and not released and self._may_hold(node) else None
        return claim if claim is not None and claim[0] != self.view.node_id else None

    def _may_hold(self, node: int | None) -> bool:
        """Whether ``node`` may hold a state partition we are taking over: another member of this
        generation (one the group dropped has no lease left)."""
        return node is not None and node != self.view.node_id and node in self.view.map.nodes

    def owned_and_ready(self) -> bool:
        """Readiness (docs/deployment.md): assigned, and everything assigned is taken over."""
        return self.assignments > 0 and self._settled.is_set()

    async def stop(self) -> None:
        """Give every partition up first (writes in flight finish), then leave the group, so the
        others take over at once instead of after the session timeout."""
        self._stopping = True
        self.peers.stop()
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


__all__ = ["ClusterMembership", "ClusterMap", "GroupConfigTail", "PeerConfigs", "StickyOwnerAssignor"]


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
