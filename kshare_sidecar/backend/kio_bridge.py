"""Carry kio-encoded requests over aiokafka's connections.

Why: aiokafka 0.14 owns bootstrap, broker discovery, TLS/SASL and pipelined connections, but
its own protocol structs stop at Metadata v5 (no topic IDs) and Fetch v11. kio encodes every
version. ``AIOKafkaConnection.send`` only needs a duck-typed request: ``prepare(versions)``
returning an object with ``build_request_header``/``encode``/``parse_response_header`` and a
``RESPONSE_TYPE.decode``. :class:`KioRequest` supplies exactly that, so we keep one connection
pool (and its auth) and pick the API version per connection from the broker's ApiVersions.

This relies on aiokafka internals (``conn.send`` → ``request.prepare``); the integration tests
exercise it on every run and the lead pins ``aiokafka>=0.14,<0.15``.

Tagged fields kio cannot read: Kafka's protocol lets a reader skip a tagged field it does not know
(KIP-482), and Kafka's clients do; kio 0.6 raises instead. A backend that sends one — tansu 0.6.0
puts Fetch's ``NodeEndpoints`` (a v16 field) into its v12 answers — would otherwise break every
such request (and, raised inside aiokafka's reader, the whole connection). So such an answer is
handed back as :class:`UnreadableResponse`, :func:`send` raises :class:`UnreadableResponseError`
(a retriable ``KafkaError``), and from then on that connection asks that API at a lower version
(its broker's version range is lowered: one warning line per connection); non-flexible versions
carry no tagged fields at all. The mark belongs to the connection, not the process: another
backend (or a fixed broker after a reconnect) is asked at its own best version.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

from aiokafka.errors import KafkaError
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..protocol.requests import (header_of, read_response_header, reader, request_body, request_class_of,
                                 response_class_of)
from .errors import BackendError

Builder = Callable[[Any, int], Any]
"""``build(module, version) -> kio request entity`` for the chosen version's payload module."""

log = logging.getLogger("kshare.backend")

@functools.cache
def request_module(api_key: int, version: int) -> ModuleType:
    """The kio payload module of one request version (nested classes live there)."""
    return load_payload_module(api_key, version, EntityType.request)


def make(cls: type, **kwargs: Any) -> Any:
    """Build a kio entity, silently dropping fields this version does not have.

    Lets one builder serve a range of versions: v4 Fetch simply has no ``log_start_offset``.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in kwargs.items() if k in names})


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


class _Encoded:
    """Something with ``encode()`` (what aiokafka expects of a header)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def encode(self) -> bytes:
        return self._data


class _ResponseDecoder:
    """Stands in for an aiokafka ``Response`` class: ``decode(BytesIO)`` → kio entity.
    ``versions``: the connection's broker version ranges, lowered when an answer is unreadable."""

    __slots__ = ("_cls", "_api_key", "_version", "_versions")

    def __init__(self, cls: type, api_key: int, version: int, versions: dict[int, tuple[int, int]]) -> None:
        self._cls = cls
        self._api_key, self._version = api_key, version
        self._versions = versions

    def decode(self, buf: io.BytesIO) -> Any:
        # kio wants a read-only buffer; a read-only view of the frame avoids one copy.
        view = buf.getbuffer().toreadonly()
        try:
            entity, _ = reader(self._cls)(view, buf.tell())
        except KeyError as exc:  # kio: "Unknown tagged field tag: N"
            if "tagged field" not in str(exc):
                raise
            return _unreadable(self._versions, self._api_key, self._version, str(exc.args[0]))
        finally:
            view.release()
        return entity


class UnreadableResponse:
    """An answer kio could not read (a tagged field it does not know); :func:`send` raises."""

    __slots__ = ("api_key", "version", "reason")

    def __init__(self, api_key: int, version: int, reason: str) -> None:
        self.api_key, self.version, self.reason = api_key, version, reason


class UnreadableResponseError(KafkaError):
    """The backend's answer carried a tagged field kio cannot read; the request may be sent
    again: it will be asked at a lower version."""

    retriable = True


def _unreadable(versions: dict[int, tuple[int, int]], api_key: int, version: int, reason: str) -> UnreadableResponse:
    """Lower the connection's range for ``api_key`` below ``version`` (aiokafka's own structs read
    the same dict, and pick no higher either)."""
    low, high = versions.get(api_key, (0, -1))
    if high >= version:
        versions[api_key] = (low, version - 1)
        log.warning("the backend answered api %d v%d with a tagged field kio cannot read (%s; Kafka's clients "
                    "skip such fields): this connection asks at a lower version from now on", api_key, version,
                    reason)
    return UnreadableResponse(api_key, version, reason)


async def send(client: Any, node: int, request: KioRequest, **kwargs: Any) -> Any:
    """``client.send`` (an ``AIOKafkaClient``) for a :class:`KioRequest`; raises
    :class:`UnreadableResponseError` instead of returning an answer kio could not read."""
    response = await client.send(node, request, **kwargs)
    if isinstance(response, UnreadableResponse):
        raise UnreadableResponseError(f"api {response.api_key} v{response.version}: {response.reason}")
    return response


class _KioStruct:
    """The prepared request aiokafka's connection encodes and matches responses against: a kio
    entity, or a body already written (``cls`` then names the request's kio class)."""

    __slots__ = ("entity", "RESPONSE_TYPE", "_response_cls", "_cls", "_body")

    def __init__(self, entity: Any, versions: dict[int, tuple[int, int]], *, cls: Any = None,
                 body: bytes | None = None) -> None:
        self.entity = entity
        self._cls = cls = cls if cls is not None else type(entity)
        self._body = body
        self._response_cls = response_class_of(cls)  # cached: kio resolves its import path on every call
        self.RESPONSE_TYPE = _ResponseDecoder(self._response_cls, cls.__api_key__, cls.__version__, versions)

    def build_request_header(self, correlation_id: int, client_id: str) -> _Encoded:
        return _Encoded(header_of(self._cls, correlation_id, client_id))

    def encode(self) -> bytes:
        return self._body if self._body is not None else request_body(self.entity)

    def parse_response_header(self, buf: io.BytesIO) -> Any:
        view = buf.getbuffer().toreadonly()
        try:
            header, size = read_response_header(view, buf.tell(), self._response_cls)
        finally:
            view.release()
        buf.seek(buf.tell() + size)
        return header

    def __repr__(self) -> str:  # aiokafka logs requests at debug level
        return f"<kio {self._cls.__name__} v{self._cls.__version__}>"


class KioRequest:
    """A request aiokafka can send; the version is chosen per connection in ``prepare``.

    ``versions`` is the range kshare knows how to build and read, highest preferred.
    """

    def __init__(self, api_key: int, versions: range, build: Builder | None = None,
                 body: Callable[[int], bytes] | None = None) -> None:
        if (build is None) == (body is None):
            raise TypeError("KioRequest takes a build or a body")
        self.API_KEY = api_key
        self._versions = versions
        self._build = build
        self._body = body  # ``body(version) -> bytes``: the body written by hand (no entity built)
        self.version: int | None = None

    def prepare(self, broker_versions: dict[int, tuple[int, int]]) -> _KioStruct:
        low, high = broker_versions.get(self.API_KEY, (0, -1))
        usable = [v for v in self._versions if low <= v <= high]
        if not usable:
            raise BackendError(
                int(ErrorCode.unsupported_version),
                f"backend supports api {self.API_KEY} v{low}..v{high}; kshare needs "
                f"v{self._versions.start}..v{self._versions.stop - 1}",
            )
        self.version = version = max(usable)
        if self._body is not None:
            return _KioStruct(None, broker_versions, cls=request_class_of(self.API_KEY, version),
                              body=self._body(version))
        assert self._build is not None
        return _KioStruct(self._build(request_module(self.API_KEY, version), version), broker_versions)
