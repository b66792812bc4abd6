"""A tiny blocking Kafka client for readiness probes: one request, one response, over kio.

Framing comes from :mod:`kshare_sidecar.protocol` (kio and sockets only), shared with the CLI:
the harness must not depend on the code under test — the sidecar's server (``wire/``, ``api/``)
and its backend client (``backend/``, aiokafka) — and ``protocol/`` is neither. A probe that must send
*malformed* frames is a different tool: ``testing/wirefuzz.py`` writes raw bytes itself.
"""

from __future__ import annotations

from typing import Any


def call(host: str, port: int, request: Any, *, timeout: float = 5.0) -> Any:
    """Send ``request`` (a kio request entity) on a new connection; the decoded response entity."""
    # kio is imported on use: the harness loads as a pytest plugin, before hypothesis's own
    # plugin, and kio's import would otherwise trip hypothesis's side-effect warning.
    from ..protocol.blocking import BlockingConnection

    with BlockingConnection(host, port, timeout=timeout, client_id="kshare-harness") as conn:
        return conn.call(request)


def broker_ready(host: str, port: int, *, timeout: float = 2.0) -> bool:
    """True when the broker answers Metadata with at least one broker and a controller."""
    from kio.schema.metadata.v1.request import MetadataRequest

    try:
        response = call(host, port, MetadataRequest(topics=()), timeout=timeout)
    except (OSError, ConnectionError, ValueError):
        return False
    return bool(response.brokers) and response.controller_id >= 0
