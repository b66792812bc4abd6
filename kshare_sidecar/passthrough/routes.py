"""Where each forwarded API goes, and how its requests split and its responses merge (pure).

Routing model (docs/architecture.md, "Pass-through"): clients see one broker, the sidecar. So a
partition-scoped request may name partitions led by different backend brokers; it is split per
backend leader and the answers are merged. Coordinator-scoped requests go to the backend
coordinator of their group / transactional id; a request naming several keys is split the same
way. Everything else goes to any backend broker (KRaft brokers forward controller work).

Everything here works on kio entities of the client's negotiated version; records stay
``bytes`` (kio's ``Records`` field is never parsed).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.constants import ApiKey


class Route(enum.Enum):
    ANY = "any"  # any backend broker
    LEADER = "leader"  # partition leader(s): split/merge
    GROUP = "group"  # group coordinator(s)
    TXN = "txn"  # transaction coordinator(s)
    ALL = "all"  # every backend broker, responses merged (ListTransactions)


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """Where the topics and partitions sit in one partition-scoped API."""

    req_topics: str
    req_parts: str
    req_part_index: str | None  # None: the partitions list holds plain ints
    resp_topics: str
    resp_parts: str
    resp_part_index: str


@dataclass(frozen=True, slots=True)
class KeySpec:
    """A coordinator-scoped API: the key field (single) or key list (batched) and its answer list."""

    req_field: str
    req_item_key: str | None = None  # batched: attribute of each item (None: items are the keys)
    resp_list: str | None = None  # batched: the response list to concatenate
    resp_item_key: str | None = None


PARTITIONS: dict[int, PartitionSpec] = {
    0: PartitionSpec("topic_data", "partition_data", "index", "responses", "partition_responses", "index"),
    1: PartitionSpec("topics", "partitions", "partition", "responses", "partitions", "partition_index"),
    2: PartitionSpec("topics", "partitions", "partition_index", "topics", "partitions", "partition_index"),
    21: PartitionSpec("topics", "partitions", "partition_index", "topics", "partitions", "partition_index"),
    23: PartitionSpec("topics", "partitions", "partition", "topics", "partitions", "partition"),
    61: PartitionSpec("topics", "partition_indexes", None, "topics", "partitions", "partition_index"),
    # ShareFetch / ShareAcknowledge: only of a share group the backend serves (passthrough/native.py)
    78: PartitionSpec("topics", "partitions", "partition_index", "responses", "partitions", "partition_index"),
    79: PartitionSpec("topics", "partitions", "partition_index", "responses", "partitions", "partition_index"),
}

#: Requests whose error answers mirror their partitions although they are coordinator-scoped.
MIRRORED: dict[int, PartitionSpec] = {
    8: PartitionSpec("topics", "partitions", "partition_index", "topics", "partitions", "partition_index"),
    28: PartitionSpec("topics", "partitions", "partition_index", "topics", "partitions", "partition_index"),
    24: PartitionSpec("v3_and_below_topics", "partitions", None, "results_by_topic_v3_and_below",
                      "results_by_partition", "partition_index"),
}

GROUP_KEYS: dict[int, KeySpec] = {
    8: KeySpec("group_id"), 11: KeySpec("group_id"), 12: KeySpec("group_id"), 13: KeySpec("group_id"),
    14: KeySpec("group_id"), 28: KeySpec("group_id"), 47: KeySpec("group_id"), 68: KeySpec("group_id"),
    15: KeySpec("groups", None, "groups", "group_id"),
    69: KeySpec("group_ids", None, "groups", "group_id"),
    # share-group requests of a group the backend serves (passthrough/native.py)
    76: KeySpec("group_id"), 91: KeySpec("group_id"), 92: KeySpec("group_id"),
}
#: OffsetFetch: one group up to v7, a batch from v8.
OFFSET_FETCH_SINGLE = KeySpec("group_id")
OFFSET_FETCH_BATCH = KeySpec("groups", "group_id", "groups", "group_id")

TXN_KEYS: dict[int, KeySpec] = {
    22: KeySpec("transactional_id"), 24: KeySpec("v3_and_below_transactional_id"), 25: KeySpec("transactional_id"),
    26: KeySpec("transactional_id"),
    65: KeySpec("transactional_ids", None, "transaction_states", "transactional_id"),
}

#: APIs a client never sends to a broker, or that only brokers/controllers speak: never forwarded.
INTERNAL = frozenset({4, 5, 6, 7, 27, 52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 80, 81, 82,
                      83, 84, 85, 86, 87})
#: Served by the sidecar alone (share groups, its own view of the cluster).
LOCAL_ONLY = frozenset({3, 10, 17, 18, 36, 60, 76, 77, 78, 79, 90, 91, 92})

#: Highest version forwarded where a later one is broker-to-broker only.
CLAMP_MAX = {24: 3}


def route(api_key: int, version: int) -> tuple[Route, KeySpec | PartitionSpec | None]:
    if api_key in PARTITIONS:
        return Route.LEADER, PARTITIONS[api_key]
    if api_key == ApiKey.OFFSET_FETCH:
        return Route.GROUP, OFFSET_FETCH_BATCH if version >= 8 else OFFSET_FETCH_SINGLE
    if api_key in GROUP_KEYS:
        return Route.GROUP, GROUP_KEYS[api_key]
    if api_key in TXN_KEYS:
        return Route.TXN, TXN_KEYS[api_key]
    if api_key == ApiKey.LIST_TRANSACTIONS:
        return Route.ALL, None
    return Route.ANY, None


# -- splitting ------------------------------------------------------------------------------------

def topic_key(topic: Any) -> Any:
    """A request/response topic's identity: its name, or its id (Fetch v13+)."""
    for attr in ("name", "topic"):
        value = getattr(topic, attr, None)
        if value is not None:
            return value
    return getattr(topic, "topic_id", None)


def split_partitions(
    body: Any, spec: PartitionSpec, leader: Callable[[Any, int], int]
) -> dict[int, Any]:
    """Node id → a copy of ``body`` naming only the partitions that node leads."""
    per_node: dict[int, dict[int, tuple[Any, list[Any]]]] = {}  # node -> topic index -> (topic, parts)
    for t_index, topic in enumerate(getattr(body, spec.req_topics)):
        key = topic_key(topic)
        for part in getattr(topic, spec.req_parts):
            index = int(part) if spec.req_part_index is None else int(getattr(part, spec.req_part_index))
            node = leader(key, index)
            topics = per_node.setdefault(node, {})
            topics.setdefault(t_index, (topic, []))[1].append(part)
    topics_in = getattr(body, spec.req_topics)
    out = {}
    for node, topics in per_node.items():
        sub = tuple(dataclasses.replace(topics_in[i], **{spec.req_parts: tuple(parts)})
                    for i, (_, parts) in sorted(topics.items()))
        out[node] = dataclasses.replace(body, **{spec.req_topics: sub})
    return out


def merge_partitions(responses: list[Any], spec: PartitionSpec) -> Any:
    """One response from several: topics with the same identity get their partitions joined."""
    first = responses[0]
    merged: dict[Any, tuple[Any, list[Any]]] = {}
    for resp in responses:
        for topic in getattr(resp, spec.resp_topics):
            key = topic_key(topic)
            if key in merged:
                merged[key][1].extend(getattr(topic, spec.resp_parts))
            else:
                merged[key] = (topic, list(getattr(topic, spec.resp_parts)))
    topics = tuple(dataclasses.replace(t, **{spec.resp_parts: tuple(p)}) for t, p in merged.values())
    return dataclasses.replace(first, **{spec.resp_topics: topics, **_throttle(responses)})


def request_keys(body: Any, spec: KeySpec) -> list[Any]:
    value = getattr(body, spec.req_field)
    if spec.resp_list is None:
        return [value]
    return [item if spec.req_item_key is None else getattr(item, spec.req_item_key) for item in value]


def split_keys(body: Any, spec: KeySpec, node_of: Callable[[Any], int]) -> dict[int, Any]:
    """Node id → a copy of a batched ``body`` naming only the keys that node coordinates."""
    if spec.resp_list is None:
        return {node_of(getattr(body, spec.req_field)): body}
    per_node: dict[int, list[Any]] = {}
    for item in getattr(body, spec.req_field):
        key = item if spec.req_item_key is None else getattr(item, spec.req_item_key)
        per_node.setdefault(node_of(key), []).append(item)
    return {n: dataclasses.replace(body, **{spec.req_field: tuple(items)}) for n, items in per_node.items()}


def merge_lists(responses: list[Any], field: str) -> Any:
    items = tuple(item for r in responses for item in getattr(r, field))
    return dataclasses.replace(responses[0], **{field: items, **_throttle(responses)})


def _throttle(responses: list[Any]) -> dict[str, Any]:
    if not hasattr(responses[0], "throttle_time"):
        return {}
    return {"throttle_time": max(r.throttle_time for r in responses)}


def error_codes(entity: Any) -> Iterable[int]:
    """Every ``error_code`` in a (small) response, depth first — to notice NOT_COORDINATOR."""
    if not dataclasses.is_dataclass(entity):
        return
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.name == "error_code":
            yield int(value)
        elif isinstance(value, tuple):
            for item in value:
                yield from error_codes(item)
        elif dataclasses.is_dataclass(value):
            yield from error_codes(value)


# -- error answers ----------------------------------------------------------------------------------

@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def item_class(cls: type, field: str) -> type | None:
    """The entity class inside ``cls.field`` (a tuple of entities or one entity), if any."""
    tp = _hints(cls)[field]
    for arg in (tp, *typing.get_args(tp)):
        if isinstance(arg, type) and dataclasses.is_dataclass(arg):
            return arg
        for inner in typing.get_args(arg):
            if isinstance(inner, type) and dataclasses.is_dataclass(inner):
                return inner
    return None


def error_entity(cls: type, code: ErrorCode, **known: Any) -> Any:
    """An instance of ``cls`` carrying ``code`` in every error field, "unknown" (-1) numbers,
    empty lists and null/empty strings and records, with ``known`` fields as given."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in known:
            kwargs[f.name] = known[f.name]
            continue
        if f.name == "error_code" or f.name.endswith("_error_code"):
            kwargs[f.name] = code
            continue
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        kwargs[f.name] = _placeholder(cls, f)
    return cls(**kwargs)


def _placeholder(cls: type, f: dataclasses.Field) -> Any:
    import datetime
    import types

    tp = _hints(cls)[f.name]
    kafka_type = f.metadata.get("kafka_type", "")
    nullable = typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)
    if typing.get_origin(tp) is tuple:
        return ()
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return error_entity(tp, ErrorCode.none)
    if nullable:
        return None
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(0)
    if kafka_type.startswith("datetime"):  # the epoch (kio cannot express Kafka's -1 "unknown")
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        import uuid
        return uuid.UUID(int=0)
    if f.name == "throttle_time_ms":
        return 0
    return -1


def partition_error_response(resp_cls: type, body: Any, spec: PartitionSpec, code: ErrorCode,
                             message: str | None = None) -> Any:
    """The response to ``body`` with ``code`` on every partition it named (and ``message``, where
    a partition has an error message)."""
    topic_cls = item_class(resp_cls, spec.resp_topics)
    part_cls = item_class(topic_cls, spec.resp_parts) if topic_cls is not None else None
    if topic_cls is None or part_cls is None:
        return None
    topic_fields = {f.name for f in dataclasses.fields(topic_cls)}
    said = {"error_message": message} if message is not None and "error_message" in {
        f.name for f in dataclasses.fields(part_cls)} else {}
    topics = []
    for topic in getattr(body, spec.req_topics):
        known = {a: getattr(topic, a) for a in ("name", "topic", "topic_id")
                 if a in topic_fields and hasattr(topic, a)}
        parts = tuple(
            error_entity(part_cls, code, **said, **{spec.resp_part_index: int(p) if spec.req_part_index is None
                                                   else int(getattr(p, spec.req_part_index))})
            for p in getattr(topic, spec.req_parts))
        topics.append(error_entity(topic_cls, ErrorCode.none, **known, **{spec.resp_parts: parts}))
    return error_entity(resp_cls, ErrorCode.none, **{spec.resp_topics: tuple(topics)})


def keyed_error_response(resp_cls: type, body: Any, spec: KeySpec, code: ErrorCode) -> Any:
    """The response to a batched coordinator request with ``code`` on every key."""
    if spec.resp_list is None or spec.resp_item_key is None:
        return None
    item_cls = item_class(resp_cls, spec.resp_list)
    if item_cls is None:
        return None
    items = tuple(error_entity(item_cls, code, **{spec.resp_item_key: key}) for key in request_keys(body, spec))
    return error_entity(resp_cls, ErrorCode.none, **{spec.resp_list: items})


def top_level_error_response(resp_cls: type, code: ErrorCode) -> Any:
    """A response whose top-level ``error_code`` carries ``code``; ``None`` if it has none."""
    if "error_code" not in {f.name for f in dataclasses.fields(resp_cls)}:
        return None
    return error_entity(resp_cls, code)
