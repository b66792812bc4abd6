"""KIP-1191's topic opt-in (``errors.deadletterqueue.group.enable``) through the sidecar, on a
backend whose topic configs cannot hold it (share/dead_letter_topics.py; docs/extensions.md).

Kafka 4.4 admins create a dead-letter topic with ``--config errors.deadletterqueue.group.enable=true``
or set it with kafka-configs.sh. A backend before 4.4 answers both with INVALID_CONFIG (an unknown
topic config), so on such a backend the sidecar takes the key out of CreateTopics and
IncrementalAlterConfigs before forwarding them, records the value once the backend accepted the
rest, and adds it to DescribeConfigs answers for topics, as a 4.4 broker describes it. Requests
without the key, and every request on a backend that holds the key, pass unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..protocol.constants import ApiKey, ConfigResourceType, ConfigSource, ConfigType
from ..protocol.requests import request_payload
from ..share.dead_letter_topics import DOC, GROUP_ENABLE, DeadLetterTopics, parse_bool
from ..wire import codec
from .pool import BackendPool, decode, make

log = logging.getLogger("kshare.forward")

RawHandler = Callable[[Any, bytes, Callable[[], None]], Awaitable[bytes | None]]
LocalHandler = Callable[[Any, Any, Any], Awaitable[Any]]

_SET, _DELETE = 0, 1


async def probe(pool: BackendPool, topic: str, topics: DeadLetterTopics) -> None:
    """Learn whether the backend's topic configs hold the opt-in (Kafka 4.4 and later): describe
    an existing topic's configs (the state topic) and look for the key."""
    if ApiKey.DESCRIBE_CONFIGS not in pool.versions:
        return
    version = pool.version(ApiKey.DESCRIBE_CONFIGS, pool.versions[ApiKey.DESCRIBE_CONFIGS][1])
    resource = make_resource(version, topic)
    try:
        answer = await pool.call(None, make(ApiKey.DESCRIBE_CONFIGS, version, resources=(resource,),
                                            include_synonyms=False, include_documentation=False))
    except Exception as exc:  # noqa: BLE001 - undecided: the dead-letter writer asks again at its first write
        log.debug("dead-letter opt-in probe failed: %s", exc)
        return
    for result in answer.results:
        if not result.error_code:
            topics.backend_holds_key = any(c.name == GROUP_ENABLE for c in result.configs)
            log.info("the backend's topic configs %s %s", "hold" if topics.backend_holds_key else "cannot hold",
                     GROUP_ENABLE)


def make_resource(version: int, topic: str) -> Any:
    cls = codec.request_class(ApiKey.DESCRIBE_CONFIGS, version)
    resource_cls = cls.__dataclass_fields__["resources"].type.__args__[0]
    return resource_cls(resource_type=ConfigResourceType.TOPIC, resource_name=topic, configuration_keys=None)


def create_topics(inner: RawHandler, topics: DeadLetterTopics) -> RawHandler:
    """CreateTopics (19): the opt-in taken out of each topic's configs and recorded once created."""
    async def handler(conn: Any, frame: bytes, release: Callable[[], None]) -> bytes | None:
        if topics.backend_holds_key is not False:
            return await inner(conn, frame, release)
        decoded = codec.decode_request(frame)
        body = decoded.body
        wanted: dict[str, bool] = {}
        sent = []
        for t in body.topics:
            value = next((c.value for c in t.configs if c.name == GROUP_ENABLE), None)
            enabled = parse_bool(value)
            if enabled is not None:  # a bad value stays: the backend refuses it with INVALID_CONFIG
                wanted[t.name] = enabled
                t = dataclasses.replace(t, configs=tuple(c for c in t.configs if c.name != GROUP_ENABLE))
            sent.append(t)
        if not wanted:
            return await inner(conn, frame, release)
        stripped = request_payload(dataclasses.replace(body, topics=tuple(sent)), decoded.correlation_id,
                                   decoded.header.client_id)
        answer = await inner(conn, stripped, release)
        if answer is not None and not body.validate_only:
            result = decode(19, decoded.api_version, answer[4:])
            for r in result.topics:
                if not r.error_code and r.name in wanted:
                    topics.record(r.name, wanted[r.name])
        return answer

    return handler


def alter_configs(inner: LocalHandler, topics: DeadLetterTopics) -> LocalHandler:
    """IncrementalAlterConfigs (44): SET/DELETE of the opt-in on TOPIC resources kept by kshare."""
    async def handler(ctx: Any, header: Any, req: Any) -> Any:
        if topics.backend_holds_key is not False:
            return await inner(ctx, header, req)
        changes: dict[int, tuple[str, bool | None]] = {}
        sent = []
        for i, r in enumerate(req.resources):
            if r.resource_type == ConfigResourceType.TOPIC:
                ops = [c for c in r.configs if c.name == GROUP_ENABLE]
                op = ops[-1] if len(ops) == 1 else None
                value = parse_bool(op.value) if op is not None and op.config_operation == _SET else None
                if op is not None and (op.config_operation == _DELETE or value is not None):
                    changes[i] = (r.resource_name, value)
                    r = dataclasses.replace(r, configs=tuple(c for c in r.configs if c.name != GROUP_ENABLE))
            sent.append(r)
        if not changes:
            return await inner(ctx, header, req)
        answer = await inner(ctx, header, dataclasses.replace(req, resources=tuple(sent)))
        if not req.validate_only:
            for i, result in enumerate(answer["responses"]):
                if i in changes and not result["error_code"]:
                    topics.record(*changes[i])
        return answer

    return handler


def describe_configs(inner: LocalHandler, topics: DeadLetterTopics) -> LocalHandler:
    """DescribeConfigs (32): a TOPIC's answer lists the opt-in kshare keeps, as Kafka 4.4 lists it."""
    async def handler(ctx: Any, header: Any, req: Any) -> Any:
        answer = await inner(ctx, header, req)
        if topics.backend_holds_key is not False:
            return answer
        docs = bool(getattr(req, "include_documentation", False))
        synonyms_wanted = bool(getattr(req, "include_synonyms", False))
        results = list(answer["results"])
        for i, (r, result) in enumerate(zip(req.resources, results)):
            keys = r.configuration_keys
            if r.resource_type != ConfigResourceType.TOPIC or result["error_code"] or \
                    (keys is not None and GROUP_ENABLE not in keys):
                continue
            name = r.resource_name
            value = "true" if topics.enabled(name) else "false"
            source = ConfigSource.DYNAMIC_TOPIC_CONFIG if topics.explicit(name) else ConfigSource.DEFAULT_CONFIG
            synonyms = ({"name": GROUP_ENABLE, "value": value, "source": source},) \
                if synonyms_wanted and source == ConfigSource.DYNAMIC_TOPIC_CONFIG else ()  # no broker synonym
            entry = {"name": GROUP_ENABLE, "value": value, "read_only": False, "config_source": source,
                     "is_sensitive": False, "synonyms": synonyms, "config_type": ConfigType.BOOLEAN,
                     "documentation": DOC if docs else None}
            configs = [c for c in result["configs"] if c["name"] != GROUP_ENABLE] + [entry]
            results[i] = {**result, "configs": tuple(sorted(configs, key=lambda c: c["name"]))}
        return {**answer, "results": tuple(results)}

    return handler
