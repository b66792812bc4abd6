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
    steps: tuple[int | _Field, ...] = ()  # runs of fixed-size fields merged into one skip (speed)


@functools.cache
def plan_for(cls: Any) -> _Plan:  # a kio entity class: its ClassVars (__flexible__) are not on `type`
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
    steps: list[int | _Field] = []
    for fld in fields:
        if fld.kind == _K_FIXED and not fld.array:
            if steps and isinstance(steps[-1], int):
                steps[-1] += fld.size
            else:
                steps.append(fld.size)
        else:
            steps.append(fld)
    return _Plan(cls.__name__, flexible, tuple(fields), tagged, min_size, tuple(steps))


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

    def fail(self, where: str, what: str, pos: int) -> PrescanError:
        return PrescanError(f"{where}: {what} at offset {pos}, frame has {self.end - pos} bytes left")

    def uvarint(self, pos: int, where: str) -> tuple[int, int]:
        buf, end = self.buf, self.end
        if pos < end and buf[pos] < 0x80:  # the common case: one byte
            return buf[pos], pos + 1
        value = shift = 0
        for i in range(_MAX_VARINT_BYTES):
            if pos + i >= end:
                raise self.fail(where, "truncated varint", pos)
            b = buf[pos + i]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, pos + i + 1
            shift += 7
        raise self.fail(where, f"varint longer than {_MAX_VARINT_BYTES} bytes", pos)

    def int_(self, pos: int, n: int, where: str) -> int:
        if pos + n > self.end:
            raise self.fail(where, f"truncated int{n * 8}", pos)
        return int.from_bytes(self.buf[pos:pos + n], "big", signed=True)


def prescan(cls: type, buf: bytes, offset: int = 0, end: int | None = None) -> tuple[int, list[str]]:
    """Walk one ``cls`` entity from ``buf[offset:end]``; return (end offset, non-nullable nulls).

    Raises :class:`PrescanError` (a :class:`MalformedFrame`, so the connection closes, as Kafka
    closes on unparsable requests) when any length or count cannot fit in the bytes left.
    Null fields are named ``Entity.field`` (``[]`` for an array element).
    """
    walk = _Walk(buf, len(buf) if end is None else end, [])
    return _entity(walk, plan_for(cls), offset), walk.nulls


def _entity(w: _Walk, plan: _Plan, pos: int) -> int:
    for step in plan.steps:
        if step.__class__ is int:
            pos += step
            if pos > w.end:
                raise w.fail(plan.name, "truncated", pos - step)
        else:
            # mypy narrows `__class__ is int` (the fast check) in the if branch only
            pos = _field(w, step, plan, pos)  # type: ignore[arg-type]
    if not plan.flexible:
        return pos
    where = f"{plan.name} tagged fields"
    count, pos = w.uvarint(pos, where)
    if pos + count > w.end:  # each takes at least 2 bytes; cheap early bound
        raise w.fail(where, f"{count} tagged fields cannot fit", pos)
    for _ in range(count):
        tag, pos = w.uvarint(pos, where)
        size, pos = w.uvarint(pos, where)
        if pos + size > w.end:
            raise w.fail(where, f"tag {tag} of {size} bytes cannot fit", pos)
        fld = plan.tagged.get(tag)
        if fld is not None:  # unknown tags: kio raises KeyError, which also closes
            saved, w.end = w.end, pos + size  # a tagged field must fit in its declared size
            try:
                _field(w, fld, plan, pos, tagged=True)
            finally:
                w.end = saved
        pos += size
    return pos


def _field(w: _Walk, fld: _Field, plan: _Plan, pos: int, tagged: bool = False) -> int:
    flexible = (plan.flexible or tagged) and not fld.legacy
    if not fld.array:
        return _value(w, fld, plan, flexible, pos, fld.nullable)
    if flexible:
        n, pos = w.uvarint(pos, f"{plan.name}.{fld.name}")
        n -= 1
    else:
        n = w.int_(pos, 4, f"{plan.name}.{fld.name}")
        pos += 4
        if n < -1:
            raise w.fail(f"{plan.name}.{fld.name}", f"negative array length {n}", pos)
    if n == -1:
        if not fld.nullable:
            w.nulls.append(f"{plan.name}.{fld.name}")
        return pos
    kind = fld.kind
    if kind == _K_FIXED:
        elem = fld.size
    elif kind == _K_ENTITY:
        elem = fld.entity.min_size  # type: ignore[union-attr]
    else:
        elem = 1 if flexible else (2 if kind == _K_STRING else 4)
    if n * elem > w.end - pos:
        raise w.fail(f"{plan.name}.{fld.name}", f"array of {n} cannot fit", pos)
    if kind == _K_FIXED:
        return pos + n * elem
    if kind == _K_ENTITY:
        sub = fld.entity
        for _ in range(n):
            pos = _entity(w, sub, pos)  # type: ignore[arg-type]
        return pos
    for _ in range(n):
        pos = _value(w, fld, plan, flexible, pos, False, "[]")
    return pos


def _value(w: _Walk, fld: _Field, plan: _Plan, flexible: bool, pos: int, nullable: bool, suffix: str = "") -> int:
    kind = fld.kind
    if kind == _K_FIXED:
        if pos + fld.size > w.end:
            raise w.fail(f"{plan.name}.{fld.name}", "truncated", pos)
        return pos + fld.size
    if kind == _K_ENTITY:
        if nullable:
            marker = w.int_(pos, 1, f"{plan.name}.{fld.name}")
            pos += 1
            if marker == -1:
                return pos
        return _entity(w, fld.entity, pos)  # type: ignore[arg-type]
    if flexible:
        n, pos = w.uvarint(pos, f"{plan.name}.{fld.name}")
        n -= 1
    else:
        width = 2 if kind == _K_STRING else 4
        n = w.int_(pos, width, f"{plan.name}.{fld.name}")
        pos += width
        if n < -1:
            raise w.fail(f"{plan.name}.{fld.name}", f"negative length {n}", pos)
    if n == -1:
        if not nullable:
            w.nulls.append(f"{plan.name}.{fld.name}{suffix}")
        return pos
    if pos + n > w.end:
        raise w.fail(f"{plan.name}.{fld.name}", f"length {n} cannot fit", pos)
    return pos + n
