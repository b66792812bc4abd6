"""DescribeTopicPartitions and DescribeCluster (passthrough/mixed.py) carry the authorized operations of
the principal the client's requests are authorized as (api.metadata.operations_source): the
backend's answer is computed for the sidecar's principal."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_topic_partitions.v0 import request as q
from kio.schema.describe_topic_partitions.v0 import response as r
from kio.schema.errors import ErrorCode

from kshare_sidecar.api import NodeIdentity, RequestContext
from kshare_sidecar.auth.acls import NOT_PROVIDED, Acl, AclSet, Decider, Op, Pattern, Permission, Res
from kshare_sidecar.passthrough.mixed import describe_cluster, describe_topic_partitions

NODE = NodeIdentity(node_id=7, host="sidecar.test", port=19092, cluster_id="kshare-test", controller_id=7)
SIDECARS = 1 << Op.READ | 1 << Op.WRITE | 1 << Op.DESCRIBE  # what the backend computes for the sidecar


class _Pool:
    cluster_id = "backend"
    versions = {60: (0, 1), 75: (0, 0)}

    async def call(self, node: Any, request: Any) -> Any:
        return r.DescribeTopicPartitionsResponse(
            throttle_time=datetime.timedelta(0), next_cursor=None, topics=(r.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.none, name="orders", topic_id=uuid.uuid4(), is_internal=False, partitions=(),
                topic_authorized_operations=SIDECARS),))

    async def cluster_authorized_operations(self) -> int:
        return 1 << Op.DESCRIBE


class _Authorizer:
    async def decider(self, principal: str, host: str, protocol: str) -> Decider:
        return Decider(AclSet([Acl(int(Res.TOPIC), "orders", int(Pattern.LITERAL), "User:alice", "*", int(Op.READ),
                                   int(Permission.ALLOW))]), principal, host)


def _ctx(authorizer: Any = None) -> RequestContext:
    return RequestContext(conn_id=1, client_id="c", client_host="10.0.0.9", client_port=1, node=NODE, api_key=75,
                          api_version=0, correlation_id=1, principal="User:alice", security_protocol="SASL_SSL",
                          authorizer=authorizer)


async def _topic_ops(ctx: RequestContext, backend_operations: bool = True) -> int:
    handler = describe_topic_partitions(_Pool(), frozenset(), backend_operations)  # type: ignore[arg-type]
    answer = await handler(ctx, None, q.DescribeTopicPartitionsRequest(
        topics=(q.TopicRequest(name="orders"),), response_partition_limit=100, cursor=None))
    (topic,) = answer.topics
    return topic.topic_authorized_operations


async def test_describe_topic_partitions_operations_are_the_clients():
    assert await _topic_ops(_ctx()) == SIDECARS  # everything forwarded runs as the sidecar
    assert await _topic_ops(_ctx(_Authorizer())) == 1 << Op.READ | 1 << Op.DESCRIBE  # alice's, by the ACLs
    assert await _topic_ops(_ctx(), backend_operations=False) == NOT_PROVIDED


async def test_describe_cluster_operations_only_when_asked():
    handler = describe_cluster(_Pool(), True)  # type: ignore[arg-type]
    asked = await handler(_ctx(), None, DescribeClusterRequest(include_cluster_authorized_operations=True,
                                                                endpoint_type=1))
    assert asked["cluster_authorized_operations"] == 1 << Op.DESCRIBE
    plain = await handler(_ctx(), None, DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                                endpoint_type=1))
    assert plain["cluster_authorized_operations"] == NOT_PROVIDED
    alice = await handler(_ctx(_Authorizer()), None, DescribeClusterRequest(include_cluster_authorized_operations=True,
                                                                             endpoint_type=1))
    assert alice["cluster_authorized_operations"] == 0  # no DESCRIBE on the cluster
