"""passthrough/sessions.py: one client share session spread over the backend brokers' sessions, checked
against brokers that enforce KIP-932's session rules (a new session at epoch 0 without
acknowledgements, each next request at the next epoch, -1 closes) through random sequences of
fetches, acknowledgements, partitions added and forgotten, leaders moving and sessions lost."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import request as ack_req
from kio.schema.share_acknowledge.v1 import response as ack_resp
from kio.schema.share_fetch.v1 import request as fetch_req
from kio.schema.share_fetch.v1 import response as fetch_resp

from kshare_sidecar.passthrough.sessions import SplitSessions
from kshare_sidecar.wire import codec

TOPIC = uuid.UUID(int=1)
PARTS = [(TOPIC, p) for p in range(4)]


class Broker:
    """A broker's share sessions, by Kafka's rules, answering every partition it is asked for."""

    def __init__(self, node: int, leaders: dict) -> None:
        self.node, self.leaders = node, leaders
        self.sessions: dict[tuple[str, str], tuple[int, set]] = {}  # key -> (next epoch, partitions)
        self.violations: list[str] = []

    def answer(self, body: Any, fetch: bool) -> Any:
        key, epoch = (body.group_id, body.member_id), int(body.share_session_epoch)
        named = {(t.topic_id, int(p.partition_index)): p for t in body.topics for p in t.partitions}
        acks = any(p.acknowledgement_batches for p in named.values())
        top = ErrorCode.none
        if epoch == 0:
            if acks or not fetch:
                self.violations.append(f"broker {self.node}: acknowledgements or ShareAcknowledge at epoch 0")
                top = ErrorCode.invalid_request
            else:
                self.sessions[key] = (1, set(named))
        elif key not in self.sessions:
            top = ErrorCode.share_session_not_found
        elif epoch == -1:
            del self.sessions[key]
        elif epoch != self.sessions[key][0]:
            self.violations.append(f"broker {self.node}: epoch {epoch}, expected {self.sessions[key][0]}")
            top = ErrorCode.invalid_share_session_epoch
        else:
            parts = self.sessions[key][1]
            if fetch:
                parts = (parts | set(named)) - {(t.topic_id, int(p)) for t in body.forgotten_topics_data
                                                for p in t.partitions}
            self.sessions[key] = (epoch + 1, parts)
        mod = fetch_resp if fetch else ack_resp
        if top != ErrorCode.none:
            return mod.__dict__["ShareFetchResponse" if fetch else "ShareAcknowledgeResponse"](
                throttle_time=datetime.timedelta(0), error_code=top, responses=(), node_endpoints=(),
                **({"acquisition_lock_timeout": datetime.timedelta(0)} if fetch else {}))
        def part(tp):
            code = ErrorCode.none if self.leaders[tp] == self.node else ErrorCode.not_leader_or_follower
            leader = mod.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
            if fetch:
                return mod.PartitionData(partition_index=tp[1], error_code=code, acknowledge_error_code=code,
                                         current_leader=leader, records=b"", acquired_records=())
            return mod.PartitionData(partition_index=tp[1], error_code=code, current_leader=leader)
        topic_cls = mod.ShareFetchableTopicResponse if fetch else mod.ShareAcknowledgeTopicResponse
        answered = sorted(named) if not fetch else sorted(set(named) | self.sessions.get(key, (0, set()))[1])
        responses = (topic_cls(topic_id=TOPIC, partitions=tuple(part(tp) for tp in answered)),) if answered else ()
        if fetch:
            return mod.ShareFetchResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                                          acquisition_lock_timeout=datetime.timedelta(seconds=30),
                                          responses=responses, node_endpoints=())
        return mod.ShareAcknowledgeResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                                            responses=responses, node_endpoints=())


class Conn:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def send(self, payload: bytes) -> asyncio.Future:
        decoded = codec.decode_request(payload)
        answer = self.broker.answer(decoded.body, decoded.api_key == 78)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(codec.encode_response(answer, decoded.correlation_id)[4:])
        return fut


class Up:
    def __init__(self, brokers: dict) -> None:
        self.brokers = brokers

    def conn(self, node: int) -> Conn:
        return Conn(self.brokers[node])


class Pool:
    def __init__(self, leaders: dict) -> None:
        self.leaders = leaders

    async def leader(self, topic: Any, partition: int) -> int:
        return self.leaders[(topic, partition)]

    def forget_leaders(self) -> None:
        pass


def _fetch(epoch: int, add=(), ack=(), forget=()) -> Any:
    parts = {tp: fetch_req.FetchPartition(partition_index=tp[1], acknowledgement_batches=(
        (fetch_req.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=(1,)),) if tp in ack else ()))
        for tp in sorted(set(add) | set(ack))}
    return fetch_req.ShareFetchRequest(
        group_id="g", member_id="m", share_session_epoch=epoch, max_wait=datetime.timedelta(0), min_bytes=1,
        max_records=10, batch_size=10,
        topics=(fetch_req.FetchTopic(topic_id=TOPIC, partitions=tuple(parts.values())),) if parts else (),
        forgotten_topics_data=(fetch_req.ForgottenTopic(topic_id=TOPIC, partitions=tuple(p for _, p in forget)),)
        if forget else ())


def _ack(epoch: int, ack=()) -> Any:
    return ack_req.ShareAcknowledgeRequest(group_id="g", member_id="m", share_session_epoch=epoch, topics=(
        ack_req.AcknowledgeTopic(topic_id=TOPIC, partitions=tuple(ack_req.AcknowledgePartition(
            partition_index=tp[1], acknowledgement_batches=(ack_req.AcknowledgementBatch(
                first_offset=0, last_offset=0, acknowledge_types=(1,)),)) for tp in ack)),) if ack else ())


class FakeConn:
    conn_id = 3

    def add_close_callback(self, cb: Any) -> None:
        pass


steps = st.lists(st.one_of(
    st.tuples(st.just("fetch"), st.sets(st.sampled_from(PARTS)), st.sets(st.sampled_from(PARTS)),
              st.sets(st.sampled_from(PARTS))),
    st.tuples(st.just("ack"), st.sets(st.sampled_from(PARTS), min_size=1)),
    st.tuples(st.just("move"), st.sampled_from(PARTS)),
    st.tuples(st.just("lose"), st.sampled_from([1, 2])),
    st.tuples(st.just("reopen")),
), max_size=25)


@settings(max_examples=150, deadline=None)
@given(st.sets(st.sampled_from(PARTS), min_size=1), steps)
def test_every_broker_sees_its_share_of_the_session_by_the_rules(opened, ops):
    asyncio.run(_run(opened, ops))


async def _run(opened: set, ops: list) -> None:
    leaders = {tp: 1 + tp[1] % 2 for tp in PARTS}
    brokers = {n: Broker(n, leaders) for n in (1, 2)}
    split = SplitSessions(Pool(leaders), lambda conn: Up(brokers))  # type: ignore[arg-type]
    client: set = set()
    epoch = 0

    async def send(request: Any) -> Any:
        frame = codec.encode_request(request, 1, "c")[4:]
        out = await split(FakeConn(), frame, lambda: None)
        _, body = codec.decode_response(out[4:], codec.response_class(type(request).__api_key__, 1))
        return body

    async def fetch(**kw: Any) -> Any:
        nonlocal epoch
        body = await send(_fetch(epoch, **kw))
        epoch += 1
        return body

    client = set(opened)
    answer = await fetch(add=opened)
    assert answer.error_code == ErrorCode.none
    for op in ops:
        if op[0] == "fetch":
            _, add, ack, forget = op
            ack = ack & client
            forget = forget - add - ack
            answer = await fetch(add=add, ack=ack, forget=forget)
            client = (client | add) - forget
        elif op[0] == "ack":
            answer = await send(_ack(epoch, op[1] & client or client))
            epoch += 1
        elif op[0] == "move":
            leaders[op[1]] = 3 - leaders[op[1]]
            continue
        elif op[0] == "lose":
            brokers[op[1]].sessions.clear()
            continue
        else:
            epoch, client = 0, set(opened)
            answer = await fetch(add=opened)
        assert answer.error_code == ErrorCode.none
        # after each fetch, every broker's session holds the client's partitions it leads now, unless
        # it lost its session (reopened by the next request) or the partition has just moved
        if op[0] in ("fetch", "reopen"):
            for n, broker in brokers.items():
                held = broker.sessions.get(("g", "m"), (0, None))[1]
                if held is not None:
                    assert held == {tp for tp in client if leaders[tp] == n}, (n, held, client)
    for broker in brokers.values():
        assert broker.violations == []
    await send(_fetch(-1)) if epoch else None
    assert all(("g", "m") not in b.sessions for b in brokers.values()) or epoch == 0
