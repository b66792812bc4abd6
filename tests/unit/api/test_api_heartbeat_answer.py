"""The hand-encoded ShareGroupHeartbeat answer (api/heartbeat.py) is byte for byte kio's."""

from __future__ import annotations

import datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.share_group_heartbeat.v1 import response as r1
from kio.static.primitive import i32, i32Timedelta

from kshare_sidecar.api.heartbeat import answer
from kshare_sidecar.wire import codec

assignments = st.none() | st.dictionaries(st.uuids(), st.sets(st.integers(0, 2**31 - 1), max_size=6), max_size=4)


@settings(max_examples=300)
@given(member_id=st.none() | st.text(max_size=36), epoch=st.integers(-1, 2**31 - 1),
       interval=st.integers(0, 2**31 - 1), assignment=assignments, message=st.none() | st.text(max_size=30),
       correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_the_answer_is_kios(member_id, epoch, interval, assignment, message, correlation_id) -> None:
    kio_assignment = None if assignment is None else r1.Assignment(topic_partitions=tuple(
        r1.TopicPartitions(topic_id=tid, partitions=tuple(i32(p) for p in sorted(ps)))
        for tid, ps in sorted(assignment.items())))
    expected = codec.encode_response(r1.ShareGroupHeartbeatResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, error_message=message,
        member_id=member_id, member_epoch=i32(epoch),
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=interval)),
        assignment=kio_assignment), correlation_id)
    got = answer(member_id, epoch, interval, assignment, message).frame(correlation_id).joined()
    assert bytes(got) == bytes(expected)
