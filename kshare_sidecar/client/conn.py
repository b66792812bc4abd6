"""One connection per broker node for the share consumer: kio entities in, kio entities out.

Built on :class:`kshare_sidecar.backend.brokerconn.BrokerConn` (pipelined, correlation ids matched,
lazy reconnect) so the client shares the sidecar's tested transport. What this adds:

- kio encoding/decoding of requests and responses;
- ApiVersions once per TCP connection, so the consumer knows whether ShareFetch /
  ShareAcknowledge v2 (RENEW) is available at this node;
- TLS and SASL (``security``: the sidecar's own ``BackendSecurity``, see ``client/security.py``)
  before ApiVersions; credentials the broker refuses raise :class:`AuthenticationFailedError`
  (not a transport error: retrying cannot help);
- ``generation``, bumped whenever a request finds the connection down: a broker closes a
  connection's share sessions when it drops, so a session opened on an older generation is gone
  and the consumer must reopen it with epoch 0 instead of sending a stale epoch.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kshare_sidecar.backend.brokerconn import BrokerAuthError, BrokerConn, BrokerConnError, FramePool
from kshare_sidecar.backend.security import BackendSecurity

from . import protocol
from .errors import AuthenticationFailedError


#: free receive buffers one connection keeps for the next answers (a ShareFetch answer is up to
#: a few MB: FetchMaxBytes is the broker's to honour, a poll's records usually ~1 MB)
_POOL_KEEP_BYTES = 8 * 1024 * 1024


class NodeConn:
    def __init__(self, node_id: int, host: str, port: int, client_id: str, *, timeout_s: float = 30.0,
                 max_share_version: int | None = None, security: BackendSecurity | None = None) -> None:
        self.node_id, self.host, self.port = node_id, host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        # answers received into reused buffers: a fresh megabyte per ShareFetch answer cost its
        # zero-filling and, for memory the allocator had just given back, a page fault per 4 KiB
        self._conn = BrokerConn(host, port, node_id=node_id, connect_timeout_s=min(10.0, timeout_s),
                                security=security, pool=FramePool(keep_bytes=_POOL_KEEP_BYTES))
        self.generation = 0
        self.versions: dict[int, int] = {}
        self.ranges: dict[int, tuple[int, int]] = {}
        self._cap = max_share_version
        self._handshake = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<NodeConn {self.node_id} {self.host}:{self.port}>"

    async def ensure(self) -> None:
        """Connect (again) if needed, and learn the share-API versions on a new connection."""
        if self._conn.connected and self.versions:
            return
        async with self._handshake:
            if self._conn.connected and self.versions:
                return
            self.generation += 1
            req = protocol.api_versions()
            try:
                payload = await self._conn.request(protocol.encode(req, self.client_id), timeout_s=self.timeout_s)
            except BrokerAuthError as exc:
                raise AuthenticationFailedError(str(exc)) from None
            resp = protocol.decode(req, payload)
            ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
            self.ranges, self.versions = ranges, {}
            self.versions = protocol.negotiate(ranges, self._cap)

    async def call(self, request: Any, *, timeout_s: float | None = None) -> Any:
        """Send one request and decode its answer. Raises BrokerConnError / TimeoutError (the
        connection is then dropped; the next call reconnects)."""
        await self.ensure()
        try:
            frame = await self._conn.request(protocol.encode(request, self.client_id),
                                             timeout_s=timeout_s or self.timeout_s, framed=True)
        except BrokerAuthError as exc:  # reconnected and re-authenticated in between, and refused
            raise AuthenticationFailedError(str(exc)) from None
        # the frame as received (size prefix included), read in place: a ShareFetch answer is a
        # megabyte, and copying it without its prefix cost about what kio's reading of it does
        return protocol.decode(request, memoryview(frame).toreadonly()[4:])

    async def close(self) -> None:
        await self._conn.close()


__all__ = ["BrokerConnError", "NodeConn"]
