"""A bounds pre-pass over a request frame, run before kio's native reader sees it (sans-I/O).

Why this exists: kio 0.6.5's native (Rust) reader trusts array counts. For every compact or
legacy array it calls ``Vec::with_capacity(count)`` (``rust/src/schema.rs``, ``read_field``)
before reading a single element, so a 44-byte ShareFetch v1 whose Topics count is 2^32-2 asks
the allocator for ~34 GB; Rust's allocation-failure handler aborts the process (SIGABRT), and no
``except`` can catch that. Strings and bytes are checked against the buffer, arrays are not.
Until kio bounds arrays itself, every request frame is walked here first, following exactly the
schema kio will use (same field classification, same flexible/legacy encodings, same quirks:
tagged fields are read as non-nullable, ``client_id`` in the request header is always a legacy
nullable string), and rejected if any declared length cannot fit in the bytes that remain.

The walk also notes ``null`` where the schema says non-nullable. kio accepts a null array for
any array field (it returns ``None``, which handlers then iterate) and raises on a null
non-nullable string; both are a client's fault, so the dispatcher answers INVALID_REQUEST rather
than letting either reach a handler (see docs/wire.md, "Hostile input").

A plan is compiled once per entity class from kio's own field metadata and cached.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from .errors import MalformedFrame

_FIXED = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
    "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8,
    "datetime_i64": 8, "uuid": 16,
}

# Field kinds of a compiled plan.
_K_FIXED, _K_STRING, _K_BYTES, _K_ENTITY = range(4)

#: Kafka's unsigned varints are at most 5 bytes (ByteUtils.readUnsignedVarint).
_MAX_VARINT_BYTES = 5


class PrescanError(MalformedFrame):
    """A declared length or count that cannot fit in the frame, or a truncated frame."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: int
    size: int = 0  # _K_FIXED: bytes per value
    nullable: bool = False  # null allowed by the schema (strings, bytes, entities, arrays)
    array: bool = False
    entity: _Plan | None = None
    legacy: bool = False  # legacy encoding even in a flexible entity (request header client_id)
    boolean: bool = False  # for generators: kio accepts only 0 and 1 (Kafka: any non-zero is true)


@dataclass(frozen=True, slots=True)
class _Plan:
    name: str
    flexible: bool
    fields: tuple[_Field, ...]
    tagged: dict[int, _Field]
    min_size: int  # smallest encoding of one instance (bounds array counts before walking)


@functools.cache
def plan_for(cls: type) -> _Plan:
    """The walk plan for a kio entity class (cached; built from kio's dataclass metadata)."""
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    fields: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        if is_header and f.name == "client_id":
            fields.append(_Field(f.name, _K_STRING, nullable=True, legacy=True))
            continue
        fld = _compile_field(f, tag is not None)
        if tag is None:
            fields.append(fld)
        else:
            tagged[int(tag)] = fld
    min_size = sum(_min_field_size(fld, flexible) for fld in fields) + (1 if flexible else 0)
    return _Plan(cls.__name__, flexible, tuple(fields), tagged, min_size)


def _compile_field(f: dataclasses.Field, is_tagged: bool) -> _Field:
    fc = classify_field(f)
    optional = is_optional(f)
    if isinstance(fc, EntityTupleField | EntityField):
        return _Field(f.name, _K_ENTITY, nullable=optional, array=isinstance(fc, EntityTupleField),
                      entity=plan_for(fc.type_))
    kafka_type = get_schema_field_type(f)
    array = isinstance(fc, PrimitiveTupleField)
    # kio reads array elements and tagged primitives as non-nullable (schema.rs build_field_schema).
    elem_nullable = optional and not array and not is_tagged
    if kafka_type in _FIXED:
        return _Field(f.name, _K_FIXED, size=_FIXED[kafka_type], nullable=optional, array=array,
                      boolean=kafka_type == "bool")
    if kafka_type == "string":
        kind = _K_STRING
    elif kafka_type in ("bytes", "records"):
        kind = _K_BYTES
    else:
        raise TypeError(f"prescan: unsupported kafka_type {kafka_type!r} in {f.name}")
    return _Field(f.name, kind, nullable=optional if array else elem_nullable, array=array)


def _min_field_size(fld: _Field, flexible: bool) -> int:
    flexible = flexible and not fld.legacy
    if fld.array:
        return 1 if flexible else 4
    if fld.kind == _K_FIXED:
        return fld.size
    if fld.kind == _K_ENTITY:
        return 1 if fld.nullable else fld.entity.min_size  # type: ignore[union-attr]
    if flexible:
        return 1
    return 2 if fld.kind == _K_STRING else 4


@dataclass(slots=True)
class _Walk:
    buf: bytes
    end: int
    nulls: list[str]

    def need(self, pos: int, n: int, what: str) -> None:
        if n < 0 or pos + n > self.end:
            raise PrescanError(f"{what}: needs {n} bytes at offset {pos}, frame has {self.end - pos} left")

    def uvarint(self, pos: int, what: str) -> tuple[int, int]:
        value = shift = 0
        for i in range(_MAX_VARINT_BYTES):
            if pos + i >= self.end:
                raise PrescanError(f"{what}: truncated varint at offset {pos}")
            b = self.buf[pos + i]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, pos + i + 1
            shift += 7
        raise PrescanError(f"{what}: varint longer than {_MAX_VARINT_BYTES} bytes at offset {pos}")

    def int_(self, pos: int, n: int, what: str) -> int:
        self.need(pos, n, what)
        return int.from_bytes(self.buf[pos:pos + n], "big", signed=True)


def prescan(cls: type, buf: bytes, offset: int = 0, end: int | None = None) -> tuple[int, list[str]]:
    """Walk one ``cls`` entity from ``buf[offset:end]``; return (end offset, non-nullable nulls).

    Raises :class:`PrescanError` (a :class:`MalformedFrame`, so the connection closes, as Kafka
    closes on unparsable requests) when any length or count cannot fit in the bytes left.
    """
    walk = _Walk(buf, len(buf) if end is None else end, [])
    pos = _entity(walk, plan_for(cls), offset, plan_for(cls).name)
    return pos, walk.nulls


def _entity(w: _Walk, plan: _Plan, pos: int, path: str) -> int:
    for fld in plan.fields:
        pos = _field(w, fld, plan.flexible, pos, f"{path}.{fld.name}")
    if not plan.flexible:
        return pos
    count, pos = w.uvarint(pos, f"{path} tagged fields")
    w.need(pos, count, f"{path} tagged fields")  # each takes at least 2 bytes; cheap early bound
    for _ in range(count):
        tag, pos = w.uvarint(pos, f"{path} tag")
        size, pos = w.uvarint(pos, f"{path} tag {tag} size")
        w.need(pos, size, f"{path} tag {tag}")
        fld = plan.tagged.get(tag)
        if fld is not None:  # unknown tags: kio raises KeyError, which also closes
            _field(w, fld, True, pos, f"{path}.{fld.name}", limit=pos + size)
        pos += size
    return pos


def _field(w: _Walk, fld: _Field, flexible: bool, pos: int, path: str, limit: int | None = None) -> int:
    if limit is not None:  # a tagged field must fit in its declared size
        saved, w.end = w.end, limit
        try:
            return _field(w, fld, flexible, pos, path)
        finally:
            w.end = saved
    if not fld.array:
        return _value(w, fld, flexible and not fld.legacy, pos, path)
    if flexible:
        n, pos = w.uvarint(pos, path)
        n -= 1
    else:
        n = w.int_(pos, 4, path)
        pos += 4
        if n < -1:
            raise PrescanError(f"{path}: negative array length {n}")
    if n == -1:
        if not fld.nullable:
            w.nulls.append(path)
        return pos
    elem = fld.size if fld.kind == _K_FIXED else (
        fld.entity.min_size if fld.kind == _K_ENTITY else (1 if flexible else (2 if fld.kind == _K_STRING else 4)))  # type: ignore[union-attr]
    if n * max(elem, 1) > w.end - pos:
        raise PrescanError(f"{path}: array of {n} cannot fit in {w.end - pos} bytes")
    if fld.kind == _K_FIXED:
        return pos + n * fld.size
    for i in range(n):
        pos = _value(w, fld, flexible, pos, path, element=True)
    return pos


def _value(w: _Walk, fld: _Field, flexible: bool, pos: int, path: str, element: bool = False) -> int:
    kind = fld.kind
    if kind == _K_FIXED:
        w.need(pos, fld.size, path)
        return pos + fld.size
    nullable = fld.nullable and not element
    if kind == _K_ENTITY:
        plan = fld.entity
        assert plan is not None
        if fld.nullable and not element:
            marker = w.int_(pos, 1, path)
            pos += 1
            if marker == -1:
                return pos
        return _entity(w, plan, pos, path)
    if flexible:
        n, pos = w.uvarint(pos, path)
        n -= 1
    else:
        width = 2 if kind == _K_STRING else 4
        n = w.int_(pos, width, path)
        pos += width
        if n < -1:
            raise PrescanError(f"{path}: negative length {n}")
    if n == -1:
        if not nullable:
            w.nulls.append(path)
        return pos
    w.need(pos, n, path)
    return pos + n
