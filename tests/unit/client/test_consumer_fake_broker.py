"""The asyncio layer of kshare_sidecar.client against a scripted in-memory broker (no sockets):
rejoin after fencing, coordinator moves, session resets, piggybacked ack errors, leader moves."""

from __future__ import annotations

import asyncio
import datetime
import struct
import uuid

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import response as fc
from kio.schema.metadata.v12 import response as md
from kio.schema.share_acknowledge.v1 import response as sa
from kio.schema.share_fetch.v1 import response as sf
from kio.schema.share_fetch.v1 import request as sf_req
from kio.schema.share_fetch.v2 import request as sf_req2
from kio.schema.share_group_heartbeat.v1 import response as hb
from kio.serial import entity_reader

from kshare_sidecar.client import AcknowledgementError, AcknowledgeType, ShareConsumer
from kshare_sidecar.client import cluster as cluster_mod
from kshare_sidecar.client import protocol

T = uuid.uuid4()
_ms = datetime.timedelta(milliseconds=1)


def _batch(base: int, n: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1000 + i, key=None, value=f"v{base + i}".encode(), headers=[])
    raw = bytearray(b.build())
    raw[0:8] = struct.pack(">q", base)
    return bytes(raw)


class FakeConn:
    def __init__(self, broker: FakeBroker, node_id: int, host: str, port: int) -> None:
        self.broker, self.node_id, self.host, self.port = broker, node_id, host, port
        self.versions = {76: 1, 78: 1, 79: 1}
        self.generation = 1
        self.client_id = "fake"

    async def ensure(self) -> None:
        pass

    async def call(self, request, *, timeout_s=None):
        await asyncio.sleep(0)
        request = _entity(request)
        name = type(request).__name__
        self.broker.log.append((self.port, name, request))
        return getattr(self.broker, name)(self.port, request)

    async def close(self) -> None:
        pass


def _entity(request):
    """A request the consumer wrote straight to the wire (ShareFetch), read back as kio's entity."""
    if not isinstance(request, protocol.WireRequest):
        return request
    version = struct.unpack_from(">h", request.payload, 2)[0]
    cls = {1: sf_req.ShareFetchRequest, 2: sf_req2.ShareFetchRequest}[version]
    _, offset = entity_reader(cls.__header_schema__)(request.payload, 0)
    return entity_reader(cls)(request.payload, offset)[0]


class FakeBroker:
    """Nodes 1 and 2 (port = node id); topic "t" with one partition led by ``leader``."""

    def __init__(self) -> None:
        self.log: list = []
        self.leader = 1
        self.coordinator_errors: list[ErrorCode] = []
        self.heartbeat_errors: list[ErrorCode] = []
        self.fetch_errors: list[ErrorCode] = []
        self.ack_error_codes: list[int] = []
        self.given = False
        self.epoch = 0

    def requests(self, name: str) -> list:
        return [r for _, n, r in self.log if n == name]

    def MetadataRequest(self, port, req):
        return md.MetadataResponse(
            throttle_time=_ms * 0, brokers=tuple(md.MetadataResponseBroker(node_id=n, host="fake", port=n)
                                                 for n in (1, 2)),
            cluster_id="c", controller_id=1, topics=(md.MetadataResponseTopic(
                error_code=ErrorCode.none, name="t", topic_id=T, partitions=(md.MetadataResponsePartition(
                    error_code=ErrorCode.none, partition_index=0, leader_id=self.leader, replica_nodes=(),
                    isr_nodes=(), offline_replicas=()),), topic_authorized_operations=0),))

    def FindCoordinatorRequest(self, port, req):
        return fc.FindCoordinatorResponse(throttle_time=_ms * 0, error_code=ErrorCode.none, error_message=None,
                                          node_id=1, host="fake", port=1)

    def ShareGroupHeartbeatRequest(self, port, req):
        error = self.heartbeat_errors.pop(0) if self.heartbeat_errors else ErrorCode.none
        if error != ErrorCode.none:
            return hb.ShareGroupHeartbeatResponse(throttle_time=_ms * 0, error_code=error, member_epoch=-1,
                                                  heartbeat_interval=_ms * 0)
        joining = req.member_epoch == 0
        if joining:
            self.epoch += 1
        return hb.ShareGroupHeartbeatResponse(
            throttle_time=_ms * 0, error_code=ErrorCode.none, member_id=req.member_id, member_epoch=self.epoch,
            heartbeat_interval=_ms * 30, assignment=hb.Assignment(topic_partitions=(
                hb.TopicPartitions(topic_id=T, partitions=(0,)),)) if joining else None)

    def _part(self, **kw):
        base = {"partition_index": 0, "error_code": ErrorCode.none, "acknowledge_error_code": 0,
                    "current_leader": sf.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1), "records": b"",
                    "acquired_records": ()}
        base.update(kw)
        return sf.PartitionData(**base)

    def ShareFetchRequest(self, port, req):
        error = self.fetch_errors.pop(0) if self.fetch_errors else ErrorCode.none
        empty = sf.ShareFetchResponse(throttle_time=_ms * 0, error_code=error, acquisition_lock_timeout=_ms * 30000,
                                      responses=(), node_endpoints=())
        if error != ErrorCode.none:
            return empty
        if port != self.leader:
            return sf.ShareFetchResponse(
                throttle_time=_ms * 0, error_code=ErrorCode.none, acquisition_lock_timeout=_ms * 30000,
                responses=(sf.ShareFetchableTopicResponse(topic_id=T, partitions=(self._part(
                    error_code=ErrorCode.not_leader_or_follower,
                    current_leader=sf.LeaderIdAndEpoch(leader_id=self.leader, leader_epoch=1)),)),),
                node_endpoints=(sf.NodeEndpoint(node_id=self.leader, host="fake", port=self.leader),))
        acked = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
        kw = {}
        if acked:
            kw["acknowledge_error_code"] = self.ack_error_codes.pop(0) if self.ack_error_codes else 0
        if not self.given:
            self.given = True
            kw.update(records=_batch(0, 3), acquired_records=(sf.AcquiredRecords(first_offset=0, last_offset=2,
                                                                                 delivery_count=1),))
        parts = (self._part(**kw),) if kw else ()
        return sf.ShareFetchResponse(throttle_time=_ms * 0, error_code=ErrorCode.none,
                                     acquisition_lock_timeout=_ms * 30000,
                                     responses=(sf.ShareFetchableTopicResponse(topic_id=T, partitions=parts),)
                                     if parts else (), node_endpoints=())

    def ShareAcknowledgeRequest(self, port, req):
        return sa.ShareAcknowledgeResponse(throttle_time=_ms * 0, error_code=ErrorCode.none, responses=tuple(
            sa.ShareAcknowledgeTopicResponse(topic_id=t.topic_id, partitions=tuple(sa.PartitionData(
                partition_index=p.partition_index, error_code=ErrorCode.none,
                current_leader=sa.LeaderIdAndEpoch(leader_id=1, leader_epoch=1)) for p in t.partitions))
            for t in req.topics), node_endpoints=())


@pytest.fixture
def broker(monkeypatch):
    b = FakeBroker()
    monkeypatch.setattr(cluster_mod, "NodeConn", lambda node, host, port, *a, **kw: FakeConn(b, node, host, port))
    return b


def _consumer(**kw):
    return ShareConsumer("t", bootstrap_servers="fake:1", group_id="g", acknowledgement_mode="explicit",
                         retry_backoff_ms=5, **kw)


async def _until(pred, timeout=3.0):
    for _ in range(int(timeout / 0.01)):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


async def test_fenced_member_rejoins_with_epoch_0_and_the_same_member_id(broker):
    async with _consumer() as c:
        await _until(lambda: c.assignment())
        broker.heartbeat_errors = [ErrorCode.fenced_member_epoch]
        await _until(lambda: broker.epoch == 2)
        hbs = broker.requests("ShareGroupHeartbeatRequest")
        assert {r.member_id for r in hbs} == {c.member_id}
        assert [r.member_epoch for r in hbs][:1] == [0]
        fenced_at = next(i for i, r in enumerate(hbs) if i > 0 and r.member_epoch == 0)
        assert hbs[fenced_at].subscribed_topic_names == ("t",)  # a rejoin is a full request
    assert broker.requests("ShareGroupHeartbeatRequest")[-1].member_epoch == -1  # left at close


async def test_coordinator_errors_look_the_coordinator_up_again(broker):
    broker.heartbeat_errors = [ErrorCode.not_coordinator, ErrorCode.coordinator_not_available]
    async with _consumer() as c:
        await _until(lambda: c.assignment())
        assert len(broker.requests("FindCoordinatorRequest")) == 3


async def test_session_not_found_resets_the_epoch_and_fails_pending_acks(broker):
    async with _consumer() as c:
        got = [r for recs in (await c.getmany(timeout_ms=2000)).values() for r in recs]
        assert [r.offset for r in got] == [0, 1, 2]
        c.acknowledge(got[0], AcknowledgeType.ACCEPT)
        broker.fetch_errors = [ErrorCode.share_session_not_found]
        await c.getmany(timeout_ms=50)
        await c.getmany(timeout_ms=50)
        epochs = [r.share_session_epoch for r in broker.requests("ShareFetchRequest")]
        assert epochs[:3] == [0, 1, 0], epochs
        reopened = broker.requests("ShareFetchRequest")[2]
        assert [p.acknowledgement_batches for t in reopened.topics for p in t.partitions] == [()]
        results = await c.commit()
        [error] = results.values()
        assert isinstance(error, AcknowledgementError) and error.code == ErrorCode.share_session_not_found
        # released with the session, after it was handed out: taken, and failed by the next
        # commit (as Kafka's clients: a record of the last poll stays acknowledgeable)
        c.acknowledge(got[1])
        [error] = (await c.commit()).values()
        assert isinstance(error, AcknowledgementError) and error.code == ErrorCode.share_session_not_found


async def test_piggybacked_ack_error_is_reported_by_commit(broker):
    broker.ack_error_codes = [int(ErrorCode.invalid_record_state)]
    async with _consumer() as c:
        got = [r for recs in (await c.getmany(timeout_ms=2000)).values() for r in recs]
        for r in got:
            c.acknowledge(r, AcknowledgeType.RELEASE if r.offset == 1 else AcknowledgeType.ACCEPT)
        await c.getmany(timeout_ms=50)
        second = broker.requests("ShareFetchRequest")[1]
        [batch] = second.topics[0].partitions[0].acknowledgement_batches
        assert (batch.first_offset, batch.last_offset, tuple(batch.acknowledge_types)) == (0, 2, (1, 2, 1))
        [error] = (await c.commit()).values()
        assert isinstance(error, AcknowledgementError) and error.code == ErrorCode.invalid_record_state
        assert "INVALID_RECORD_STATE" in str(error)


async def test_not_leader_moves_fetching_to_the_new_leader(broker):
    async with _consumer() as c:
        await _until(lambda: c.assignment())
        broker.leader = 2  # Metadata told the consumer node 1; node 1 now answers NOT_LEADER
        got = []
        for _ in range(5):
            got += [r for recs in (await c.getmany(timeout_ms=100)).values() for r in recs]
            if got:
                break
        assert [r.offset for r in got] == [0, 1, 2]
        ports = [p for p, n, _ in broker.log if n == "ShareFetchRequest"]
        assert ports[0] == 1 and ports[-1] == 2


async def test_close_sends_final_epoch_and_implicit_accepts(broker):
    c = ShareConsumer("t", bootstrap_servers="fake:1", group_id="g", retry_backoff_ms=5)
    await c.start()
    got = [r for recs in (await c.getmany(timeout_ms=2000)).values() for r in recs]
    assert len(got) == 3
    await c.close()
    [final] = broker.requests("ShareAcknowledgeRequest")
    assert final.share_session_epoch == -1
    [batch] = final.topics[0].partitions[0].acknowledgement_batches
    assert (batch.first_offset, batch.last_offset, tuple(batch.acknowledge_types)) == (0, 2, (1,))


async def test_async_for_break_does_not_accept_records_never_yielded(broker):
    c = ShareConsumer("t", bootstrap_servers="fake:1", group_id="g", retry_backoff_ms=5)
    await c.start()
    async for record in c:
        assert record.offset == 0
        break
    await c.close()
    [final] = broker.requests("ShareAcknowledgeRequest")
    [batch] = final.topics[0].partitions[0].acknowledgement_batches
    # only the record the loop saw is accepted; 1 and 2 are released by the final epoch
    assert (final.share_session_epoch, batch.first_offset, batch.last_offset, tuple(batch.acknowledge_types)) \
        == (-1, 0, 0, (1,))


async def test_unsubscribe_leaves_the_group(broker):
    async with _consumer() as c:
        await _until(lambda: c.assignment())
        c.unsubscribe()
        await _until(lambda: not c.assignment())
        assert broker.requests("ShareGroupHeartbeatRequest")[-1].member_epoch == -1
        c.subscribe(["t"])
        await _until(lambda: c.assignment())
        assert broker.requests("ShareGroupHeartbeatRequest")[-1].member_epoch in (0, 2)


def test_partitions_for_topic_from_held_metadata():
    import uuid

    from kshare_sidecar.client import ShareConsumer

    c = ShareConsumer("t", bootstrap_servers="127.0.0.1:1", group_id="g")
    assert c.partitions_for_topic("t") is None
    tid, other = uuid.uuid4(), uuid.uuid4()
    c._cluster.ids["t"] = tid
    c._cluster.leaders.update({(tid, 0): 1, (tid, 2): 1, (other, 5): 1})
    assert c.partitions_for_topic("t") == {0, 2}


class StreamingBroker(FakeBroker):
    """Three new records on every ShareFetch (offsets 0-2, 3-5, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.next = 0

    def ShareFetchRequest(self, port, req):
        first, self.next = self.next, self.next + 3
        part = self._part(records=_batch(first, 3), acquired_records=(sf.AcquiredRecords(
            first_offset=first, last_offset=first + 2, delivery_count=1),))
        return sf.ShareFetchResponse(throttle_time=_ms * 0, error_code=ErrorCode.none,
                                     acquisition_lock_timeout=_ms * 30000,
                                     responses=(sf.ShareFetchableTopicResponse(topic_id=T, partitions=(part,)),),
                                     node_endpoints=())


def _acked(request) -> list[tuple[int, int, tuple[int, ...]]]:
    return [(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
            for t in request.topics for p in t.partitions for b in p.acknowledgement_batches]


async def test_prefetch_sends_the_next_fetch_without_the_acks_of_the_batch_being_handled(monkeypatch):
    b = StreamingBroker()
    monkeypatch.setattr(cluster_mod, "NodeConn", lambda node, host, port, *a, **kw: FakeConn(b, node, host, port))
    c = ShareConsumer("t", bootstrap_servers="fake:1", group_id="g", retry_backoff_ms=5)
    await c.start()
    first = [r.offset for recs in (await c.getmany(timeout_ms=2000)).values() for r in recs]
    assert first == [0, 1, 2]
    await _until(lambda: len(b.requests("ShareFetchRequest")) == 2)  # sent while the application works
    assert _acked(b.requests("ShareFetchRequest")[1]) == []  # 0-2 are being handled: not accepted yet
    second = [r.offset for recs in (await c.getmany(timeout_ms=2000)).values() for r in recs]
    assert second == [3, 4, 5]  # the prefetched records, no round trip waited for
    await _until(lambda: len(b.requests("ShareFetchRequest")) == 3)
    assert _acked(b.requests("ShareFetchRequest")[2]) == [(0, 2, (1,))]  # accepted when asked again; 3-5 not
    await c.close()
    [final] = b.requests("ShareAcknowledgeRequest")
    # 3-5 were handed out and seen: accepted at close; 6-8 (fetched ahead, never handed out) are
    # released by the final epoch, not accepted
    assert final.share_session_epoch == -1 and _acked(final) == [(3, 5, (1,))]
    assert len(b.requests("ShareFetchRequest")) == 3  # one fetch ahead at most, none after close


class FullWindowBroker(StreamingBroker):
    """Hands out the next three records only once the previous three are acknowledged: the share-
    partition's window is full of the records being handled (a producer batch larger than
    share.partition.max.record.locks is acquired whole), so a fetch sent ahead finds nothing."""

    def ShareFetchRequest(self, port, req):
        if self.next and not _acked(req):
            return sf.ShareFetchResponse(throttle_time=_ms * 0, error_code=ErrorCode.none,
                                         acquisition_lock_timeout=_ms * 30000, responses=(
                                             sf.ShareFetchableTopicResponse(topic_id=T, partitions=(self._part(),)),),
                                         node_endpoints=())
        return super().ShareFetchRequest(port, req)


async def test_a_fetch_sent_ahead_that_finds_nothing_pauses_fetching_ahead(monkeypatch):
    from kshare_sidecar.client.consumer import PREFETCH_BACKOFF_POLLS

    b = FullWindowBroker()
    monkeypatch.setattr(cluster_mod, "NodeConn", lambda node, host, port, *a, **kw: FakeConn(b, node, host, port))
    c = ShareConsumer("t", bootstrap_servers="fake:1", group_id="g", retry_backoff_ms=5)
    await c.start()
    polls = PREFETCH_BACKOFF_POLLS + 3
    got = []
    for _ in range(polls):
        got += [r.offset for recs in (await c.getmany(timeout_ms=2000)).values() for r in recs]
        await asyncio.sleep(0.01)  # the application works: a fetch ahead goes out meanwhile
    assert got == list(range(3 * polls))  # every record, in order: nothing lost or repeated
    fetches = b.requests("ShareFetchRequest")
    empty = [f for f in fetches if not _acked(f) and f is not fetches[0]]
    # one empty fetch ahead, then the backoff's polls fetch only when asked, then one more try
    assert len(empty) == 2, [len(_acked(f)) for f in fetches]
    assert len(fetches) == polls + len(empty)
    await c.close()


async def test_without_prefetch_each_fetch_waits_for_getmany(monkeypatch):
    b = StreamingBroker()
    monkeypatch.setattr(cluster_mod, "NodeConn", lambda node, host, port, *a, **kw: FakeConn(b, node, host, port))
    c = ShareConsumer("t", bootstrap_servers="fake:1", group_id="g", retry_backoff_ms=5, prefetch=False)
    await c.start()
    await c.getmany(timeout_ms=2000)
    await asyncio.sleep(0.05)
    assert len(b.requests("ShareFetchRequest")) == 1
    await c.close()
