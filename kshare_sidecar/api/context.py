"""What a handler knows about the request it serves, and how it reports a Kafka error.

Handlers are pure translators (message <-> domain call). Everything connection-specific they may
need — who is asking, on which connection, as which node the sidecar answers — arrives in a
:class:`RequestContext`, so handlers never import the I/O layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..auth.acls import ALLOW_ALL, Decider
from ..protocol.errors import KafkaError

# KafkaError is what a handler raises to answer with an error code instead of a result.
__all__ = ["ConnectionHandle", "KafkaError", "NodeIdentity", "RequestContext", "acl_of"]


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """The single broker the sidecar pretends to be.

    ``node_id``/``host``/``port`` are what Metadata (brokers list, every partition leader) and
    FindCoordinator return; clients route share acks by node id, so all three must agree with the
    listener the client is actually connected to (share-protocol.md §4.3).
    """

    node_id: int
    host: str
    port: int
    rack: str | None = None
    cluster_id: str | None = "kshare"
    controller_id: int | None = None  # None: the sidecar itself

    @property
    def effective_controller_id(self) -> int:
        return self.node_id if self.controller_id is None else self.controller_id


class ConnectionHandle(Protocol):
    """The part of a connection handlers may touch (``wire.Connection`` satisfies it)."""

    conn_id: int
    peer_host: str
    peer_port: int

    def add_close_callback(self, callback: Callable[[Any], Any]) -> None: ...


def _noop() -> None:
    return None


@dataclass(slots=True)
class RequestContext:
    """Per-request facts: connection, client identity, sidecar identity, request coordinates."""

    conn_id: int
    client_id: str | None
    client_host: str
    client_port: int
    node: NodeIdentity
    api_key: int
    api_version: int
    correlation_id: int
    connection: ConnectionHandle | None = None
    _release: Callable[[], None] = field(default=_noop, repr=False)
    #: Kafka principal of the connection: ``User:<sasl user>``, ``User:<certificate subject DN>``
    #: (mTLS) or ``User:ANONYMOUS`` (what later authorization checks against).
    principal: str = "User:ANONYMOUS"
    #: Name of the listener the request came in on (``PLAINTEXT``, ``SASL_SSL``, ...).
    listener: str = "PLAINTEXT"
    #: Security protocol of that listener (the anonymous-on-PLAINTEXT exemption needs it).
    security_protocol: str = "PLAINTEXT"
    #: ``authorizer.class.name = backend``: the :class:`~kshare_sidecar.auth.authorizer.BackendAuthorizer`;
    #: ``None``: authorization is off and every check passes.
    authorizer: Any = None

    async def acl(self) -> Decider:
        """The ACL decisions for this request's principal and client host (:func:`authorize`)."""
        if self.authorizer is None:
            return ALLOW_ALL
        return await self.authorizer.decider(self.principal, self.client_host, self.security_protocol)

    def release_ordering(self) -> None:
        """Let the next request on this connection start processing before this one answers.

        Call it once the ordered part is done (e.g. ShareFetch: session epoch validated and
        piggybacked acks applied) and the handler only waits (long poll). Responses are still
        written in request order. Idempotent.
        """
        self._release()

    def on_close(self, callback: Callable[[Any], Any]) -> None:
        """Run ``callback(connection)`` (sync or async) once when this TCP connection ends."""
        if self.connection is None:
            raise RuntimeError("request has no connection (pure unit test?)")
        self.connection.add_close_callback(callback)


async def acl_of(ctx: RequestContext | None) -> Decider:
    """``ctx.acl()``, and every check passes for a context-less call (pure unit tests)."""
    return ALLOW_ALL if ctx is None else await ctx.acl()
