"""Leader hints (KIP-951 CurrentLeader / NodeEndpoints) in forwarded Produce and Fetch answers
name the sidecar: passed through as the backend wrote them, they made librdkafka rename its broker
to the backend's address, drop the sidecar connection with Produce requests in flight and write
them again (duplicated records, and a client that left the sidecar). Regression of that."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import response as fetch
from kio.schema.produce.v11 import response as produce
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64

from kshare_sidecar.api.context import NodeIdentity
from kshare_sidecar.passthrough import leaders
from kshare_sidecar.passthrough.forwarder import Forwarder
from kshare_sidecar.wire import codec

SIDECAR = NodeIdentity(node_id=7, host="sidecar.example", port=9192)
BACKEND = ("10.0.0.5", 9092)


def _produce_not_leader() -> produce.ProduceResponse:
    part = produce.PartitionProduceResponse(
        index=i32(0), error_code=ErrorCode.not_leader_or_follower, base_offset=i64(-1), log_append_time=None,
        log_start_offset=i64(-1), record_errors=(), error_message=None,
        current_leader=produce.LeaderIdAndEpoch(leader_id=BrokerId(2), leader_epoch=i32(3)))
    return produce.ProduceResponse(
        responses=(produce.TopicProduceResponse(name=TopicName("t"), partition_responses=(part,)),),
        throttle_time=datetime.timedelta(0),
        node_endpoints=(produce.NodeEndpoint(node_id=BrokerId(2), host=BACKEND[0], port=i32(BACKEND[1]), rack=None),))


class _Pool:
    brokers = {2: BACKEND}


def test_produce_hint_names_the_sidecar():
    out = leaders.point_at_sidecar(_produce_not_leader(), 7, "sidecar.example", 9192, None)
    (endpoint,) = out.node_endpoints
    assert (int(endpoint.node_id), endpoint.host, int(endpoint.port)) == (7, "sidecar.example", 9192)
    part = out.responses[0].partition_responses[0]
    assert int(part.current_leader.leader_id) == 7 and int(part.current_leader.leader_epoch) == 3
    assert part.error_code == ErrorCode.not_leader_or_follower  # the client still refreshes and retries


def test_fetch_hint_and_preferred_replica_name_the_sidecar():
    part = fetch.PartitionData(
        partition_index=i32(0), error_code=ErrorCode.not_leader_or_follower, high_watermark=i64(-1),
        last_stable_offset=i64(-1), log_start_offset=i64(-1),
        diverging_epoch=fetch.EpochEndOffset(epoch=i32(-1), end_offset=i64(-1)),
        current_leader=fetch.LeaderIdAndEpoch(leader_id=BrokerId(2), leader_epoch=i32(1)),
        snapshot_id=fetch.SnapshotId(end_offset=i64(-1), epoch=i32(-1)), aborted_transactions=None,
        preferred_read_replica=BrokerId(3), records=b"")
    body = fetch.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=i32(0),
        responses=(fetch.FetchableTopicResponse(topic_id=__import__("uuid").uuid4(), partitions=(part,)),),
        node_endpoints=(fetch.NodeEndpoint(node_id=BrokerId(2), host=BACKEND[0], port=i32(BACKEND[1]), rack=None),))
    out = leaders.point_at_sidecar(body, 7, "sidecar.example", 9192, None)
    p = out.responses[0].partitions[0]
    assert int(p.current_leader.leader_id) == 7 and int(p.preferred_read_replica) == -1
    assert [(int(e.node_id), e.host) for e in out.node_endpoints] == [(7, "sidecar.example")]


def test_answers_without_hints_are_left_alone():
    ok = produce.ProduceResponse(responses=(), throttle_time=datetime.timedelta(0), node_endpoints=())
    assert leaders.point_at_sidecar(ok, 7, "h", 1, None) is ok
    assert leaders.hinted(0, 10) and leaders.hinted(1, 16)
    assert not leaders.hinted(0, 9) and not leaders.hinted(1, 15) and not leaders.hinted(3, 12)


def test_raw_answer_is_rewritten_only_when_it_names_a_backend_host():
    forwarder = Forwarder(_Pool(), None, lambda _conn: SIDECAR)  # type: ignore[arg-type]
    raw = codec.encode_response(_produce_not_leader(), 42)
    rewritten = forwarder._own_leader_hints_raw(bytearray(raw), 0, 11)
    _, body = codec.decode_response(bytes(rewritten[4:]), codec.response_class(0, 11))
    assert [(e.host, int(e.port)) for e in body.node_endpoints] == [("sidecar.example", 9192)]
    assert int.from_bytes(rewritten[4:8], "big") == 42  # the client's correlation id is kept

    plain = codec.encode_response(produce.ProduceResponse(responses=(), throttle_time=datetime.timedelta(0),
                                                          node_endpoints=()), 43)
    assert forwarder._own_leader_hints_raw(plain, 0, 11) is plain  # no host in it: bytes untouched


def test_hints_name_the_listener_the_client_is_connected_on():
    """Several listeners: a SASL_SSL client must be told the SASL_SSL address."""
    import dataclasses

    from kshare_sidecar.config import ListenerSpec
    from kshare_sidecar.passthrough import forwarder as forwarder_module
    from kshare_sidecar.app import Sidecar

    sidecar = Sidecar.__new__(Sidecar)
    secured = dataclasses.replace(SIDECAR, port=9194)
    sidecar._specs = [ListenerSpec("PLAINTEXT", "PLAINTEXT", "h", 9192, "h", 9192),
                      ListenerSpec("SASL_SSL", "SASL_SSL", "h", 9194, "h", 9194)]
    sidecar._dispatchers = [type("D", (), {"node": SIDECAR})(), type("D", (), {"node": secured})()]
    sidecar.node = SIDECAR

    class Client:
        listener = "SASL_SSL"

    assert sidecar.node_for(Client()) is secured and sidecar.node_for(None) is SIDECAR
    forwarder = Forwarder(_Pool(), None, sidecar.node_for)  # type: ignore[arg-type]
    token = forwarder_module._CLIENT.set(Client())  # what Forwarder.__call__ sets per request
    try:
        raw = codec.encode_response(_produce_not_leader(), 42)
        _, body = codec.decode_response(bytes(forwarder._own_leader_hints_raw(bytearray(raw), 0, 11)[4:]),
                                        codec.response_class(0, 11))
    finally:
        forwarder_module._CLIENT.reset(token)
    assert [(e.host, int(e.port)) for e in body.node_endpoints] == [("sidecar.example", 9194)]
