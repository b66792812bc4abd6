"""A kio request's bytes (header + body), a response's header and body, and Kafka's framing.

Why one module: every part of kshare that *sends* requests — the backend bridge over aiokafka's
connections (``backend/kio_bridge.py``), raw backend connections (``backend/brokerconn.py`` via
``backend/sasl.py``, ``backend/security.py``), the share consumer (``client/``), the CLI's admin client
and the harness probe (both through :mod:`.blocking`) — needs the same three steps: write the
request header whose version kio's class dictates, write the body, and read back the response
header and body. The server side (``wire/codec.py``) builds on the same readers and writers.

Requests carry no size prefix here (:func:`request_payload`); :func:`frame` adds Kafka's int32
size for code that writes to a socket itself. kio builds a reader/writer per class; both are
cached per class, so encoding is two dict hits plus kio's own work.
"""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Callable
from typing import Any

from kio.index import load_request_schema, load_response_from_request
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import read_int16

Reader = Callable[[Any, int], tuple[Any, int]]
Writer = Callable[[Any, Any], None]
# kio's schema classes are typed here as ``Any`` where their ClassVars (``__header_schema__``,
# ``__api_key__``, ``__version__``) are read: ``type`` does not declare them.

_SIZE_BYTES = 4


@functools.cache
def reader(cls: type) -> Reader:
    """Cached kio reader: ``reader(cls)(buffer, offset) -> (entity, size)`` (read-only buffers)."""
    return entity_reader(cls)


@functools.cache
def writer(cls: type) -> Writer:
    """Cached kio writer: ``writer(cls)(io, entity)``."""
    return entity_writer(cls)


@functools.cache
def request_class_of(api_key: int, version: int) -> Any:  # a kio class: its ClassVars are not on `type`
    """kio's request class for (key, version); kio's ``KioIndexError`` when it has none."""
    return load_request_schema(api_key, version)


@functools.cache
def response_class_of(request_cls: type) -> type:
    """kio's response class answering ``request_cls`` (same API key and version)."""
    return load_response_from_request(request_cls)


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its int32 big-endian size: one Kafka frame."""
    return len(payload).to_bytes(_SIZE_BYTES, "big", signed=True) + payload


_HEADER = struct.Struct(">hhi")  # request_api_key, request_api_version, correlation_id


def request_header(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """The request header of ``request`` (a kio request entity), in the version its class uses.

    Written by hand: every backend request (a state write, a Fetch) has one, and kio's writer
    built a header entity and wrote it field by field — more than the state write's own body.
    Byte for byte kio's (tests/unit/protocol/test_request_header.py): v0 the three ints; v1 and v2
    add ``client_id`` as a nullable *non-compact* string (it stays one in flexible headers);
    v2 ends with an empty tagged-field section."""
    return header_of(type(request), correlation_id, client_id)


def header_of(cls: Any, correlation_id: int, client_id: str | None) -> bytes:
    """The request header of a request of kio class ``cls`` (a body written without an entity)."""
    return _HEADER.pack(cls.__api_key__, cls.__version__, correlation_id) + \
        _header_tail(cls.__header_schema__.__version__, client_id)


@functools.lru_cache(maxsize=64)
def _header_tail(header_version: int, client_id: str | None) -> bytes:
    if header_version == 0:
        return b""
    if client_id is None:
        cid = b"\xff\xff"
    else:
        raw = client_id.encode()
        cid = len(raw).to_bytes(2, "big", signed=True) + raw
    return cid + (b"\x00" if header_version >= 2 else b"")


def request_body(request: Any) -> bytes:
    """The body of ``request`` (a kio request entity)."""
    cls: type = type(request)
    buf = io.BytesIO()
    writer(cls)(buf, request)
    return buf.getvalue()


def request_payload(request: Any, correlation_id: int = 0, client_id: str | None = "kshare") -> bytes:
    """Header + body of ``request``, without the size prefix (what a frame carries)."""
    return request_header(request, correlation_id, client_id) + request_body(request)


def request_frame(request: Any, correlation_id: int = 0, client_id: str | None = "kshare") -> bytes:
    """``request`` as one frame, size prefix included (ready for a socket)."""
    return frame(request_payload(request, correlation_id, client_id))


def read_response_header(buffer: Any, offset: int, response_cls: Any) -> tuple[Any, int]:
    """The response header of ``response_cls`` at ``offset`` in ``buffer``: (header, its size)."""
    return reader(response_cls.__header_schema__)(buffer, offset)


def leading_error_code(payload: bytes, response_cls: Any) -> tuple[int, int]:
    """The error code that opens a response body (most APIs with a top-level error) and the
    offset after it, without decoding the rest: for answers kio cannot read whole — Kafka fills
    the timestamps of a CreateDelegationToken error answer with -1, which kio refuses."""
    _, offset = read_response_header(payload, 0, response_cls)  # kio's readers return (value, size read)
    code, size = read_int16(payload, offset)
    return int(code), offset + size


def decode_response(payload: bytes | memoryview, response_cls: Any) -> tuple[Any, Any]:
    """A response frame's payload (no size prefix) as (header, body) entities of ``response_cls``."""
    header, offset = read_response_header(payload, 0, response_cls)
    body, _ = reader(response_cls)(payload, offset)
    return header, body


def decode_response_to(request: Any, payload: bytes | memoryview) -> Any:
    """The response body answering ``request`` from a frame's payload (its header dropped)."""
    request_cls: type = type(request)
    return decode_response(payload, response_class_of(request_cls))[1]
