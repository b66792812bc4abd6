"""FindCoordinator (key 10, v0–v6): the sidecar coordinates every share group it serves.

librdkafka asks with v0–2 (one ``Key`` + ``KeyType``), Java up to v6 (``CoordinatorKeys`` batch
from v4). Key types, following Kafka's semantics:

- 0 GROUP: this node, whatever the group id (the sidecar is the only node).
- 1 TRANSACTION: with pass-through this node too — the sidecar forwards transactional
  requests to the backend's transaction coordinator; without it COORDINATOR_NOT_AVAILABLE, the
  code a broker gives when it cannot name a coordinator for that key.
- 2 SHARE: broker-internal (share-state coordinator, ``group:topicId:partition`` keys, only valid
  from v6); kshare keeps share state elsewhere and exposes no such coordinator ->
  COORDINATOR_NOT_AVAILABLE on v6, INVALID_REQUEST before v6 (the type did not exist).
- anything else: INVALID_REQUEST, as Kafka does for an unknown coordinator type.

With ``authorizer.class.name = backend``, as Kafka's getCoordinator: DESCRIBE on the GROUP
(GROUP_AUTHORIZATION_FAILED), DESCRIBE on the TRANSACTIONAL_ID (TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
CLUSTER_ACTION on the CLUSTER for SHARE keys (CLUSTER_AUTHORIZATION_FAILED) — before anything else.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..auth.acls import CLUSTER_NAME, Decider, Op, Res
from ..cluster.peers import settle
from ..protocol.constants import ApiKey, CoordinatorType
from .context import RequestContext, acl_of
from .registry import ApiRegistry

API_KEY = ApiKey.FIND_COORDINATOR
MIN_VERSION, MAX_VERSION = 0, 6
_FIRST_BATCHED_VERSION = 4
_FIRST_SHARE_KEY_VERSION = 6

GROUP, TRANSACTION, SHARE = CoordinatorType.GROUP, CoordinatorType.TRANSACTION, CoordinatorType.SHARE


def _coordinator(ctx: RequestContext, key: str, key_type: int, transactions: bool = False,
                 cluster: Any = None) -> dict[str, Any]:
    if key_type == GROUP and cluster is not None:
        # a cluster of sidecars: the sidecar owning the group record's state partition
        owner = cluster.coordinator(key)
        found = cluster.node(owner, ctx.listener) if owner is not None else None
        if owner == ctx.node.node_id:
            found = ctx.node
        if found is None:
            return _failed(key, ErrorCode.coordinator_not_available, "the group's sidecar is being elected")
        return {"key": key, "node_id": found.node_id, "host": found.host, "port": found.port,
                "error_code": ErrorCode.none, "error_message": None}
    if key_type == GROUP or (key_type == TRANSACTION and transactions):
        node = ctx.node
        return {
            "key": key,
            "node_id": node.node_id,
            "host": node.host,
            "port": node.port,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
    if key_type == TRANSACTION:
        return _failed(key, ErrorCode.coordinator_not_available, "kshare has no transaction coordinator")
    if key_type == SHARE and ctx.api_version >= _FIRST_SHARE_KEY_VERSION:
        return _failed(key, ErrorCode.coordinator_not_available, "kshare exposes no share-state coordinator")
    return _failed(key, ErrorCode.invalid_request, f"unknown coordinator type {key_type}")


async def _denied(acl: Decider, key: str, key_type: int) -> dict[str, Any] | None:
    if key_type == GROUP and not await acl.permits(Op.DESCRIBE, Res.GROUP, key):
        return _failed(key, ErrorCode.group_authorization_failed, "Group authorization failed.")
    if key_type == TRANSACTION and not await acl.permits(Op.DESCRIBE, Res.TRANSACTIONAL_ID, key):
        return _failed(key, ErrorCode.transactional_id_authorization_failed,
                       "Transactional Id authorization failed.")
    if key_type == SHARE and not await acl.permits(Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME):
        return _failed(key, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    return None


def _failed(key: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


def _shape(ctx: RequestContext, coordinators: list[dict[str, Any]]) -> dict[str, Any]:
    """Canonical (list of coordinators) -> v0–3 single-key or v4+ batched shape."""
    if ctx.api_version >= _FIRST_BATCHED_VERSION:
        return {"throttle_time": 0, "coordinators": coordinators}
    (single,) = coordinators
    return {"throttle_time": 0, **single}


def _keys(ctx: RequestContext, request: Any) -> tuple[list[str], int]:
    key_type = int(getattr(request, "key_type", GROUP))
    if ctx.api_version >= _FIRST_BATCHED_VERSION:
        return list(request.coordinator_keys), key_type
    return [request.key], key_type


def local(cluster: Any = None):
    async def find_coordinator(ctx: RequestContext, header: Any, request: Any) -> dict[str, Any]:
        keys, key_type = _keys(ctx, request)
        acl = await acl_of(ctx)
        await settle(cluster)  # lapsed: name only peers it can reach (cluster/peers.py)
        return _shape(ctx, [await _denied(acl, key, key_type) or _coordinator(ctx, key, key_type, cluster=cluster)
                            for key in keys])
    return find_coordinator


find_coordinator = local()


def forwarding(check, cluster: Any = None):
    """Pass-through FindCoordinator: transactional ids are coordinated here too (requests are
    forwarded), and every group / transaction key is first looked up on the backend with
    ``await check(key_type, key) -> (ErrorCode, message) | None`` — that lookup is what makes a
    Kafka broker create ``__consumer_offsets`` / ``__transaction_state``, and its error
    (COORDINATOR_NOT_AVAILABLE while they load) is the client's answer."""

    async def find_coordinator(ctx: RequestContext, header: Any, request: Any) -> dict[str, Any]:
        keys, key_type = _keys(ctx, request)
        acl = await acl_of(ctx)
        await settle(cluster)  # lapsed: name only peers it can reach (cluster/peers.py)
        out = []
        for key in keys:
            denied = await _denied(acl, key, key_type)
            if denied is not None:
                out.append(denied)
                continue
            # a sidecar whose lease lapsed (cluster/view.py) answers from its view at once: its
            # backend may be what is cut off, and the client must go on to another sidecar
            lapsed = cluster is not None and cluster.lapsed and key_type == GROUP
            problem = await check(key_type, key) if key_type in (GROUP, TRANSACTION) and not lapsed else None
            out.append(_failed(key, *problem) if problem else _coordinator(ctx, key, key_type, transactions=True,
                                                                           cluster=cluster))
        return _shape(ctx, out)

    return find_coordinator


def coordinator_error_response(
    ctx: RequestContext, request: Any, code: ErrorCode, message: str | None
) -> Any:
    """Every requested key carries the error (Kafka's FindCoordinator error form)."""
    keys, _ = _keys(ctx, request)
    return _shape(ctx, [_failed(key, code, message) for key in keys])


def register(registry: ApiRegistry, *, check=None, cluster: Any = None) -> None:
    """``check``: the pass-through backend lookup (see :func:`forwarding`); ``cluster``: a
    ``ClusterView`` — group keys are coordinated by the sidecar owning the group."""
    registry.register(
        API_KEY, MIN_VERSION, MAX_VERSION,
        forwarding(check, cluster) if check is not None else local(cluster),
        error_response=coordinator_error_response, replace=check is not None or cluster is not None,
    )
