"""Authorized operations in Metadata (and, through api.metadata.cluster_operations, DescribeCluster):
whose they are (api.metadata.operations_source) — the client's by the backend's ACLs when the
sidecar authorizes, the backend's (the sidecar's principal) when everything forwarded runs as the
sidecar, "not provided" when the backend authorizes each client itself; everything the resource
type supports without an authorizer and without pass-through, as a broker without an authorizer."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v10.request import MetadataRequest as MetadataRequestV10
from kio.schema.metadata.v10.request import MetadataRequestTopic as TopicV10
from kio.schema.metadata.v12 import response as md12

from kshare_sidecar.api import RequestContext
from kshare_sidecar.api.metadata import MetadataHandler
from kshare_sidecar.auth.acls import NOT_PROVIDED, SUPPORTED_OPERATIONS, Acl, AclSet, Decider, Op, Pattern, \
    Permission, Res

from .conftest import NODE

TOPIC_ALL = sum(1 << int(op) for op in SUPPORTED_OPERATIONS[Res.TOPIC])
CLUSTER_ALL = sum(1 << int(op) for op in SUPPORTED_OPERATIONS[Res.CLUSTER])


def _request(include: bool = True, *names: str) -> MetadataRequestV10:
    return MetadataRequestV10(topics=tuple(TopicV10(name=n, topic_id=None) for n in names or ("orders", "nope")),
                              allow_auto_topic_creation=False, include_cluster_authorized_operations=include,
                              include_topic_authorized_operations=include)


async def test_without_an_authorizer_or_a_backend_every_supported_operation(call) -> None:
    _, body = await call(_request())
    orders, nope = body.topics
    assert orders.topic_authorized_operations == nope.topic_authorized_operations == TOPIC_ALL
    assert body.cluster_authorized_operations == CLUSTER_ALL
    _, body = await call(_request(False))
    assert {t.topic_authorized_operations for t in body.topics} == {NOT_PROVIDED}
    assert body.cluster_authorized_operations == NOT_PROVIDED


class _Backend:
    """The backend's own answers, computed for the sidecar's principal: READ and DESCRIBE on topics,
    DESCRIBE on the cluster."""

    def __init__(self) -> None:
        self.asked: list[bool] = []

    async def metadata(self, names, *, auto_create=False, authorized_operations=False) -> Any:
        self.asked.append(authorized_operations)
        ops = (1 << Op.READ | 1 << Op.DESCRIBE) if authorized_operations else NOT_PROVIDED
        return md12.MetadataResponse(
            throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c", controller_id=1, topics=tuple(
                md12.MetadataResponseTopic(error_code=ErrorCode.none, name=n, topic_id=None, is_internal=False,
                                           partitions=tuple(md12.MetadataResponsePartition(
                                               error_code=ErrorCode.none, partition_index=i, leader_id=1,
                                               leader_epoch=4, replica_nodes=(1,), isr_nodes=(1,),
                                               offline_replicas=()) for i in range(3)),
                                           topic_authorized_operations=ops) for n in names))

    async def cluster_authorized_operations(self) -> int:
        return 1 << Op.DESCRIBE


class _Authorizer:
    def __init__(self, acls: list[Acl]) -> None:
        self.acls = AclSet(acls)

    async def decider(self, principal: str, host: str, protocol: str) -> Decider:
        return Decider(self.acls, principal, host)


def _ctx(authorizer: Any = None) -> RequestContext:
    return RequestContext(conn_id=1, client_id="c", client_host="10.0.0.9", client_port=1, node=NODE, api_key=3,
                          api_version=10, correlation_id=1, principal="User:alice", security_protocol="SASL_SSL",
                          authorizer=authorizer)


async def _answer(catalog, backend, ctx, *, backend_operations=True) -> dict:
    answer = await MetadataHandler(catalog, backend, backend_operations=backend_operations)(ctx, None,
                                                                                            _request(True, "orders"))
    if isinstance(answer, dict):  # the cluster's operations: a field of v8-v10 only
        return answer
    return {"topics": answer.topics, "cluster_authorized_operations": NOT_PROVIDED}  # the v13 entity


async def test_forwarding_as_the_sidecar_gives_the_backends_operations(catalog) -> None:
    backend = _Backend()
    answer = await _answer(catalog, backend, _ctx())
    (orders,) = answer["topics"]
    assert backend.asked == [True]
    assert orders.topic_authorized_operations == 1 << Op.READ | 1 << Op.DESCRIBE
    assert answer["cluster_authorized_operations"] == 1 << Op.DESCRIBE


async def test_forwarding_as_the_client_without_an_authorizer_provides_none(catalog) -> None:
    """The backend's answer would be the sidecar principal's, not the client's."""
    answer = await _answer(catalog, _Backend(), _ctx(), backend_operations=False)
    assert answer["topics"][0].topic_authorized_operations == NOT_PROVIDED
    assert answer["cluster_authorized_operations"] == NOT_PROVIDED


async def test_the_sidecars_authorizer_gives_the_clients_operations(catalog) -> None:
    def allow(res: Res, name: str, op: Op) -> Acl:
        return Acl(int(res), name, int(Pattern.LITERAL), "User:alice", "*", int(op), int(Permission.ALLOW))

    alice = _Authorizer([allow(Res.TOPIC, "orders", Op.WRITE), allow(Res.TOPIC, "orders", Op.ALTER_CONFIGS),
                         allow(Res.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)])
    answer = await _answer(catalog, _Backend(), _ctx(alice))
    assert answer["topics"][0].topic_authorized_operations == (
        1 << Op.WRITE | 1 << Op.DESCRIBE | 1 << Op.ALTER_CONFIGS | 1 << Op.DESCRIBE_CONFIGS)
    assert answer["cluster_authorized_operations"] == 0  # no DESCRIBE on the cluster: 0, as Kafka
    alice.acls = AclSet([allow(Res.TOPIC, "orders", Op.READ), allow(Res.CLUSTER, "kafka-cluster", Op.ALTER)])
    answer = await _answer(catalog, _Backend(), _ctx(alice))
    assert answer["cluster_authorized_operations"] == 1 << Op.ALTER | 1 << Op.DESCRIBE
