"""Version conversion: build one canonical result, emit whatever version was negotiated.

kio generates one set of classes per API *version* (``metadata.v12.response.MetadataResponseTopic``
and ``metadata.v13.response.MetadataResponseTopic`` are unrelated types), so writing a handler per
version multiplies code. Instead a handler builds one canonical value — usually the newest
version's entity, or plain dicts — and :func:`convert` maps it onto the target class by field
name, recursing into nested entities and tuples of entities:

- a target field the source lacks takes the target's default (a field added in a newer version
  than the source knows); no default -> :class:`ConversionError`;
- a source field the target lacks is dropped (the down-conversion);
- ``timedelta_*`` fields accept ``int`` milliseconds as well as ``timedelta``, and error-code
  fields plain ``int`` as well as ``ErrorCode`` (kio's writers insist on the exact types);
- ``None`` stays ``None`` for nullable targets.

Per-class field plans are computed once and cached, so the cost per value is a dict walk.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import PayloadEntityType
from kio.static.constants import EntityType

_MISSING = object()


class ConversionError(ValueError):
    """The source lacks a value for a target field that has no default."""


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    nested: type | None  # dataclass to recurse into (alone, optional, or as tuple items)
    is_tuple: bool
    millis: bool  # timedelta field: int milliseconds accepted
    error_code: bool  # error_code field: plain int accepted (kio's writer needs ErrorCode)
    required: bool


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


@functools.cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a kio entity class")
    hints = typing.get_type_hints(cls)
    plans = []
    for f in dataclasses.fields(cls):
        tp = _unwrap_optional(hints[f.name])
        is_tuple = False
        if typing.get_origin(tp) is tuple:
            is_tuple = True
            tp = _unwrap_optional(typing.get_args(tp)[0])
        nested = tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None
        kafka_type = f.metadata.get("kafka_type", "")
        plans.append(
            _FieldPlan(
                name=f.name,
                nested=nested,
                is_tuple=is_tuple,
                millis=kafka_type.startswith("timedelta"),
                error_code=kafka_type == "error_code",
                required=f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
        )
    return tuple(plans)


def _get(source: Any, name: str) -> Any:
    if isinstance(source, Mapping):
        return source.get(name, _MISSING)
    return getattr(source, name, _MISSING)


def convert(source: Any, target_cls: type, *, force: bool = False) -> Any:
    """Return an instance of ``target_cls`` (a kio entity class) built from ``source``.

    ``source`` may be a kio entity of another version, any object with matching attributes, or
    a mapping; nested values follow the same rules. An instance of ``target_cls`` itself is
    returned unchanged unless ``force`` (rebuild it, normalising ints to ErrorCode/timedelta).
    """
    if type(source) is target_cls and not force:
        return source
    kwargs: dict[str, Any] = {}
    for plan in _plan(target_cls):
        value = _get(source, plan.name)
        if value is _MISSING:
            if plan.required:
                raise ConversionError(
                    f"{target_cls.__module__}.{target_cls.__qualname__}.{plan.name}: no value in source"
                )
            continue
        kwargs[plan.name] = _convert_value(value, plan, force)
    return target_cls(**kwargs)


def _convert_value(value: Any, plan: _FieldPlan, force: bool) -> Any:
    if value is None:
        return None
    if plan.nested is not None:
        if plan.is_tuple:
            return tuple(convert(item, plan.nested, force=force) for item in value)
        return convert(value, plan.nested, force=force)
    if plan.millis and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if plan.error_code and not isinstance(value, ErrorCode):
        return ErrorCode(value)
    if plan.is_tuple and not isinstance(value, tuple):
        return tuple(value)
    return value


def convert_to_version(source: Any, version: int, *, api_key: int | None = None) -> Any:
    """Convert a top-level kio request/response entity to the same class in ``version``.

    The target class is found by name in kio's payload module for (api key, version), e.g. a
    ``metadata.v13.response.MetadataResponse`` becomes ``metadata.v1.response.MetadataResponse``.
    Pass ``api_key`` when ``source`` is not a kio entity (a mapping); it then must be a response.
    """
    cls = type(source)
    key = api_key if api_key is not None else int(cls.__api_key__)
    entity_type = getattr(cls, "__type__", EntityType.response)
    if entity_type not in (EntityType.request, EntityType.response):
        raise TypeError("convert_to_version needs a top-level request or response entity")
    target = target_class(key, version, entity_type, cls.__name__ if hasattr(cls, "__api_key__") else None)
    return convert(source, target)


@functools.cache
def target_class(api_key: int, version: int, entity_type: PayloadEntityType, name: str | None = None) -> type:
    """The top-level class of (api key, version, request|response), optionally by class name."""
    module = load_payload_module(api_key, version, entity_type)
    if name is not None:
        return getattr(module, name)
    suffix = "Response" if entity_type is EntityType.response else "Request"
    candidates = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and getattr(obj, "__type__", None) is entity_type
        and obj.__module__ == module.__name__
        and obj.__name__.endswith(suffix)
    ]
    if len(candidates) != 1:
        raise LookupError(f"no unique {entity_type.name} class in {module.__name__}")
    return candidates[0]
