"""Kafka's share-group authorization rules at the handlers and the share service (authorizer
replaced by a fixed ACL set): codes, what is left out, what is not applied."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.api import Dispatcher, InMemoryTopicCatalog, build_registry
from kshare_sidecar.api import admin as admin_api
from kshare_sidecar.api import configs as configs_api
from kshare_sidecar.auth.acls import Acl, AclSet, Decider, Op, Pattern, Permission, Res
from kshare_sidecar.share.engine.types import AckBatch
from tests.unit.group.test_admin_service import FakeBackend, T, env  # noqa: F401 - fixture
from tests.unit.api.test_admin_wire import NODE, _request, _roundtrip
from tests.unit.share.test_share_service import TOPIC, TP, fetch, svc  # noqa: F401 - fixture

ALICE = "User:alice"


def allow(rtype: Res, name: str, op: Op) -> Acl:
    return Acl(int(rtype), name, int(Pattern.LITERAL), ALICE, "*", int(op), int(Permission.ALLOW))


class FixedAuthorizer:
    def __init__(self, *acls: Acl) -> None:
        self.acls = AclSet(acls)

    async def decider(self, principal, host, protocol):
        return Decider(self.acls, ALICE, host)


@pytest.fixture
def dispatch(env):  # noqa: F811
    registry = build_registry(InMemoryTopicCatalog())
    admin_api.register(registry, env, FakeBackend())
    configs_api.register(registry, env)
    return lambda *acls: Dispatcher(registry, NODE, authorizer=FixedAuthorizer(*acls))


async def test_share_group_describe_needs_describe_on_the_group(dispatch):
    cls, _ = _request("share_group_describe", 1)
    body = await _roundtrip(dispatch(allow(Res.GROUP, "mine", Op.READ)),
                            cls(group_ids=("mine", "theirs"), include_authorized_operations=False))
    codes = {g.group_id: g.error_code for g in body.groups}
    assert codes["theirs"] == ErrorCode.group_authorization_failed
    assert codes["mine"] != ErrorCode.group_authorization_failed  # READ implies DESCRIBE


async def test_delete_groups_needs_delete_and_list_groups_filters(dispatch, env):  # noqa: F811
    cls, _ = _request("delete_groups", 2)
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.DESCRIBE)), cls(groups_names=("g",)))
    assert [r.error_code for r in body.results] == [ErrorCode.group_authorization_failed]
    env.coordinator.ensure_group("visible").group_epoch = 1
    env.coordinator.ensure_group("hidden").group_epoch = 1
    cls, _ = _request("list_groups", 4)
    body = await _roundtrip(dispatch(allow(Res.GROUP, "visible", Op.DESCRIBE)), cls(states_filter=()))
    assert [g.group_id for g in body.groups] == ["visible"]
    body = await _roundtrip(dispatch(allow(Res.CLUSTER, "kafka-cluster", Op.DESCRIBE)), cls(states_filter=()))
    assert sorted(g.group_id for g in body.groups) == ["hidden", "visible"]


async def test_offsets_apis_group_and_topic_rules(dispatch, env):  # noqa: F811
    env.coordinator.ensure_group("g").group_epoch = 1
    cls, mod = _request("alter_share_group_offsets", 0)
    req = cls(group_id="g", topics=(mod.AlterShareGroupOffsetsRequestTopic(topic_name="t", partitions=(
        mod.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0),)),))
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.DESCRIBE)), req)
    assert body.error_code == ErrorCode.group_authorization_failed
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.READ)), req)
    assert body.error_code == ErrorCode.none
    assert body.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    assert body.responses[0].topic_id == T.topic_id  # Kafka names the real id

    cls, mod = _request("delete_share_group_offsets", 0)
    req = cls(group_id="g", topics=(mod.DeleteShareGroupOffsetsRequestTopic(topic_name="t"),))
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.READ)), req)
    assert body.error_code == ErrorCode.group_authorization_failed  # Kafka: DELETE on the group
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.DELETE)), req)
    assert body.responses[0].error_code == ErrorCode.topic_authorization_failed

    cls, mod = _request("describe_share_group_offsets", 1)
    req = cls(groups=(mod.DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=(
        mod.DescribeShareGroupOffsetsRequestTopic(topic_name="t", partitions=(0,)),)),))
    body = await _roundtrip(dispatch(allow(Res.GROUP, "other", Op.DESCRIBE)), req)
    assert body.groups[0].error_code == ErrorCode.group_authorization_failed
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.DESCRIBE)), req)
    part = body.groups[0].topics[0].partitions[0]
    assert part.error_code == ErrorCode.topic_authorization_failed and part.start_offset == -1


async def test_group_configs_need_describe_configs_and_alter_configs(dispatch):
    cls, mod = _request("describe_configs", 4)
    req = cls(resources=(mod.DescribeConfigsResource(resource_type=32, resource_name="g", configuration_keys=None),),
              include_synonyms=False, include_documentation=False)
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.READ)), req)
    assert body.results[0].error_code == ErrorCode.group_authorization_failed
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.ALTER_CONFIGS)), req)  # implies DESCRIBE_CONFIGS
    assert body.results[0].error_code == ErrorCode.none
    cls, mod = _request("incremental_alter_configs", 1)
    req = cls(resources=(mod.AlterConfigsResource(resource_type=32, resource_name="g", configs=(
        mod.AlterableConfig(name="share.delivery.count.limit", config_operation=0, value="4"),)),),
        validate_only=True)
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.DESCRIBE_CONFIGS)), req)
    assert body.responses[0].error_code == ErrorCode.group_authorization_failed
    body = await _roundtrip(dispatch(allow(Res.GROUP, "g", Op.ALTER_CONFIGS)), req)
    assert body.responses[0].error_code == ErrorCode.none


async def test_share_fetch_keeps_unreadable_partitions_in_the_session_and_answers_them(svc):  # noqa: F811
    async def denied(name: str) -> bool:
        return name != TOPIC.name
    out = await svc.share_fetch(conn_id=1, group_id="g", member_id="m1", epoch=0,
                                params=__import__("kshare_sidecar.share.manager", fromlist=["x"]).FetchParams(
                                    max_wait_ms=50), topics=[(TOPIC.topic_id, 0, [])], forgotten=[], readable=denied)
    assert [(p.partition, p.error, b"".join(p.records)) for p in out.partitions] == [(0, ErrorCode.topic_authorization_failed,
                                                                           b"")]
    # incremental fetch (nothing re-sent): still in the session, still answered; acks not applied
    out = await svc.share_fetch(conn_id=1, group_id="g", member_id="m1", epoch=1,
                                params=__import__("kshare_sidecar.share.manager", fromlist=["x"]).FetchParams(
                                    max_wait_ms=50), topics=[(TOPIC.topic_id, 0, [AckBatch(0, 9, (1,))])],
                                forgotten=[], readable=denied)
    part = out.partitions[0]
    assert part.error == ErrorCode.topic_authorization_failed and part.ack_error == ErrorCode.topic_authorization_failed
    out = await svc.share_acknowledge(conn_id=1, group_id="g", member_id="m1", epoch=2,
                                      topics=[(TOPIC.topic_id, 0, [AckBatch(0, 9, (1,))])], readable=denied)
    assert [p.error for p in out.partitions] == [ErrorCode.topic_authorization_failed]
    # the same member with READ: records flow
    out = await fetch(svc, "m1", 3, topics=[])
    assert out.partitions and out.partitions[0].acquired
    assert TP in {(p.topic_id, p.partition) for p in out.partitions}


async def test_share_group_describe_authorized_operations(dispatch, env):  # noqa: F811
    env.coordinator.ensure_group("mine").group_epoch = 1
    cls, _ = _request("share_group_describe", 1)
    body = await _roundtrip(dispatch(allow(Res.GROUP, "mine", Op.READ)),
                            cls(group_ids=("mine",), include_authorized_operations=True))
    assert body.groups[0].authorized_operations == (1 << 3) | (1 << 8)  # READ, DESCRIBE (implied)
    body = await _roundtrip(dispatch(allow(Res.GROUP, "mine", Op.READ)),
                            cls(group_ids=("mine",), include_authorized_operations=False))
    assert body.groups[0].authorized_operations == -(2**31)


async def test_metadata_hides_topics_without_describe():
    import uuid as _uuid

    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    from kshare_sidecar.backend.types import TopicInfo

    seen, hidden = TopicInfo("seen", _uuid.UUID(int=1), 1), TopicInfo("hidden", _uuid.UUID(int=2), 1)
    registry = build_registry(InMemoryTopicCatalog([seen, hidden]))
    dispatcher = Dispatcher(registry, NODE, authorizer=FixedAuthorizer(allow(Res.TOPIC, "seen", Op.READ)))
    body = await _roundtrip(dispatcher, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                        include_topic_authorized_operations=False))
    assert [t.name for t in body.topics] == ["seen"]
    body = await _roundtrip(dispatcher, MetadataRequest(topics=(
        MetadataRequestTopic(name="hidden", topic_id=None), MetadataRequestTopic(name="missing", topic_id=None),
        MetadataRequestTopic(name=None, topic_id=hidden.topic_id)), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    assert [(t.name, t.topic_id, t.error_code) for t in body.topics] == [
        ("hidden", None, ErrorCode.topic_authorization_failed),  # existence not disclosed
        ("missing", None, ErrorCode.topic_authorization_failed),
        (None, hidden.topic_id, ErrorCode.topic_authorization_failed)]


async def test_find_coordinator_needs_describe():
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    dispatcher = Dispatcher(build_registry(InMemoryTopicCatalog()), NODE,
                            authorizer=FixedAuthorizer(allow(Res.GROUP, "g", Op.READ)))
    body = await _roundtrip(dispatcher, FindCoordinatorRequest(key_type=0, coordinator_keys=("g", "other")))
    assert [(c.key, c.error_code) for c in body.coordinators] == [
        ("g", ErrorCode.none), ("other", ErrorCode.group_authorization_failed)]
    body = await _roundtrip(dispatcher, FindCoordinatorRequest(key_type=1, coordinator_keys=("txn",)))
    assert body.coordinators[0].error_code == ErrorCode.transactional_id_authorization_failed


async def test_metadata_auto_creation_needs_create():
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    def ask(*acls):
        dispatcher = Dispatcher(build_registry(InMemoryTopicCatalog()), NODE, authorizer=FixedAuthorizer(*acls))
        return _roundtrip(dispatcher, MetadataRequest(topics=(MetadataRequestTopic(name="new", topic_id=None),),
                                                      allow_auto_topic_creation=True,
                                                      include_topic_authorized_operations=False))

    body = await ask(allow(Res.TOPIC, "new", Op.DESCRIBE))
    assert body.topics[0].error_code == ErrorCode.topic_authorization_failed  # no CREATE: never created
    body = await ask(allow(Res.TOPIC, "new", Op.DESCRIBE), allow(Res.CLUSTER, "kafka-cluster", Op.CREATE))
    assert body.topics[0].error_code == ErrorCode.unknown_topic_or_partition  # left to the backend


async def test_backend_config_resources_are_checked_before_asking_the_backend():
    """Describe/IncrementalAlterConfigs for TOPIC / BROKER resources go to the backend as the
    sidecar: Kafka's DESCRIBE_CONFIGS / ALTER_CONFIGS checks for the client happen first."""
    from kio.schema.describe_configs.v4 import request as d4

    from kshare_sidecar.api.context import NodeIdentity, RequestContext
    from kshare_sidecar.passthrough import mixed

    class Pool:
        asked: list = []

        def version(self, api_key, highest):
            return highest

        async def call(self, node, request):
            self.asked.append(request)
            raise AssertionError("nothing may reach the backend")

    ctx = RequestContext(conn_id=1, client_id="t", client_host="h", client_port=1, node=NodeIdentity(1, "h", 1),
                         api_key=32, api_version=4, correlation_id=1,
                         authorizer=FixedAuthorizer(allow(Res.TOPIC, "t", Op.READ)))
    handler = mixed.configs(None, Pool(), 32, "results", lambda: 1)
    req = d4.DescribeConfigsRequest(resources=(
        d4.DescribeConfigsResource(resource_type=2, resource_name="t", configuration_keys=None),
        d4.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=None)),
        include_synonyms=False, include_documentation=False)
    out = await handler(ctx, None, req)
    assert [r["error_code"] for r in out["results"]] == [ErrorCode.topic_authorization_failed,
                                                         ErrorCode.cluster_authorization_failed]
    assert not Pool.asked
