"""DescribeConfigs (key 32, v1–4) and IncrementalAlterConfigs (key 44, v0–1) for GROUP resources.

The sidecar holds per-group ``share.*`` configs (resource type GROUP = 32 on the wire, Kafka's
``ConfigResource.Type``; librdkafka maps its ``ResourceType.GROUP`` to 32 as well). Other
resource types belong to the backend cluster: each such resource is answered with
INVALID_REQUEST and a message saying where to ask. A failed resource never affects another one.
With ``authorizer.class.name = backend`` a GROUP resource needs DESCRIBE_CONFIGS (describe) or
ALTER_CONFIGS (alter) on the group, else GROUP_AUTHORIZATION_FAILED, as Kafka's ConfigHelper and
ControllerApis answer.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.constants import ApiKey, ConfigResourceType, ConfigSource
from ..group.admin import AdminError, AdminService
from ..config import GROUP_CONFIGS
from ..config.settings import BY_KEY
from ..cluster.membership import PEER_CLIENT_ID
from ..auth.acls import Op, Res
from .context import RequestContext, acl_of
from .registry import ApiRegistry

def _not_served(resource_type: int) -> str:
    try:
        kind = ConfigResourceType(resource_type).name
    except ValueError:
        kind = f"type {resource_type}"
    return (f"kshare serves only GROUP (32) configs for share groups; {kind} configs live on the backend "
            "cluster: ask it directly")


def make_describe_configs(admin: AdminService):
    async def describe_configs(ctx: RequestContext, header, req) -> dict[str, Any]:
        synonyms = bool(getattr(req, "include_synonyms", False))
        docs = bool(getattr(req, "include_documentation", False))
        acl = await acl_of(ctx)
        results = []
        for r in req.resources:
            res = {"error_code": ErrorCode.none, "error_message": None, "resource_type": r.resource_type,
                   "resource_name": r.resource_name, "configs": ()}
            if r.resource_type != ConfigResourceType.GROUP:
                res["error_code"], res["error_message"] = ErrorCode.invalid_request, _not_served(r.resource_type)
            elif not await acl.permits(Op.DESCRIBE_CONFIGS, Res.GROUP, r.resource_name):
                res["error_code"], res["error_message"] = ErrorCode.group_authorization_failed, \
                    "Group authorization failed."
            elif not r.resource_name:
                res["error_code"], res["error_message"] = ErrorCode.invalid_group_id, "the group id must not be empty"
            else:
                keys = None if r.configuration_keys is None else list(r.configuration_keys)
                res["configs"] = tuple(_entry(v, synonyms, docs) for v in admin.describe_configs(r.resource_name, keys))
            results.append(res)
        return {"throttle_time": 0, "results": tuple(results)}

    return describe_configs


def _entry(v, synonyms: bool, docs: bool) -> dict[str, Any]:
    syn: tuple[dict[str, Any], ...] = ()
    if synonyms:
        chain = []
        if v.source == ConfigSource.GROUP_CONFIG:
            chain.append({"name": v.name, "value": v.value, "source": ConfigSource.GROUP_CONFIG})
        if v.name in GROUP_CONFIGS:  # the sidecar setting the default comes from (Kafka's broker synonym):
            setting = GROUP_CONFIGS[v.name]  # as set by the operator, then its built-in default, as Kafka lists them
            if v.default_source == ConfigSource.STATIC_BROKER_CONFIG:
                chain.append({"name": setting, "value": v.default, "source": ConfigSource.STATIC_BROKER_CONFIG})
            chain.append({"name": setting, "value": _builtin(setting), "source": ConfigSource.DEFAULT_CONFIG})
        else:
            chain.append({"name": v.name, "value": v.default, "source": ConfigSource.DEFAULT_CONFIG})
        syn = tuple(chain)
    return {"name": v.name, "value": v.value, "read_only": False,
            "config_source": v.source,
            "is_sensitive": False, "synonyms": syn, "config_type": v.config_type,
            "documentation": v.doc if docs else None}


def _builtin(setting: str) -> str:
    """A sidecar setting's built-in default as Kafka writes config values (booleans lowercase)."""
    value = BY_KEY[setting].default
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _describe_error(ctx, req, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "results": tuple(
        {"error_code": code, "error_message": message, "resource_type": r.resource_type,
         "resource_name": r.resource_name, "configs": ()} for r in req.resources)}


def make_incremental_alter_configs(admin: AdminService):
    async def incremental_alter_configs(ctx: RequestContext, header, req) -> dict[str, Any]:
        acl = await acl_of(ctx)
        responses = []
        for r in req.resources:
            code, message = ErrorCode.none, None
            try:
                if r.resource_type != ConfigResourceType.GROUP:
                    raise AdminError(ErrorCode.invalid_request, _not_served(r.resource_type))
                if not await acl.permits(Op.ALTER_CONFIGS, Res.GROUP, r.resource_name):
                    raise AdminError(ErrorCode.group_authorization_failed, None)
                if not r.resource_name:
                    raise AdminError(ErrorCode.invalid_group_id, "the group id must not be empty")
                changes = admin.check_config_ops((c.name, c.config_operation, c.value) for c in r.configs)
                admin.check_group_consistency(r.resource_name, changes)
                if not req.validate_only and changes:
                    # a cluster of sidecars: another sidecar's forward is applied here, never forwarded again
                    await admin.alter_configs(r.resource_name, changes, forwarded=getattr(ctx, "client_id", None) == PEER_CLIENT_ID)
            except AdminError as exc:
                code, message = exc.code, exc.message
            responses.append({"error_code": code, "error_message": message, "resource_type": r.resource_type,
                              "resource_name": r.resource_name})
        return {"throttle_time": 0, "responses": tuple(responses)}

    return incremental_alter_configs


def _alter_error(ctx, req, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "responses": tuple(
        {"error_code": code, "error_message": message, "resource_type": r.resource_type,
         "resource_name": r.resource_name} for r in req.resources)}


def register(registry: ApiRegistry, admin: AdminService) -> None:
    registry.register(ApiKey.DESCRIBE_CONFIGS, 1, 4, make_describe_configs(admin), error_response=_describe_error)
    registry.register(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, make_incremental_alter_configs(admin), error_response=_alter_error)
