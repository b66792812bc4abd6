"""Ownership as a lease, and the planned handover (cluster/lease.py, cluster/membership.py,
persist/cluster.py, share/cache.py), with cluster-mode memory persisters on one MemoryLog:

* the lease runs from the send time of the newest request the group coordinator answered NONE
  (JoinGroup, Heartbeat, SyncGroup — not a Heartbeat answered REBALANCE_IN_PROGRESS), for the
  session timeout less the margin; past it nothing is served or claimed, and a renewal takes the
  assignment back;
* a planned release writes the records in flight as AVAILABLE with their delivery attempt counted
  (at the limit: ARCHIVED), then an owner record marked released, which the next owner waits for.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.cluster.assign import ClusterMap
from kshare_sidecar.cluster.lease import Lease, safety_margin_ms
from kshare_sidecar.cluster.view import ClusterView
from kshare_sidecar.config import load_config
from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.persist import MemoryLog, MemoryPersister, PartitionState, SharePartitionKey, codec
from kshare_sidecar.persist.errors import CommitOutcomeUnknownError
from kshare_sidecar.persist.codec import KIND_OWNER
from kshare_sidecar.persist.ownership import share_partition_home
from kshare_sidecar.backend.clients import BackendClients
from kshare_sidecar.cluster.membership import ClusterMembership
from kshare_sidecar.share.cache import PartitionError, SharePartitionCache
from kshare_sidecar.cluster.state_tail import GroupConfigTail

PARTS = 4
T = TopicInfo("t", uuid.UUID(int=7), 2)
HOME = share_partition_home(str(T.topic_id), 0, PARTS)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------------------------- the lease
def test_a_lease_runs_from_the_newest_send_time_and_lapses_once():
    clock = Clock()
    lease = Lease(8000, clock)
    assert lease.lapsed and not lease.valid()  # never renewed: nothing may be served
    assert lease.renew(clock.now) is True  # the first renewal ends the initial lapse
    clock.now += 7.9
    assert lease.valid() and not lease.check()
    assert lease.renew(clock.now - 5) is False and lease.renewed_at == 1000.0 + 2.9  # later send, later end
    assert lease.renew(1000.0) is False and lease.renewed_at == 1002.9  # an older answer changes nothing
    clock.now = 1002.9 + 8.0
    assert not lease.valid() and lease.lapsed
    assert lease.check() is True and lease.check() is False  # the holder acts once per lapse
    assert lease.lapses == 1
    assert lease.renew(clock.now - 10) is False and lease.lapsed  # an answer to a request sent too long ago
    assert lease.renew(clock.now - 1) is True and not lease.lapsed  # a fresh one takes it back


def test_the_safety_margin_is_a_fifth_of_the_session_at_least_two_heartbeats_at_most_half():
    assert safety_margin_ms(10_000, 1000) == 2000
    assert safety_margin_ms(45_000, 3000) == 9000
    assert safety_margin_ms(6000, 1000) == 2000
    assert safety_margin_ms(2000, 1000) == 1000  # never more than half the session
    with pytest.raises(ValueError):
        Lease(0, Clock())


# ------------------------------------------------------------------------------------ the pieces
class FakeBackend:
    async def describe_topics(self, names=None):
        return {n: T for n in (names or ["t"]) if n == "t"}

    def topic_by_id(self, topic_id):
        return T if topic_id == T.topic_id else None

    async def resolve_topic_id(self, topic_id):
        return T if topic_id == T.topic_id else None

    async def list_offsets(self, topic, partition, spec, isolation_level=0):
        return 0


class Sidecar:
    def __init__(self, log: MemoryLog, node: int, clock: Clock, limit: int = 5) -> None:
        self.cfg = load_config(env={}, overrides={"bootstrap.servers": "x:1", "persister": "memory",
                                                  "group.share.delivery.count.limit": str(limit)})
        self.persister = MemoryPersister(log=log)
        self.persister.enable_cluster(node)
        self.partitions = SharePartitionCache(persister=self.persister, backend=FakeBackend(), clock=lambda: 0,
                                                group_config=lambda g: self.cfg.group_config(None))
        self.view = ClusterView(node, {"PLAINTEXT": ("127.0.0.1", 9000 + node)}, PARTS)
        self.membership = ClusterMembership(name="c", persister=self.persister, view=self.view,
                                            clients=BackendClients("x:1"), session_timeout_ms=10_000,
                                            heartbeat_interval_ms=1000, clock=clock)
        self.partitions.lease = self.membership.lease


@pytest.fixture
async def pair():
    log, clock = MemoryLog(PARTS), Clock()
    a, b = Sidecar(log, 1, clock), Sidecar(log, 2, clock)
    await a.persister.start()
    await b.persister.start()
    yield a, b, log, clock
    await a.persister.close()
    await b.persister.close()


class FakeCoordinator:
    """aiokafka's GroupCoordinator as the lease sees it: one ``_send_req``."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.answers: list[tuple[float, int]] = []  # (seconds the request takes, error code)

    async def _send_req(self, request):
        took, code = self.answers.pop(0)
        self.clock.now += took
        return type("Response", (), {"error_code": code})()


def request(api_key: int):
    return type("Request", (), {"API_KEY": api_key})()


def acquire(slot, member: str, first: int, last: int) -> None:
    slot.partition.acquire(member, [(first, last, -1, False, False)], 1000)


def owner_marks(log: MemoryLog, p: int) -> list[tuple[int, int | None, bool]]:
    return [codec.decode_owner_mark(v) for k, v in log.partitions[p]
            if v is not None and codec.decode_key(k)[0] == KIND_OWNER]


# ------------------------------------------------------------------------------- renewal, lapse
async def test_only_answers_of_a_member_in_good_standing_renew(pair):
    a, _b, _log, clock = pair
    coord = FakeCoordinator(clock)
    a.membership._watch_requests(coord)
    send = coord._send_req
    coord.answers = [(0.5, 27)]  # REBALANCE_IN_PROGRESS: the rebalance may drop us, counted from before
    await send(request(12))
    assert a.membership.lease.renewals == 0
    coord.answers = [(0.5, 0), (4.0, 0), (0.1, 0), (0.1, 25)]
    await send(request(3))  # Metadata: not a group request
    assert a.membership.lease.renewals == 0
    await send(request(11))  # JoinGroup answered after 4 s: renewed from its send time
    assert a.membership.lease.renewed_at == 1000.5 + 0.5
    await send(request(14))
    assert a.membership.lease.renewed_at == 1000.5 + 0.5 + 4.0
    await send(request(12))  # UNKNOWN_MEMBER_ID
    assert a.membership.lease.renewals == 2


async def test_a_lapsed_sidecar_serves_and_claims_nothing_until_renewed(pair):
    a, _b, _log, clock = pair
    m = a.membership
    m.renewed(clock.now)
    a.view.update(ClusterMap(1, {1: a.view.endpoints, 2: {"PLAINTEXT": ("127.0.0.1", 9002)}},
                             {HOME: 1, (HOME + 1) % PARTS: 2}))
    await a.persister.acquire(HOME)
    m.target = {HOME}
    slot = await a.partitions.get("g", T.topic_id, 0, "t")
    acquire(slot, "m1", 0, 9)
    assert a.partitions.serving and a.view.leader(str(T.topic_id), 0) == 1

    clock.now += 8.0  # session 10 s less the 2 s margin: the coordinator cannot have dropped us yet
    assert not a.partitions.serving and not a.persister.owns(HOME)  # checked on every use, timer or not
    assert a.partitions.serving_slot("g", T.topic_id, 0) is None
    assert m.lease.check()
    m._lapse()
    assert slot.dead and a.partitions.loaded("g", T.topic_id, 0) is None and not a.persister.owned
    assert a.view.leader(str(T.topic_id), 0) == 2  # no longer naming itself: the other sidecar
    assert a.view.owner((HOME + 1) % PARTS) == 2  # what others own is still named
    with pytest.raises(PartitionError) as err:
        await a.partitions.get("g", T.topic_id, 0, "t")
    assert err.value.code == ErrorCode.not_leader_or_follower
    assert owner_marks(_log, HOME)[-1][2] is False  # nothing written: no handover without the backend

    m._changed.clear()
    m.renewed(clock.now - 0.5)
    assert not a.view.lapsed and m._changed.is_set()  # the reconcile takes the assignment back
    assert a.view.leader(str(T.topic_id), 0) == 1


# ----------------------------------------------------------------------------------- handovers
async def test_a_planned_release_writes_the_delivery_counts_and_a_released_mark(pair):
    a, b, log, clock = pair
    for s in (a, b):
        s.membership.renewed(clock.now)
    epoch = await a.persister.acquire(HOME)
    slot = await a.partitions.get("g", T.topic_id, 0, "t")
    acquire(slot, "m1", 0, 9)
    acquire(slot, "m2", 10, 14)
    await a.persister.release(HOME)
    assert a.partitions.handed_over == 15 and a.persister.handovers == 1
    assert owner_marks(log, HOME)[-1] == (epoch, 1, True)

    b_epoch = await b.persister.acquire(HOME)
    assert b_epoch == epoch + 1 and owner_marks(log, HOME)[-1] == (b_epoch, 2, False)
    moved = await b.partitions.get("g", T.topic_id, 0, "t")
    got = moved.partition.acquire("m3", [(0, 14, -1, False, False)], 1000)
    assert {(r.first_offset, r.last_offset, r.delivery_count) for r in got} == {(0, 14, 2)}  # counted up


async def test_handovers_take_a_poison_record_to_its_delivery_limit(pair):
    a, b, _log, clock = pair
    for s in (a, b):
        s.membership.renewed(clock.now)
    owners = [a, b]
    for attempt in range(1, 6):  # delivery.count.limit 5: every rebalance costs the record one attempt
        s = owners[attempt % 2]
        await s.persister.acquire(HOME)
        slot = await s.partitions.get("g", T.topic_id, 0, "t")
        got = slot.partition.acquire("m", [(0, 0, -1, False, False)], 1)
        assert [(r.first_offset, r.delivery_count) for r in got] == [(0, attempt)]
        await s.persister.release(HOME)
    await a.persister.acquire(HOME)
    slot = await a.partitions.get("g", T.topic_id, 0, "t")
    assert slot.partition.acquire("m", [(0, 0, -1, False, False)], 1) == []
    assert slot.partition.spso == 1  # archived at the limit: the window moved past it


async def test_a_handover_that_cannot_be_written_still_lets_go(pair):
    a, b, log, clock = pair
    for s in (a, b):
        s.membership.renewed(clock.now)
    await a.persister.acquire(HOME)
    slot = await a.partitions.get("g", T.topic_id, 0, "t")
    acquire(slot, "m1", 0, 4)
    log.fail_next_commit(HOME, landed=False)  # the backend fails the share-partition's handover write
    await a.persister.release(HOME)
    assert not a.persister.owns(HOME) and slot.dead and a.partitions.handed_over == 0
    # the tenure still ends with the mark (the next owner need not wait), and the next owner
    # delivers with the counts last written, as after a crash
    assert owner_marks(log, HOME)[-1][2] is True
    await b.persister.acquire(HOME)
    moved = await b.partitions.get("g", T.topic_id, 0, "t")
    got = moved.partition.acquire("m3", [(0, 4, -1, False, False)], 1000)
    assert {(r.first_offset, r.last_offset, r.delivery_count) for r in got} == {(0, 4, 1)}

    await b.persister.release(HOME)  # and with no backend at all, the release lets go without a mark
    await a.persister.acquire(HOME)
    log.open_writer(HOME)
    log.fail_next_commit(HOME, landed=False)
    a.persister.blocked[HOME] = "unknown"  # a commit whose outcome is being re-read
    await a.persister.release(HOME)
    assert not a.persister.owns(HOME) and owner_marks(log, HOME)[-1][2] is False


async def test_the_next_owner_waits_for_the_mark_and_no_longer_than_a_session(pair):
    tail = GroupConfigTail(clients=BackendClients("x:1"), topic="s", partitions=PARTS)
    assert await tail.wait_released(HOME, 3, 0.05) is False  # nothing read yet
    waiter = asyncio.create_task(tail.wait_released(HOME, 3, 5))
    await asyncio.sleep(0)
    tail._read(HOME, codec.owner_key(HOME), codec.encode_owner(3, 1))  # the takeover record: not yet
    await asyncio.sleep(0.01)
    assert not waiter.done()
    tail._read(HOME, codec.owner_key(HOME), codec.encode_owner(3, 1, released=True))
    assert await asyncio.wait_for(waiter, 1) is True
    tail._read(HOME, codec.owner_key(HOME), codec.encode_owner(5, 2))  # a later owner also ends the wait
    assert await tail.wait_released(HOME, 4, 0.01) is True


async def test_a_newer_owner_read_from_the_state_topic_drops_the_partition_at_once(pair):
    a, _b, _log, clock = pair
    a.membership.renewed(clock.now)
    epoch = await a.persister.acquire(HOME)
    tail = GroupConfigTail(clients=BackendClients("x:1"), topic="s", partitions=PARTS)
    tail.on_owner = a.membership._newer_owner
    tail._read(HOME, codec.owner_key(HOME), codec.encode_owner(epoch, 1))  # our own record
    assert a.persister.owns(HOME)
    tail._read(HOME, codec.owner_key(HOME), codec.encode_owner(epoch + 1, 2))
    assert not a.persister.owns(HOME)


def test_codec_owner_marks_are_read_by_older_readers_as_the_epoch():
    raw = codec.encode_owner(9, 3, released=True)
    assert codec.decode_owner(raw) == 9 and codec.decode_owner_mark(raw) == (9, 3, True)
    assert codec.decode_owner_mark(codec.encode_owner(4)) == (4, None, False)
    assert SharePartitionKey("g", "t", 0)  # keys unchanged


async def test_only_a_heartbeat_takes_the_old_assignment_back_after_a_lapse(pair):
    a, _b, _log, clock = pair
    m = a.membership
    m.renewed(clock.now)
    m.target, m._confirmed = {HOME}, True
    clock.now += 8.0
    assert m.lease.check()
    m._lapse()
    assert not m._confirmed
    m._changed.clear()
    m.renewed(clock.now - 0.5, same_generation=False)  # a JoinGroup: a new generation, assignment unknown
    assert not a.view.lapsed and not m._changed.is_set() and not m._confirmed
    m.renewed(clock.now - 0.2, same_generation=True)  # a Heartbeat of the same generation: still ours
    assert m._confirmed and m._changed.is_set()


async def test_a_partition_lost_while_assigned_is_taken_back_after_its_holder_lets_go(pair):
    a, _b, _log, clock = pair
    m = a.membership
    m.renewed(clock.now)
    m.target, m._confirmed = {HOME}, True
    a.view.update(ClusterMap(2, {1: a.view.endpoints, 2: {"PLAINTEXT": ("127.0.0.1", 9002)}}, {HOME: 1}))
    epoch = await a.persister.acquire(HOME)
    m._changed.clear()
    a.persister.lose(HOME, epoch + 1)  # fenced by a sidecar that took it on a stale assignment
    assert m._changed.is_set()  # the reconcile takes it back ...
    m.tail = GroupConfigTail(clients=BackendClients("x:1"), topic="s", partitions=PARTS)
    m.tail._read(HOME, codec.owner_key(HOME), codec.encode_owner(epoch + 1, 2))
    assert m._holder(HOME) == (2, epoch + 1)  # ... once node 2, a member, has let go
    m.tail._read(HOME, codec.owner_key(HOME), codec.encode_owner(epoch + 1, 2, released=True))
    assert m._holder(HOME) is None
    m.tail._read(HOME, codec.owner_key(HOME), codec.encode_owner(epoch + 2, 7))  # not a member: crashed
    assert m._holder(HOME) is None


async def test_a_lapse_answers_the_write_in_flight_at_once(pair):
    a, _b, log, clock = pair
    a.membership.renewed(clock.now)
    epoch = await a.persister.acquire(HOME)
    key = SharePartitionKey("g", str(T.topic_id), 0)
    await a.persister.initialize(key, 0, 0)
    gate = asyncio.Event()
    commit = a.persister.store.commit

    async def stuck(p, records):  # the backend is cut off: the commit hangs
        await gate.wait()
        await commit(p, records)

    a.persister.store.commit = stuck  # type: ignore[method-assign]
    write = asyncio.create_task(a.persister.write(key, PartitionState(0, epoch, 5), epoch))
    await asyncio.sleep(0.05)
    a.persister.drop_all("the lease lapsed")
    with pytest.raises(CommitOutcomeUnknownError):
        await asyncio.wait_for(write, 1)
    gate.set()


def test_a_suspended_backend_fails_at_once_and_closes_its_connections():
    from kshare_sidecar.backend.backend import Backend
    from kshare_sidecar.backend.errors import BackendUnavailableError

    class Conn:
        closed = 0

        def close(self):
            Conn.closed += 1

    backend = Backend("x:1")
    backend._client = type("Client", (), {"_conns": {(1, 0): Conn(), (2, 0): Conn()}})()
    assert backend.suspend("the lease lapsed") == 2 and Conn.closed == 2
    with pytest.raises(BackendUnavailableError, match="the lease lapsed"):
        backend._require_client()
    backend.resume()
    assert backend._require_client() is backend._client


async def test_suspending_the_backend_fails_a_request_stuck_connecting():
    from kshare_sidecar.backend.health import Suspension

    suspension = Suspension()
    stuck = asyncio.create_task(suspension.abortable(asyncio.sleep(3600)))  # a SYN nobody answers
    await asyncio.sleep(0)
    assert suspension.suspend("the lease lapsed", None) == 0
    with pytest.raises(ConnectionAbortedError, match="the lease lapsed"):
        await asyncio.wait_for(stuck, 1)
    suspension.resume()
    assert await suspension.abortable(asyncio.sleep(0, "answered")) == "answered"
    outer = asyncio.create_task(suspension.abortable(asyncio.sleep(3600)))
    await asyncio.sleep(0)
    outer.cancel()  # the caller's own cancellation stays a cancellation
    with pytest.raises(asyncio.CancelledError):
        await outer
