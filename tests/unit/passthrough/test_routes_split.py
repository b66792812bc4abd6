"""routes.split_partitions / merge_partitions on real kio entities: a request spanning several
backend leaders is cut into one request per leader and the answers joined back into one, as a
client talking to a single broker expects (every partition answered once, throttle the largest)."""

from __future__ import annotations

import datetime

from kio.schema.describe_producers.v0 import request as dp_req
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as lo_req
from kio.schema.list_offsets.v7 import response as lo_resp
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from kshare_sidecar.passthrough.routes import PARTITIONS, Route, merge_partitions, route, split_partitions

LEADERS = {("a", 0): 1, ("a", 1): 2, ("a", 2): 3, ("a", 3): 1, ("b", 0): 2}


def _leader(topic, index):
    return LEADERS[(topic, index)]


def _list_offsets(parts: dict[str, list[int]]) -> lo_req.ListOffsetsRequest:
    topics = tuple(lo_req.ListOffsetsTopic(name=TopicName(t), partitions=tuple(
        lo_req.ListOffsetsPartition(partition_index=i32(p), timestamp=i64(-1)) for p in ps))
        for t, ps in parts.items())
    return lo_req.ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=topics)


def _shape(body, spec) -> dict:
    out = {}
    for t in getattr(body, spec.req_topics):
        ps = getattr(t, spec.req_parts)
        out[t.name] = [int(p) if spec.req_part_index is None else int(getattr(p, spec.req_part_index)) for p in ps]
    return out


def test_list_offsets_is_split_per_leader_keeping_topic_order():
    spec = PARTITIONS[2]
    assert route(2, 7) == (Route.LEADER, spec)
    body = _list_offsets({"a": [0, 1, 2, 3], "b": [0]})
    split = split_partitions(body, spec, _leader)
    assert {n: _shape(b, spec) for n, b in split.items()} == {
        1: {"a": [0, 3]}, 2: {"a": [1], "b": [0]}, 3: {"a": [2]}}
    for sub in split.values():  # everything but the partitions is the client's request, unchanged
        assert sub.isolation_level == body.isolation_level and sub.replica_id == body.replica_id
        assert type(sub) is type(body)


def test_one_leader_gives_one_request_equal_to_the_original():
    spec = PARTITIONS[2]
    body = _list_offsets({"a": [0, 3]})
    assert split_partitions(body, spec, _leader) == {1: body}


def test_describe_producers_plain_int_partitions_are_split():
    spec = PARTITIONS[61]
    body = dp_req.DescribeProducersRequest(topics=(
        dp_req.TopicRequest(name=TopicName("a"), partition_indexes=(i32(0), i32(1), i32(2))),))
    split = split_partitions(body, spec, _leader)
    assert {n: _shape(b, spec) for n, b in split.items()} == {1: {"a": [0]}, 2: {"a": [1]}, 3: {"a": [2]}}


def _answer(parts: dict[str, list[int]], throttle_ms: int) -> lo_resp.ListOffsetsResponse:
    return lo_resp.ListOffsetsResponse(
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        topics=tuple(lo_resp.ListOffsetsTopicResponse(name=TopicName(t), partitions=tuple(
            lo_resp.ListOffsetsPartitionResponse(partition_index=i32(p), error_code=ErrorCode.none,
                                                 offset=i64(100 + p)) for p in ps)) for t, ps in parts.items()))


def test_merge_joins_partitions_of_the_same_topic_and_keeps_the_largest_throttle():
    spec = PARTITIONS[2]
    merged = merge_partitions([_answer({"a": [0, 3]}, 0), _answer({"a": [1], "b": [0]}, 25),
                               _answer({"a": [2]}, 5)], spec)
    assert merged.throttle_time == datetime.timedelta(milliseconds=25)
    got = {t.name: sorted((int(p.partition_index), int(p.offset)) for p in t.partitions) for t in merged.topics}
    assert got == {"a": [(0, 100), (1, 101), (2, 102), (3, 103)], "b": [(0, 100)]}
    assert [t.name for t in merged.topics].count("a") == 1


def test_split_then_merge_round_trip_answers_every_partition_once():
    spec = PARTITIONS[2]
    body = _list_offsets({"a": [0, 1, 2, 3], "b": [0]})
    answers = [_answer(_shape(sub, spec), 0) for sub in split_partitions(body, spec, _leader).values()]
    merged = merge_partitions(answers, spec)
    assert sorted((t.name, int(p.partition_index)) for t in merged.topics for p in t.partitions) == sorted(LEADERS)
