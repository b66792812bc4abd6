"""Request/response encoding on top of kio (sans-I/O: bytes in, entities out, and back).

Why a module of its own: the decisions a broker makes before any handler runs live here —
which header version a request and its response use, which (api key, version) pairs parse at
all, and the one exception to "unknown version closes the connection", ApiVersions, which is
answered with a v0 body listing the served ranges so that a newer client can downgrade.

kio looks classes up dynamically and builds readers/writers per class; both are cached per class
(in ``protocol/requests.py``, shared with every client kshare has) so the per-request path is two
dict hits. Readers need immutable ``bytes``. Encoding *requests* is the clients' business
(``protocol/requests.py``); :func:`encode_request` here frames one for tests and tools.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.index import KioIndexError, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from ..protocol.constants import ApiKey
from ..protocol.requests import decode_response, reader, request_class_of, request_frame, writer
from .errors import MalformedFrame, UnsupportedRequest
from .framing import frame
from .prescan import prescan

__all__ = ["API_VERSIONS_KEY", "DecodedRequest", "RequestPeek", "api_versions_fallback", "check_request",
           "decode_request", "decode_response", "encode_request", "encode_response", "peek", "reader",
           "request_class", "response_class", "writer"]

#: API key of ApiVersions, the request every client sends first and the one special case.
API_VERSIONS_KEY = ApiKey.API_VERSIONS

#: A request header starts with api_key int16, api_version int16, correlation_id int32 in every
#: header version, so these eight bytes can be read before the header version is known.
_PEEK_BYTES = 8


@dataclass(frozen=True, slots=True)
class RequestPeek:
    """The fixed prefix of every request header."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    """A parsed request: kio header and body entities plus the classes they came from."""

    header: Any
    body: Any
    request_class: type
    response_class: type
    trailing_bytes: int = 0  # bytes after the body; tolerated (see docs/wire.md)
    #: Non-nullable fields the client sent as null (``body`` is then ``None``: kio is not asked
    #: to parse it). The dispatcher answers INVALID_REQUEST; see prescan.py.
    null_fields: tuple[str, ...] = ()

    @property
    def api_key(self) -> int:
        return int(self.header.request_api_key)

    @property
    def api_version(self) -> int:
        return int(self.header.request_api_version)

    @property
    def correlation_id(self) -> int:
        return int(self.header.correlation_id)


def peek(frame_bytes: bytes) -> RequestPeek:
    """Read api key, version and correlation id without knowing the header version."""
    if len(frame_bytes) < _PEEK_BYTES:
        raise MalformedFrame(f"frame of {len(frame_bytes)} bytes is too short for a request header")
    return RequestPeek(
        api_key=int.from_bytes(frame_bytes[0:2], "big", signed=True),
        api_version=int.from_bytes(frame_bytes[2:4], "big", signed=True),
        correlation_id=int.from_bytes(frame_bytes[4:8], "big", signed=True),
    )


@functools.cache
def request_class(api_key: int, api_version: int) -> Any:  # a kio class: its ClassVars are not on `type`
    """kio's request class for (key, version); :class:`UnsupportedRequest` when kio has none."""
    try:
        return request_class_of(api_key, api_version)
    except KioIndexError as exc:
        raise UnsupportedRequest(f"api key {api_key} version {api_version} is unknown") from exc


@functools.cache
def response_class(api_key: int, api_version: int) -> Any:
    """kio's response class for (key, version); :class:`UnsupportedRequest` when kio has none."""
    try:
        return load_response_schema(api_key, api_version)
    except KioIndexError as exc:
        raise UnsupportedRequest(f"api key {api_key} version {api_version} is unknown") from exc


def decode_request(frame_bytes: bytes) -> DecodedRequest:
    """Parse header and body of one request frame (payload without its size prefix).

    Raises :class:`UnsupportedRequest` for an (api key, version) kio does not know and
    :class:`MalformedFrame` for anything that does not parse — both close the connection, as
    Kafka does. Whether the version is *served* is the registry's decision, not the codec's.

    Every length and count is checked against the frame by :func:`prescan.prescan` before kio
    reads it (kio 0.6.5 allocates for array counts unchecked and aborts the process on failure).
    """
    if not isinstance(frame_bytes, bytes):
        frame_bytes = bytes(frame_bytes)
    peeked = peek(frame_bytes)
    req_cls = request_class(peeked.api_key, peeked.api_version)
    resp_cls = response_class(peeked.api_key, peeked.api_version)
    header_end, _ = prescan(req_cls.__header_schema__, frame_bytes, 0)
    body_end, nulls = prescan(req_cls, frame_bytes, header_end)
    try:
        header, header_size = reader(req_cls.__header_schema__)(frame_bytes, 0)
        if nulls:
            return DecodedRequest(header=header, body=None, request_class=req_cls,
                                  response_class=resp_cls, trailing_bytes=len(frame_bytes) - body_end,
                                  null_fields=tuple(nulls))
        body, body_size = reader(req_cls)(frame_bytes, header_size)
    except Exception as exc:  # kio raises DecodeError, ValueError, TypeError, UnicodeError...
        raise MalformedFrame(
            f"cannot parse api key {peeked.api_key} v{peeked.api_version}: {type(exc).__name__}: {exc}"
        ) from exc
    return DecodedRequest(
        header=header,
        body=body,
        request_class=req_cls,
        response_class=resp_cls,
        trailing_bytes=len(frame_bytes) - header_size - body_size,
    )


def check_request(frame_bytes: bytes) -> list[str]:
    """Bounds-check a request frame without decoding it (for frames that are only forwarded).

    Raises :class:`MalformedFrame` like :func:`decode_request`; returns the non-nullable fields
    sent as null (the caller answers those through :func:`decode_request`).
    """
    peeked = peek(frame_bytes)
    req_cls = request_class(peeked.api_key, peeked.api_version)
    header_end, _ = prescan(req_cls.__header_schema__, frame_bytes, 0)
    _, nulls = prescan(req_cls, frame_bytes, header_end)
    return list(nulls)


def encode_response(response: Any, correlation_id: int) -> bytes:
    """Frame ``response`` (a kio response entity) with the header version its class dictates.

    kio's ``__header_schema__`` already encodes the quirks: response header v1 for flexible
    versions, v0 otherwise, and v0 for every ApiVersions response.
    """
    cls: Any = type(response)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    writer(cls)(buf, response)
    return frame(buf.getvalue())


def encode_request(request: Any, correlation_id: int, client_id: str | None = "kshare") -> bytes:
    """Frame ``request`` with its header (used by tests and small tools, not by the server)."""
    return request_frame(request, correlation_id, client_id)


def api_versions_fallback(correlation_id: int, ranges: Iterable[tuple[int, int, int]]) -> bytes:
    """The answer to an ApiVersions request whose version is not served.

    Kafka replies with an ApiVersionsResponse **v0** body (error UNSUPPORTED_VERSION, plus the
    served ranges so the client can pick a version) and response header v0, whatever version was
    asked. librdkafka then retries with ``min(its version - 1, our ApiVersions max)``.
    ``ranges`` are ``(api_key, min_version, max_version)``.
    """
    body = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionV0(api_key=i16(key), min_version=i16(lo), max_version=i16(hi)) for key, lo, hi in ranges
        ),
    )
    return encode_response(body, correlation_id)
