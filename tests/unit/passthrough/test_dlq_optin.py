"""KIP-1191's topic opt-in on a backend that cannot hold it (passthrough/dlqoptin.py): the key is taken
out of CreateTopics and IncrementalAlterConfigs before they reach the backend, recorded once the
backend accepted the rest, and shown by DescribeConfigs; requests without it pass unchanged."""

from __future__ import annotations

import datetime

from kio.schema.create_topics.v5 import request as ct
from kio.schema.create_topics.v5 import response as ctr
from kio.schema.describe_configs.v4 import request as dc
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as iac

from kshare_sidecar.passthrough import dlqoptin
from kshare_sidecar.protocol.requests import request_payload
from kshare_sidecar.share.dead_letter_topics import GROUP_ENABLE, DeadLetterTopics
from kshare_sidecar.wire import codec


def _create_frame(configs: dict[str, dict[str, str]], validate_only: bool = False) -> bytes:
    topics = tuple(ct.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(),
                                     configs=tuple(ct.CreatableTopicConfig(name=k, value=v) for k, v in c.items()))
                   for name, c in configs.items())
    body = ct.CreateTopicsRequest(topics=topics, timeout=datetime.timedelta(seconds=30), validate_only=validate_only)
    return request_payload(body, 17, "admin")


class _Inner:
    """The forwarder: remembers what reached the backend; every topic created."""

    def __init__(self) -> None:
        self.sent: list = []

    async def __call__(self, conn, frame: bytes, release) -> bytes:
        decoded = codec.decode_request(frame)
        self.sent.append(decoded.body)
        answer = ctr.CreateTopicsResponse(throttle_time=datetime.timedelta(0), topics=tuple(
            ctr.CreatableTopicResult(name=t.name, error_code=ErrorCode.none, error_message=None,
                                     topic_config_error_code=ErrorCode.none, num_partitions=1, replication_factor=1,
                                     configs=()) for t in decoded.body.topics))
        return codec.encode_response(answer, decoded.correlation_id)


async def test_create_topics_takes_the_opt_in_out_and_records_it():
    topics = DeadLetterTopics()
    topics.backend_holds_key = False
    inner = _Inner()
    handler = dlqoptin.create_topics(inner, topics)
    await handler(None, _create_frame({"dlq.a": {GROUP_ENABLE: "true", "retention.ms": "1000"},
                                       "dlq.b": {GROUP_ENABLE: "FALSE"}, "plain": {}}), lambda: None)
    [sent] = inner.sent
    assert {t.name: {c.name: c.value for c in t.configs} for t in sent.topics} == {
        "dlq.a": {"retention.ms": "1000"}, "dlq.b": {}, "plain": {}}
    assert topics.enabled("dlq.a") and not topics.enabled("dlq.b") and topics.explicit("dlq.b")
    assert not topics.enabled("plain") and not topics.explicit("plain")


async def test_validate_only_and_a_backend_that_holds_the_key_record_nothing():
    topics = DeadLetterTopics()
    topics.backend_holds_key = False
    inner = _Inner()
    await dlqoptin.create_topics(inner, topics)(None, _create_frame({"dlq.a": {GROUP_ENABLE: "true"}}, True),
                                               lambda: None)
    assert not topics.enabled("dlq.a")
    topics.backend_holds_key = True  # Kafka 4.4: the backend keeps it, the request passes as it is
    frame = _create_frame({"dlq.c": {GROUP_ENABLE: "true"}})
    await dlqoptin.create_topics(inner, topics)(None, frame, lambda: None)
    assert [(c.name, c.value) for c in inner.sent[-1].topics[0].configs] == [(GROUP_ENABLE, "true")]
    assert not topics.enabled("dlq.c")


async def test_incremental_alter_configs_sets_and_deletes_the_opt_in():
    topics = DeadLetterTopics(configured=["dlq.static"])
    topics.backend_holds_key = False
    seen = []

    async def inner(ctx, header, req):
        seen.append(req)
        return {"throttle_time": 0, "responses": tuple(
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": r.resource_type,
             "resource_name": r.resource_name} for r in req.resources)}

    def alter(name: str, op: int, value: str | None) -> iac.IncrementalAlterConfigsRequest:
        return iac.IncrementalAlterConfigsRequest(validate_only=False, resources=(iac.AlterConfigsResource(
            resource_type=2, resource_name=name, configs=(
                iac.AlterableConfig(name=GROUP_ENABLE, config_operation=op, value=value),
                iac.AlterableConfig(name="retention.ms", config_operation=0, value="5"))),))

    handler = dlqoptin.alter_configs(inner, topics)
    await handler(None, None, alter("dlq.x", 0, "true"))
    assert [c.name for c in seen[-1].resources[0].configs] == ["retention.ms"] and topics.enabled("dlq.x")
    await handler(None, None, alter("dlq.x", 1, None))
    assert not topics.enabled("dlq.x")
    await handler(None, None, alter("dlq.static", 0, "false"))
    assert not topics.enabled("dlq.static"), "an explicit false overrides deadletter.enabled.topics"


async def test_describe_configs_of_a_topic_lists_the_opt_in_kshare_keeps():
    topics = DeadLetterTopics()
    topics.backend_holds_key = False
    topics.record("dlq.on", True)

    async def inner(ctx, header, req):
        return {"throttle_time": 0, "results": tuple(
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": r.resource_type,
             "resource_name": r.resource_name,
             "configs": ({"name": "retention.ms", "value": "1", "read_only": False, "config_source": 5,
                          "is_sensitive": False, "synonyms": (), "config_type": 5, "documentation": None},)}
            for r in req.resources)}

    req = dc.DescribeConfigsRequest(include_synonyms=True, include_documentation=False, resources=(
        dc.DescribeConfigsResource(resource_type=2, resource_name="dlq.on", configuration_keys=None),
        dc.DescribeConfigsResource(resource_type=2, resource_name="other", configuration_keys=None),
        dc.DescribeConfigsResource(resource_type=2, resource_name="other", configuration_keys=("retention.ms",))))
    answer = await dlqoptin.describe_configs(inner, topics)(None, None, req)
    on, other, only = (r["configs"] for r in answer["results"])
    assert [(c["name"], c["value"], c["config_source"]) for c in on] == [
        (GROUP_ENABLE, "true", 1), ("retention.ms", "1", 5)]
    assert on[0]["synonyms"] == ({"name": GROUP_ENABLE, "value": "true", "source": 1},)
    assert [(c["name"], c["value"], c["config_source"]) for c in other][0] == (GROUP_ENABLE, "false", 5)
    assert [c["name"] for c in only] == ["retention.ms"]
