"""Pass-through pieces that need no broker: version clamping, Produce acks sniffing, sessionless
Fetch, and the dispatcher's guard that a malformed frame is never forwarded."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid

import pytest
from kio.schema.fetch.v12.request import FetchRequest as FetchV12
from kio.schema.produce.v3.request import ProduceRequest as ProduceV3
from kio.schema.produce.v9.request import ProduceRequest as ProduceV9
from kio.schema.produce.v13.request import ProduceRequest as ProduceV13

from kshare_sidecar.backend.clients import BackendClients
from kshare_sidecar.api import ApiRegistry, Dispatcher, NodeIdentity
from kshare_sidecar.passthrough import forwardable, kio_range
from kshare_sidecar.passthrough import produce
from kshare_sidecar.passthrough.forwarder import _sessionless
from kshare_sidecar.passthrough.routes import INTERNAL
from kshare_sidecar.wire import codec
from kshare_sidecar.wire.errors import MalformedFrame


def _payload(request, client_id="app") -> bytes:
    return codec.encode_request(request, 7, client_id)[4:]


@pytest.mark.parametrize("cls", [ProduceV3, ProduceV9, ProduceV13])
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("txn", [None, "txn-1"])
@pytest.mark.parametrize("client_id", [None, "", "a-client"])
def test_produce_acks_is_read_without_decoding_records(cls, acks, txn, client_id):
    request = cls(transactional_id=txn, acks=acks, timeout=datetime.timedelta(seconds=1), topic_data=())
    assert produce.acks(_payload(request, client_id), cls.__version__) == acks


def test_kio_range_clamps_to_what_kio_knows():
    lo, hi = kio_range(3, 0, 99)  # Metadata: kio knows up to some version < 99
    assert lo == 0 and 12 <= hi < 99
    assert kio_range(3, 0, 5) == (0, 5)
    assert kio_range(9999, 0, 3) is None


def test_forwardable_excludes_local_internal_and_clamps():
    backend = {0: (0, 11), 1: (4, 17), 3: (0, 12), 4: (0, 7), 24: (0, 5), 19: (2, 7), 78: (1, 1)}
    out = forwardable(backend, local={3, 78})
    assert 3 not in out and 78 not in out  # the sidecar's own APIs are never forwarded
    assert 4 not in out and 4 in INTERNAL  # LeaderAndIsr: broker-to-broker only
    assert out[24] == (0, 3)  # AddPartitionsToTxn v4+ is broker-to-broker
    assert out[19] == (2, 7)
    assert out[0][1] <= 11  # never above the backend (kio's oldest Produce is v3)


def test_sessionless_fetch_drops_the_session():
    decoded = codec.decode_request(_payload(_fetch_v12(session_id=42, session_epoch=3)))
    out = _sessionless(decoded.body)
    assert (out.session_id, out.session_epoch, out.forgotten_topics_data) == (0, -1, ())


def _fetch_v12(**kw):
    base = dict(replica_id=-1, max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=1 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, topics=(), forgotten_topics_data=(), rack_id="")
    names = {f.name for f in dataclasses.fields(FetchV12)}
    return FetchV12(**{k: v for k, v in {**base, **kw}.items() if k in names})


class _Recorder:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    async def __call__(self, conn, frame, release):
        self.frames.append(frame)
        return b"\x00\x00\x00\x04" + frame[4:8]


def _dispatcher(recorder: _Recorder) -> Dispatcher:
    registry = ApiRegistry()
    registry.register(1, 4, 12, recorder, raw=True)
    return Dispatcher(registry, NodeIdentity(node_id=1, host="127.0.0.1", port=9192))


def test_a_well_formed_frame_is_forwarded_as_it_came():
    recorder = _Recorder()
    frame = _payload(_fetch_v12())
    answer = asyncio.run(_dispatcher(recorder).handle(frame))
    assert recorder.frames == [frame]
    assert answer[4:8] == frame[4:8]


@pytest.mark.parametrize("cut", [12, 20, -3])
def test_a_truncated_frame_closes_the_connection_and_is_never_forwarded(cut):
    recorder = _Recorder()
    frame = _payload(_fetch_v12())[:cut]
    with pytest.raises(MalformedFrame):
        asyncio.run(_dispatcher(recorder).handle(frame))
    assert recorder.frames == []


def test_a_huge_array_count_is_refused_before_the_backend_sees_it():
    recorder = _Recorder()
    frame = bytearray(_payload(_fetch_v12()))
    # the topics array count of a v12 (flexible) Fetch is a uvarint near the end: make it enormous
    tail = frame[-8:]
    frame = bytes(frame[:-8]) + b"\xff\xff\xff\xff\x0f" + bytes(tail)
    with pytest.raises(MalformedFrame):
        asyncio.run(_dispatcher(recorder).handle(frame))
    assert recorder.frames == []


@pytest.mark.parametrize("cls", [ProduceV3, ProduceV9])
def test_produce_topics_are_read_without_decoding_records(cls):
    from kshare_sidecar.passthrough.routes import item_class

    topic_cls = item_class(cls, "topic_data")
    part_cls = item_class(topic_cls, "partition_data")
    topics = tuple(topic_cls(name=name, partition_data=tuple(part_cls(index=i, records=b"\x00" * (i * 300))
                                                             for i in range(3)))
                   for name in ("orders", "__kshare_state", "été"))
    request = cls(transactional_id="t", acks=-1, timeout=datetime.timedelta(seconds=1), topic_data=topics)
    assert produce.topic_keys(_payload(request), cls.__version__) == ["orders", "__kshare_state", "été"]


def test_produce_v13_topics_are_read_as_topic_ids():
    """Produce v13 (Kafka 4.1+, KIP-516) names topics by id: reading them as names broke every
    Produce a client sent through a sidecar on a 4.1+ backend (franz-go's suite found it)."""
    from kshare_sidecar.passthrough.routes import item_class

    topic_cls = item_class(ProduceV13, "topic_data")
    part_cls = item_class(topic_cls, "partition_data")
    ids = [uuid.uuid4() for _ in range(3)]
    topics = tuple(topic_cls(topic_id=i, partition_data=tuple(part_cls(index=p, records=b"\x01" * (p * 300))
                                                              for p in range(3)))
                   for i in ids)
    request = ProduceV13(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=1), topic_data=topics)
    assert produce.topic_keys(_payload(request), 13) == ids


def test_reserved_names_the_state_topic_and_writer_ids():
    from kshare_sidecar.passthrough import Reserved

    state_id = uuid.uuid4()
    reserved = Reserved(frozenset({"__kshare_state"}), ("kshare-state-",), frozenset({state_id}))
    assert reserved.topic("__kshare_state") and not reserved.topic("orders")
    assert reserved.topic(state_id) and not reserved.topic(uuid.uuid4())
    assert reserved.txn("kshare-state-__kshare_state-3") and not reserved.txn("app-txn") and not reserved.txn(None)


def test_topics_a_forwarded_delete_topics_deleted_are_reported_from_the_raw_answer():
    """The raw answer (a writable buffer, as the upstream connection hands it over) is read for the
    topics deleted — by name, and by id from v6 — and only those without an error."""
    from kio.schema.delete_topics.v6 import response as dt6
    from kio.schema.errors import ErrorCode

    from kshare_sidecar.passthrough.forwarder import Forwarder
    from kshare_sidecar.passthrough.pool import BackendPool

    gone = uuid.uuid4()
    answer = dt6.DeleteTopicsResponse(throttle_time=datetime.timedelta(0), responses=(
        dt6.DeletableTopicResult(name="a", topic_id=gone, error_code=ErrorCode.none, error_message=None),
        dt6.DeletableTopicResult(name="b", topic_id=uuid.UUID(int=0), error_code=ErrorCode.none, error_message=None),
        dt6.DeletableTopicResult(name="c", topic_id=uuid.uuid4(), error_code=ErrorCode.topic_authorization_failed,
                                 error_message=None)))
    told = []

    async def topics_deleted(names, ids):
        told.append((names, ids))

    forwarder = Forwarder(BackendPool(BackendClients("127.0.0.1:1")))
    forwarder.topics_deleted = topics_deleted
    asyncio.run(forwarder._deleted(bytearray(codec.encode_response(answer, 7)), 6))
    assert told == [(["a", "b"], [gone])]


def test_a_raw_coordinator_answer_with_not_coordinator_forgets_the_coordinator():
    """A raw answer is a writable buffer: it used to fail kio's reader silently, so NOT_COORDINATOR
    in an answer passed through as bytes never made the pool forget the coordinator."""
    from kio.schema.errors import ErrorCode
    from kio.schema.heartbeat.v4 import response as hb4

    from kshare_sidecar.passthrough.forwarder import Forwarder
    from kshare_sidecar.passthrough.pool import GROUP_KEY, BackendPool

    pool = BackendPool(BackendClients("127.0.0.1:1"))
    forgotten = []
    pool.forget_coordinator = lambda key_type, key: forgotten.append((key_type, key))  # type: ignore[method-assign]
    answer = hb4.HeartbeatResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.not_coordinator)
    Forwarder(pool)._notice_coordinator_errors(bytearray(codec.encode_response(answer, 7)), 12, 4, GROUP_KEY, ["g"])
    assert forgotten == [(GROUP_KEY, "g")]
