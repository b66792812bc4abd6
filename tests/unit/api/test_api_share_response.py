"""The hand-encoded ShareFetch answer (api/shareresponse.py) is byte for byte kio's, v1 and v2."""

from __future__ import annotations

import datetime
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.share_fetch.v1 import response as r1
from kio.schema.share_fetch.v2 import response as r2
from kio.static.primitive import i32Timedelta

from kshare_sidecar.api.shareresponse import share_fetch_body
from kshare_sidecar.share.delayed_fetch import PartitionOut
from kshare_sidecar.share.engine.types import AcquiredRecords
from kshare_sidecar.wire import codec

codes = st.sampled_from([ErrorCode.none, ErrorCode.invalid_record_state, ErrorCode.not_leader_or_follower,
                         ErrorCode.unknown_topic_id])
texts = st.none() | st.text(max_size=20)
records = st.lists(st.binary(max_size=300), max_size=3)


@st.composite
def partitions(draw) -> PartitionOut:
    pieces = draw(records)
    return PartitionOut(uuid.UUID(int=0), draw(st.integers(0, 2**31 - 1)), error=draw(codes), message=draw(texts),
                        ack_error=draw(st.none() | codes), ack_message=draw(texts),
                        records=[memoryview(p) for p in pieces] if draw(st.booleans()) else b"".join(pieces),
                        acquired=[AcquiredRecords(a, a + n, c) for a, n, c in draw(st.lists(
                            st.tuples(st.integers(0, 2**62), st.integers(0, 1000), st.integers(1, 32767)),
                            max_size=4))])


topics = st.lists(st.tuples(st.uuids(), st.lists(partitions(), min_size=1, max_size=3)), max_size=3)
endpoints = st.lists(st.tuples(st.integers(0, 1000), st.text(min_size=1, max_size=15),
                               st.integers(1, 65535), st.none() | st.text(max_size=5)), min_size=1, max_size=3)


def kio_answer(mod, *, error, message, lock_ms, topics, leader, endpoints):
    return mod.ShareFetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=error, error_message=message,
        acquisition_lock_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=lock_ms)),
        responses=tuple(mod.ShareFetchableTopicResponse(topic_id=tid, partitions=tuple(
            mod.PartitionData(partition_index=p.partition, error_code=p.error, error_message=p.message,
                              acknowledge_error_code=(p.ack_error or ErrorCode.none).value,
                              acknowledge_error_message=p.ack_message,
                              current_leader=mod.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1]),
                              records=p.records if isinstance(p.records, bytes) else b"".join(p.records),
                              acquired_records=tuple(mod.AcquiredRecords(first_offset=a.first_offset,
                                                                         last_offset=a.last_offset,
                                                                         delivery_count=a.delivery_count)
                                                     for a in p.acquired))
            for p in parts)) for tid, parts in topics),
        node_endpoints=tuple(mod.NodeEndpoint(node_id=n, host=h, port=port, rack=rack)
                             for n, h, port, rack in endpoints))


@settings(max_examples=200, deadline=None)
@given(mod=st.sampled_from([r1, r2]), error=codes, message=texts, lock_ms=st.integers(0, 2**31 - 1),
       topics=topics, leader=st.tuples(st.integers(-1, 1000), st.integers(0, 100)), endpoints=endpoints,
       cid=st.integers(0, 2**31 - 1))
def test_hand_encoded_share_fetch_answer_is_kios(mod, error, message, lock_ms, topics, leader, endpoints, cid):
    body = share_fetch_body(throttle_ms=0, error_code=int(error), error_message=message, lock_timeout_ms=lock_ms,
                            topics=topics, leader=lambda _t, _p: leader, endpoints=endpoints)
    expected = codec.encode_response(kio_answer(mod, error=error, message=message, lock_ms=lock_ms, topics=topics,
                                                leader=leader, endpoints=endpoints), cid)
    assert body.frame(cid).joined() == expected


def test_record_views_are_written_as_they_are():
    """The acquired batches stay the backend buffer's views: the frame holds them, not a copy."""
    buf = bytearray(b"x" * 10_000)
    view = memoryview(buf)[100:9_100]
    part = PartitionOut(uuid.UUID(int=1), 0, records=[view], acquired=[AcquiredRecords(0, 9, 1)])
    frame = share_fetch_body(throttle_ms=0, error_code=0, error_message=None, lock_timeout_ms=30_000,
                             topics=[(uuid.UUID(int=1), [part])], leader=lambda _t, _p: (1, 0),
                             endpoints=[(1, "h", 9092, None)]).frame(7)
    assert any(p is view for p in frame)
    assert int.from_bytes(frame[0][:4], "big") == sum(len(p) for p in frame) - 4

